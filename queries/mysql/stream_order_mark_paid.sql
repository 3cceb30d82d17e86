-- PROVISIONAL (replaced by the database layer's state machine): CREATED → PAID by one event.
UPDATE {{order_record}} SET status = 'PAID', payment_event_id = ?, version = version + 1, updated_at = ?
WHERE order_no = ? AND status = 'CREATED'
