SELECT pay_no, order_no, amount, status, event_id, created_at FROM {{payment_flow}} WHERE pay_no = $1
