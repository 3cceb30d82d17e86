-- profile suggest: the base tables of the current database, the first ? by name, each row with
-- how many there are in all (those beyond ? are said as not read).
SELECT CAST(table_name AS CHAR) AS table_name,
       (SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.tables
        WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE') AS total
FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'
ORDER BY table_name
LIMIT ?
