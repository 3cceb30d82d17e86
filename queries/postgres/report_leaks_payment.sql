-- Post-incident report: duplicates that got through — two effects for one order in
-- [$1, $2) of created_at. A provider's repeated callback booked twice (the article's §1.1 incident).
SELECT 'payment_flow' AS tbl, 'order_no' AS by_col, {{p.payment_flow.order_no}} AS dup_key, CAST(COUNT(*) AS BIGINT) AS n_rows,
       MIN({{p.payment_flow.pay_no}}) AS first_row, MAX({{p.payment_flow.pay_no}}) AS last_row
FROM {{payment_flow}} p
WHERE {{p.payment_flow.created_at}} >= {{at payment_flow.created_at $1}} AND {{p.payment_flow.created_at}} < {{at payment_flow.created_at $2}}
GROUP BY {{p.payment_flow.order_no}} HAVING COUNT(*) > 1
