-- profile suggest: the columns of every unique key but the primary key (one row per column).
SELECT CAST(table_name AS CHAR) AS table_name, CAST(index_name AS CHAR) AS index_name,
       CAST(column_name AS CHAR) AS column_name
FROM information_schema.statistics
WHERE table_schema = DATABASE() AND non_unique = 0 AND index_name <> 'PRIMARY'
ORDER BY table_name, index_name, seq_in_index
LIMIT 5000
