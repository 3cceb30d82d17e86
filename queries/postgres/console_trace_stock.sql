-- Console trace: stock movements of an order (uk order_no: more than one row would be a leak).
SELECT order_no, req_id, sku_id, delta, created_at
FROM {{stock_movement}}
WHERE order_no = $1 OR req_id = $2
ORDER BY created_at
LIMIT 50
