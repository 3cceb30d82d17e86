-- Record the outcome; only the current owner of a PROCESSING record may.
UPDATE {{idempotency_record}}
SET status = $1, response_code = $2, response_body = $3, order_no = $4, updated_at = $5, expire_at = $6,
    version = version + 1
WHERE request_id = $7 AND status = 'PROCESSING' AND owner = $8
