-- Console trace: notifications sent for an order or a payment event (uk event_id).
SELECT event_id, order_no, user_id, channel, CAST(body AS CHAR(4096)) AS body, created_at
FROM {{notification}}
WHERE order_no = ? OR event_id = ?
ORDER BY created_at
LIMIT 50
