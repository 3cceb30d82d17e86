-- Console trace: the order row by requestId, orderNo or the payment event that moved it to PAID.
SELECT req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, created_at, updated_at
FROM {{order_record}}
WHERE req_id = ? OR order_no = ? OR payment_event_id = ?
ORDER BY created_at
LIMIT 20
