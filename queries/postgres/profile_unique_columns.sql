-- profile suggest: the columns of every unique index but the primary key (one row per column).
SELECT CAST(t.relname AS VARCHAR) AS table_name, CAST(i.relname AS VARCHAR) AS index_name,
       CAST(a.attname AS VARCHAR) AS column_name
FROM pg_index x
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(x.indkey)
WHERE x.indisunique AND NOT x.indisprimary AND n.nspname = current_schema()
ORDER BY 1, 2, 3
LIMIT 5000
