-- Record the outcome; only the current owner of a PROCESSING record may.
UPDATE {{idempotency_record}}
SET status = ?, response_code = ?, response_body = ?, order_no = ?, updated_at = ?, expire_at = ?,
    version = version + 1
WHERE request_id = ? AND status = 'PROCESSING' AND owner = ?
