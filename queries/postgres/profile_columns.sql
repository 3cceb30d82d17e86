-- profile suggest: every column of the current schema's tables, with its type, and how many
-- columns there are in all (those beyond the limit are said as not read).
SELECT CAST(table_name AS VARCHAR) AS table_name, CAST(column_name AS VARCHAR) AS column_name,
       CAST(data_type AS VARCHAR) AS data_type,
       (SELECT CAST(COUNT(*) AS BIGINT) FROM information_schema.columns
        WHERE table_schema = current_schema()) AS total
FROM information_schema.columns
WHERE table_schema = current_schema()
ORDER BY table_name, ordinal_position
LIMIT 20000
