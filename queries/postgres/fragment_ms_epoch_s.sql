-- Profile fragment: an epoch-seconds column read as epoch milliseconds.
({col} * 1000)
