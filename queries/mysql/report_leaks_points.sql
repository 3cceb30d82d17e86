-- Post-incident report: duplicates that got through — two effects for one order in
-- [since, until) of created_at. Points are unique per EVENT, so two events crediting one ORDER pass
-- every constraint and show up only here.
SELECT 'points_ledger' AS tbl, 'order_no' AS by_col, {{p.points_ledger.order_no}} AS dup_key, CAST(COUNT(*) AS SIGNED) AS n_rows,
       MIN({{p.points_ledger.source_event_no}}) AS first_row, MAX({{p.points_ledger.source_event_no}}) AS last_row
FROM {{points_ledger}} p
WHERE {{p.points_ledger.created_at}} >= {{at points_ledger.created_at ?}} AND {{p.points_ledger.created_at}} < {{at points_ledger.created_at ?}}
GROUP BY {{p.points_ledger.order_no}} HAVING COUNT(*) > 1
