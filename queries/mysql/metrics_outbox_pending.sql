-- Metrics: outbox rows the relay has not published yet and the oldest one's created_at (epoch
-- ms; NULL when none). Read through the (status, id) index; pending rows are few. No binds.
SELECT CAST(COUNT(*) AS SIGNED) AS n, CAST(MIN(created_at) AS SIGNED) AS oldest
FROM {{outbox}} WHERE status = 'PENDING'
