-- PROVISIONAL (replaced by the database layer's state machine): CREATED → PAID by one event.
UPDATE {{order_record}} SET status = 'PAID', payment_event_id = $1, version = version + 1, updated_at = $2
WHERE order_no = $3 AND status = 'CREATED'
