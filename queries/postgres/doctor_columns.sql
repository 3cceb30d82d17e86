-- doctor: the columns of one table of the source profile, with their types (current schema).
SELECT CAST(column_name AS VARCHAR) AS column_name, CAST(data_type AS VARCHAR) AS data_type
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1
ORDER BY ordinal_position
