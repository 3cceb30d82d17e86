-- doctor: the columns of one table of the source profile that are unique on their own (a
-- unique key or primary key of that one column, not a prefix of it).
SELECT CAST(MIN(column_name) AS CHAR) AS column_name
FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ? AND non_unique = 0
GROUP BY index_name
HAVING COUNT(*) = 1 AND MIN(sub_part) IS NULL
