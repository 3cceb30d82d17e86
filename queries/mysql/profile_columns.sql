-- profile suggest: every column of the current database's tables, with its type, and how many
-- columns there are in all (those beyond the limit are said as not read).
SELECT CAST(table_name AS CHAR) AS table_name, CAST(column_name AS CHAR) AS column_name,
       CAST(data_type AS CHAR) AS data_type,
       (SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.columns
        WHERE table_schema = DATABASE()) AS total
FROM information_schema.columns
WHERE table_schema = DATABASE()
ORDER BY table_name, ordinal_position
LIMIT 20000
