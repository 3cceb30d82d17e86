-- Profile fragment: an epoch-ms parameter as the wall clock of a DATETIME / TIMESTAMP column.
(TIMESTAMP('1970-01-01 00:00:00') + INTERVAL (({param} + {offset_ms}) * 1000) MICROSECOND)
