-- An operator finalizes a stuck record: applies only if it is still PROCESSING at the version
-- the operator reconciled (a record that finished a second earlier is left alone).
UPDATE {{idempotency_record}}
SET status = $1, response_code = $2, response_body = $3, order_no = $4, lease_until = 0, updated_at = $5, expire_at = $6,
    version = version + 1
WHERE request_id = $7 AND status = 'PROCESSING' AND version = $8
