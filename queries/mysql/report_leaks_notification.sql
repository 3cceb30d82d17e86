-- Post-incident report: duplicates that got through — two effects for one order in
-- [since, until) of created_at. Notifications are unique per EVENT: two events for one ORDER show up
-- only here.
SELECT 'notification' AS tbl, 'order_no' AS by_col, {{n.notification.order_no}} AS dup_key, CAST(COUNT(*) AS SIGNED) AS n_rows,
       MIN({{n.notification.event_id}}) AS first_row, MAX({{n.notification.event_id}}) AS last_row
FROM {{notification}} n
WHERE {{n.notification.created_at}} >= {{at notification.created_at ?}} AND {{n.notification.created_at}} < {{at notification.created_at ?}}
GROUP BY {{n.notification.order_no}} HAVING COUNT(*) > 1
