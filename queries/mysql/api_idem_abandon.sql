-- The owner failed before knowing the outcome: lease_until = 0 lets a retry reclaim at once.
UPDATE {{idempotency_record}} SET lease_until = 0, updated_at = ?, version = version + 1
WHERE request_id = ? AND status = 'PROCESSING' AND owner = ?
