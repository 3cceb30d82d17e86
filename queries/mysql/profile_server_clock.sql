-- The server's time zone (what DEFAULT CURRENT_TIMESTAMP writes a DATETIME in), its offset from
-- UTC in seconds, and its wall clock now as epoch ms of that wall clock.
SELECT CAST(CONCAT(@@system_time_zone, ' (time_zone ', @@time_zone, ')') AS CHAR) AS zone,
       CAST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) AS SIGNED) AS offset_s,
       CAST(TIMESTAMPDIFF(MICROSECOND, TIMESTAMP('1970-01-01 00:00:00'), NOW(3)) DIV 1000 AS SIGNED) AS wall_ms
