-- Post-incident report: duplicates that got through — two effects for one requestId in
-- [since, until) of created_at. One stock decrement per order.
SELECT 'stock_movement' AS tbl, 'req_id' AS by_col, {{s.stock_movement.req_id}} AS dup_key, CAST(COUNT(*) AS SIGNED) AS n_rows,
       MIN({{s.stock_movement.order_no}}) AS first_row, MAX({{s.stock_movement.order_no}}) AS last_row
FROM {{stock_movement}} s
WHERE {{s.stock_movement.created_at}} >= {{at stock_movement.created_at ?}} AND {{s.stock_movement.created_at}} < {{at stock_movement.created_at ?}}
GROUP BY {{s.stock_movement.req_id}} HAVING COUNT(*) > 1
