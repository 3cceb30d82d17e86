-- profile suggest: does the text column {col} of {table} hold this value (an ID seen in a Redis
-- key, a message or a log line)?
SELECT CAST(1 AS BIGINT) AS found FROM {table} WHERE CAST({col} AS VARCHAR) = $1 LIMIT 1
