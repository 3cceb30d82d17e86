-- profile suggest: the newest value of the integer time column {col} of {table} (epoch seconds
-- or milliseconds: its size says which).
SELECT CAST(MAX({col}) AS BIGINT) AS newest FROM {table}
