-- Profile fragment: an epoch-ms parameter as an instant, compared with a TIMESTAMP column.
FROM_UNIXTIME({param} / 1000)
