-- The newest value of the `timestamp` column {col} of {table}, as epoch ms of its wall clock
-- (compared with the server's wall clock: a row ahead of it was written in another zone).
SELECT CAST(EXTRACT(EPOCH FROM MAX({col})) * 1000 AS BIGINT) AS wall_ms
FROM {table}
