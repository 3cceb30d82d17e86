-- Profile fragment: an epoch-ms parameter as the wall clock of a `timestamp` column.
(TIMESTAMP '1970-01-01 00:00:00' + (CAST({param} AS BIGINT) + {offset_ms}) * INTERVAL '1 millisecond')
