-- profile suggest: every column of the current database's tables, with its type.
SELECT CAST(table_name AS CHAR) AS table_name, CAST(column_name AS CHAR) AS column_name,
       CAST(data_type AS CHAR) AS data_type
FROM information_schema.columns
WHERE table_schema = DATABASE()
ORDER BY table_name, ordinal_position
LIMIT 20000
