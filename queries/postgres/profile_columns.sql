-- profile suggest: every column of the current schema's tables, with its type.
SELECT CAST(table_name AS VARCHAR) AS table_name, CAST(column_name AS VARCHAR) AS column_name,
       CAST(data_type AS VARCHAR) AS data_type
FROM information_schema.columns
WHERE table_schema = current_schema()
ORDER BY table_name, ordinal_position
LIMIT 20000
