-- The session's TimeZone (what CURRENT_TIMESTAMP writes a `timestamp without time zone` in),
-- its offset from UTC in seconds, and its wall clock now as epoch ms of that wall clock.
SELECT CAST(current_setting('TimeZone') AS VARCHAR) AS zone,
       CAST(EXTRACT(TIMEZONE FROM now()) AS BIGINT) AS offset_s,
       CAST(EXTRACT(EPOCH FROM LOCALTIMESTAMP) * 1000 AS BIGINT) AS wall_ms
