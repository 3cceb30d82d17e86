-- profile suggest: the base tables of the current schema, the first $1 by name, each row with
-- how many there are in all (those beyond $1 are said as not read).
SELECT CAST(table_name AS VARCHAR) AS table_name,
       (SELECT CAST(COUNT(*) AS BIGINT) FROM information_schema.tables
        WHERE table_schema = current_schema() AND table_type = 'BASE TABLE') AS total
FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
ORDER BY table_name
LIMIT $1
