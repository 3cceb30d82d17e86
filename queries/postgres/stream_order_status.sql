SELECT status, payment_event_id FROM {{order_record}} WHERE order_no = $1
