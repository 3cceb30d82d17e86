-- Profile fragment: an epoch-ms parameter compared with an epoch-seconds column.
(CAST({param} AS BIGINT) / 1000)
