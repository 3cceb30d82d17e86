-- Console trace: stock movements of an order (uk order_no: more than one row would be a leak).
SELECT {{s.stock_movement.order_no}} AS order_no, {{s.stock_movement.req_id}} AS req_id, {{s.stock_movement.sku_id}} AS sku_id,
       {{s.stock_movement.delta}} AS delta, {{ms s.stock_movement.created_at}} AS created_at
FROM {{stock_movement}} s
WHERE {{s.stock_movement.order_no}} = $1 OR {{s.stock_movement.req_id}} = $2
ORDER BY {{s.stock_movement.created_at}}
LIMIT 50
