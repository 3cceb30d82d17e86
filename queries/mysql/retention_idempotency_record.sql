-- Retention: one batch of finished idempotency records past expire_at (idempotency.retention
-- after they finished). A PROCESSING record is never deleted: an operator resolves it. A short
-- statement on the expire_at index; binds: now, batch size.
DELETE FROM {{idempotency_record}} WHERE status <> 'PROCESSING' AND expire_at < ?
ORDER BY expire_at LIMIT ?
