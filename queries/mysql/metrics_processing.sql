-- Metrics: idempotency records PROCESSING now and the oldest one's created_at (epoch ms; NULL
-- when none). Read through the (status, created_at) index. No binds.
SELECT CAST(COUNT(*) AS SIGNED) AS n, CAST(MIN(created_at) AS SIGNED) AS oldest
FROM {{idempotency_record}} WHERE status = 'PROCESSING'
