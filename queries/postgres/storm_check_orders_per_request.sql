-- Invariant: exactly one order per requestId. Offenders: req_id and how many orders it has.
-- Binds: req_id LIKE pattern of the run.
SELECT req_id, CAST(COUNT(*) AS BIGINT) AS n FROM {{order_record}} WHERE req_id LIKE $1 GROUP BY req_id HAVING COUNT(*) <> 1
