-- Payment events of a run (its own topic) the relay has not published yet. Binds: topic.
SELECT CAST(COUNT(*) AS SIGNED) FROM {{outbox}} WHERE topic = ? AND status = 'PENDING'
