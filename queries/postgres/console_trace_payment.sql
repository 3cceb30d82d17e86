-- Console trace: payment callbacks booked for an order or a payment event.
SELECT pay_no, order_no, amount, status, event_id, created_at
FROM {{payment_flow}}
WHERE order_no = $1 OR event_id = $2
ORDER BY created_at
LIMIT 50
