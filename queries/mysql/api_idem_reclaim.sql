-- Take over a PROCESSING record whose owner is gone; applies only if nobody changed it since it was read.
UPDATE {{idempotency_record}}
SET owner = ?, fence = ?, lease_until = ?, updated_at = ?, version = version + 1
WHERE request_id = ? AND status = 'PROCESSING' AND version = ?
