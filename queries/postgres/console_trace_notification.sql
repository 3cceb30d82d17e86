-- Console trace: notifications sent for an order or a payment event (uk event_id).
SELECT event_id, order_no, user_id, channel, body, created_at
FROM {{notification}}
WHERE order_no = $1 OR event_id = $2
ORDER BY created_at
LIMIT 50
