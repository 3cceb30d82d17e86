-- profile suggest: the base tables of the current schema.
SELECT CAST(table_name AS VARCHAR) AS table_name
FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
ORDER BY table_name
LIMIT 1000
