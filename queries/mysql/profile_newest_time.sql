-- The newest value of the DATETIME / TIMESTAMP column {col} of {table}, as epoch ms of its wall
-- clock (compared with the server's wall clock: a row ahead of it was written in another zone).
SELECT CAST(TIMESTAMPDIFF(MICROSECOND, TIMESTAMP('1970-01-01 00:00:00'), MAX({col})) DIV 1000 AS SIGNED) AS wall_ms
FROM {table}
