-- doctor: the columns of one table of the source profile, with their types (current database).
SELECT CAST(column_name AS CHAR) AS column_name, CAST(data_type AS CHAR) AS data_type
FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ?
ORDER BY ordinal_position
