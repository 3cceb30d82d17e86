-- Every payment event of a run as the relay published it, to re-produce (MQ replay). Binds: topic.
SELECT event_id, msg_key, headers, payload FROM {{outbox}} WHERE topic = $1 ORDER BY id
