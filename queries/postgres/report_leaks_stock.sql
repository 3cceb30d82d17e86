-- Post-incident report: duplicates that got through — two effects for one requestId in
-- [$1, $2) of created_at. One stock decrement per order.
SELECT 'stock_movement' AS tbl, 'req_id' AS by_col, {{s.stock_movement.req_id}} AS dup_key, CAST(COUNT(*) AS BIGINT) AS n_rows,
       MIN({{s.stock_movement.order_no}}) AS first_row, MAX({{s.stock_movement.order_no}}) AS last_row
FROM {{stock_movement}} s
WHERE {{s.stock_movement.created_at}} >= {{at stock_movement.created_at $1}} AND {{s.stock_movement.created_at}} < {{at stock_movement.created_at $2}}
GROUP BY {{s.stock_movement.req_id}} HAVING COUNT(*) > 1
