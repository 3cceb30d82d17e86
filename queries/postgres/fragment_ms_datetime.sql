-- Profile fragment: a `timestamp` column (wall clock at source.time_zone) read as epoch ms.
(CAST(EXTRACT(EPOCH FROM {col}) * 1000 AS BIGINT) - {offset_ms})
