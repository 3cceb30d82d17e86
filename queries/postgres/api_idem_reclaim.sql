-- Take over a PROCESSING record whose owner is gone; applies only if nobody changed it since it was read.
UPDATE {{idempotency_record}}
SET owner = $1, fence = $2, lease_until = $3, updated_at = $4, version = version + 1
WHERE request_id = $5 AND status = 'PROCESSING' AND version = $6
