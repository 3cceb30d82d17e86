-- Console trace: the order row by requestId, orderNo or the payment event that moved it to PAID.
SELECT {{o.order_record.req_id}} AS req_id, {{o.order_record.order_no}} AS order_no, {{o.order_record.user_id?}} AS user_id,
       {{o.order_record.sku_id?}} AS sku_id, {{o.order_record.quantity?}} AS quantity, {{o.order_record.amount?}} AS amount,
       {{name o.order_record.status}} AS status, {{o.order_record.version?}} AS version, {{o.order_record.fence?}} AS fence,
       {{o.order_record.payment_event_id?}} AS payment_event_id, {{ms o.order_record.created_at}} AS created_at,
       {{ms o.order_record.updated_at?}} AS updated_at
FROM {{order_record}} o
WHERE {{o.order_record.req_id}} = ? OR {{o.order_record.order_no}} = ? OR {{o.order_record.payment_event_id?}} = ?
ORDER BY {{o.order_record.created_at}}
LIMIT 20
