-- Console trace: outbox rows of an order (msg_key = orderNo) or a payment event.
SELECT event_id, topic, msg_key, status, created_at, sent_at
FROM {{outbox}}
WHERE msg_key = $1 OR event_id = $2
ORDER BY created_at
LIMIT 50
