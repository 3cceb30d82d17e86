-- Payment events of a run (its own topic) the relay has not published yet. Binds: topic.
SELECT CAST(COUNT(*) AS BIGINT) FROM {{outbox}} WHERE topic = $1 AND status = 'PENDING'
