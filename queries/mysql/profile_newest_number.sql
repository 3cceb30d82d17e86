-- profile suggest: the newest value of the integer time column {col} of {table} (epoch seconds
-- or milliseconds: its size says which).
SELECT CAST(MAX({col}) AS SIGNED) AS newest FROM {table}
