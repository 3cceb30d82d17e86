-- profile suggest: the values of a status-like column {col} of {table} in a sample of its rows,
-- with their counts ({table} and {col} are identifiers read from information_schema).
SELECT CAST(s.v AS CHAR) AS value, CAST(COUNT(*) AS SIGNED) AS n
FROM (SELECT {col} AS v FROM {table} LIMIT 10000) s
GROUP BY s.v
ORDER BY n DESC
LIMIT 20
