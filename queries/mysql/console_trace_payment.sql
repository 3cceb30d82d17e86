-- Console trace: payment callbacks booked for an order or a payment event.
SELECT {{p.payment_flow.pay_no}} AS pay_no, {{p.payment_flow.order_no}} AS order_no, {{p.payment_flow.amount}} AS amount,
       {{p.payment_flow.status}} AS status, {{p.payment_flow.event_id}} AS event_id, {{ms p.payment_flow.created_at}} AS created_at
FROM {{payment_flow}} p
WHERE {{p.payment_flow.order_no}} = ? OR {{p.payment_flow.event_id}} = ?
ORDER BY {{p.payment_flow.created_at}}
LIMIT 50
