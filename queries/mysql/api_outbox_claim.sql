-- The relay's next batch; SKIP LOCKED lets several relays share the table without blocking.
SELECT id, event_id, topic, msg_key, CAST(headers AS CHAR(4000)) AS headers, CAST(payload AS CHAR(16000)) AS payload FROM {{outbox}}
WHERE status = 'PENDING' ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED
