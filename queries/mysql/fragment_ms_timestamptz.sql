-- Profile fragment: a TIMESTAMP column (an instant, shown in the session's zone) read as epoch ms.
CAST(ROUND(UNIX_TIMESTAMP({col}) * 1000) AS SIGNED)
