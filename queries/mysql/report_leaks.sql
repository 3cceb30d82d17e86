-- Post-incident report: duplicates that got through — two effects for one requestId / order
-- in [start, end) of created_at. The unique keys make some impossible (they are checked anyway, in
-- case a key was dropped); points and notifications are unique per EVENT, so two events
-- crediting one ORDER pass every constraint and show up only here.
SELECT 'order_record' AS tbl, 'req_id' AS by_col, req_id AS dup_key, CAST(COUNT(*) AS SIGNED) AS n_rows,
       MIN(order_no) AS first_row, MAX(order_no) AS last_row
FROM {{order_record}} WHERE created_at >= ? AND created_at < ? GROUP BY req_id HAVING COUNT(*) > 1
UNION ALL
SELECT 'stock_movement', 'req_id', req_id, CAST(COUNT(*) AS SIGNED), MIN(order_no), MAX(order_no)
FROM {{stock_movement}} WHERE created_at >= ? AND created_at < ? GROUP BY req_id HAVING COUNT(*) > 1
UNION ALL
SELECT 'payment_flow', 'order_no', order_no, CAST(COUNT(*) AS SIGNED), MIN(pay_no), MAX(pay_no)
FROM {{payment_flow}} WHERE created_at >= ? AND created_at < ? GROUP BY order_no HAVING COUNT(*) > 1
UNION ALL
SELECT 'points_ledger', 'order_no', order_no, CAST(COUNT(*) AS SIGNED), MIN(source_event_no), MAX(source_event_no)
FROM {{points_ledger}} WHERE created_at >= ? AND created_at < ? GROUP BY order_no HAVING COUNT(*) > 1
UNION ALL
SELECT 'notification', 'order_no', order_no, CAST(COUNT(*) AS SIGNED), MIN(event_id), MAX(event_id)
FROM {{notification}} WHERE created_at >= ? AND created_at < ? GROUP BY order_no HAVING COUNT(*) > 1
