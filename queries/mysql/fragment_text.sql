-- Profile fragment: a status code the profile does not name, shown as text.
CAST({col} AS CHAR)
