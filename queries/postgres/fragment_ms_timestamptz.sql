-- Profile fragment: a `timestamptz` column (an instant) read as epoch ms.
CAST(EXTRACT(EPOCH FROM {col}) * 1000 AS BIGINT)
