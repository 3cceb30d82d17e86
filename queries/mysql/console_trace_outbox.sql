-- Console trace: outbox rows of an order (msg_key = orderNo) or a payment event.
SELECT event_id, topic, msg_key, status, created_at, sent_at
FROM {{outbox}}
WHERE msg_key = ? OR event_id = ?
ORDER BY created_at
LIMIT 50
