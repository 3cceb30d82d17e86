-- Profile fragment: an epoch-ms parameter compared with an epoch-seconds column.
({param} DIV 1000)
