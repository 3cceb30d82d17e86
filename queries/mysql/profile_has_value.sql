-- profile suggest: does the text column {col} of {table} hold this value (an ID seen in a Redis
-- key, a message or a log line)?
SELECT CAST(1 AS SIGNED) AS found FROM {table} WHERE {col} = ? LIMIT 1
