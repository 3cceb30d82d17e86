-- Finalize locks the record row before it looks for the order, as the create routine does before
-- it inserts one (order_create_routine step 0): the database serializes the two, so a FAILED
-- answer is never written while a create of this request id is in flight, and a create never
-- commits after it.
SELECT status, version FROM {{idempotency_record}} WHERE request_id = $1 FOR UPDATE
