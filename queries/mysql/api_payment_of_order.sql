-- The first payment booked for an order (a paid order has exactly one).
SELECT pay_no, order_no, amount, status, event_id, created_at FROM {{payment_flow}} WHERE order_no = ? ORDER BY id LIMIT 1
