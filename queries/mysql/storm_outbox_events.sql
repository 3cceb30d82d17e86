-- Every payment event of a run as the relay published it, to re-produce (MQ replay). Binds: topic.
SELECT event_id, msg_key, CAST(headers AS CHAR(4000)) AS headers, CAST(payload AS CHAR(16000)) AS payload
FROM {{outbox}} WHERE topic = ? ORDER BY id
