-- Profile fragment: a DATETIME / TIMESTAMP column (wall clock at source.time_zone) read as epoch ms.
(CAST(TIMESTAMPDIFF(MICROSECOND, TIMESTAMP('1970-01-01 00:00:00'), {col}) DIV 1000 AS SIGNED) - {offset_ms})
