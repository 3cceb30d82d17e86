-- Profile fragment: an epoch-ms parameter as an instant, compared with a `timestamptz` column.
to_timestamp(CAST({param} AS BIGINT) / 1000.0)
