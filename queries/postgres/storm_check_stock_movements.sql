-- Invariant: stock decremented once per order — one stock_movement row per order, of -quantity.
-- Offenders: order_no, movements, their total. Binds: req_id LIKE pattern of the run.
SELECT o.order_no, CAST(COUNT(m.id) AS BIGINT) AS n, CAST(COALESCE(SUM(m.delta), 0) AS BIGINT) AS total
FROM {{order_record}} o LEFT JOIN {{stock_movement}} m ON m.order_no = o.order_no
WHERE o.req_id LIKE $1
GROUP BY o.order_no, o.quantity
HAVING COUNT(m.id) <> 1 OR COALESCE(SUM(m.delta), 0) <> -o.quantity
