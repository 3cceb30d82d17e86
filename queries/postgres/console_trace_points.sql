-- Console trace: points granted for an order or a payment event (uk source_event_no).
SELECT {{p.points_ledger.source_event_no}} AS source_event_no, {{p.points_ledger.order_no}} AS order_no,
       {{p.points_ledger.user_id}} AS user_id, {{p.points_ledger.points}} AS points, {{ms p.points_ledger.created_at}} AS created_at
FROM {{points_ledger}} p
WHERE {{p.points_ledger.order_no}} = $1 OR {{p.points_ledger.source_event_no}} = $2
ORDER BY {{p.points_ledger.created_at}}
LIMIT 50
