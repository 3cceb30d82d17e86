-- profile suggest: the base tables of the current database.
SELECT CAST(table_name AS CHAR) AS table_name
FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'
ORDER BY table_name
LIMIT 1000
