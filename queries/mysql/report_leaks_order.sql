-- Post-incident report: duplicates that got through — two effects for one requestId in
-- [since, until) of created_at. The unique key makes it impossible; checked anyway, in case a key
-- was dropped (or a team's table never had it).
SELECT 'order_record' AS tbl, 'req_id' AS by_col, {{o.order_record.req_id}} AS dup_key, CAST(COUNT(*) AS SIGNED) AS n_rows,
       MIN({{o.order_record.order_no}}) AS first_row, MAX({{o.order_record.order_no}}) AS last_row
FROM {{order_record}} o
WHERE {{o.order_record.created_at}} >= {{at order_record.created_at ?}} AND {{o.order_record.created_at}} < {{at order_record.created_at ?}}
GROUP BY {{o.order_record.req_id}} HAVING COUNT(*) > 1
