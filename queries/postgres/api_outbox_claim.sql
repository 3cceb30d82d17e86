-- The relay's next batch; SKIP LOCKED lets several relays share the table without blocking.
SELECT id, event_id, topic, msg_key, headers, payload FROM {{outbox}}
WHERE status = 'PENDING' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
