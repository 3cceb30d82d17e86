-- An operator finalizes a stuck record: applies only if it is still PROCESSING at the version
-- the operator reconciled (a record that finished a second earlier is left alone).
UPDATE {{idempotency_record}}
SET status = ?, response_code = ?, response_body = ?, order_no = ?, lease_until = 0, updated_at = ?, expire_at = ?,
    version = version + 1
WHERE request_id = ? AND status = 'PROCESSING' AND version = ?
