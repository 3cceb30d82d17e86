-- doctor: the columns of one table of the source profile that are unique on their own (a
-- unique index, constraint or primary key of that one column, not partial).
SELECT CAST(a.attname AS VARCHAR) AS column_name
FROM pg_index x
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
WHERE x.indisunique AND x.indnkeyatts = 1 AND x.indpred IS NULL
  AND n.nspname = current_schema() AND t.relname = $1
