-- Retention: one batch of finished idempotency records past expire_at (idempotency.retention
-- after they finished). A PROCESSING record is never deleted: an operator resolves it. Rows another
-- transaction holds are skipped (SKIP LOCKED), so the purge never waits on the request path.
-- $1 now, $2 batch size.
DELETE FROM {{idempotency_record}} WHERE id IN (
  SELECT id FROM {{idempotency_record}} WHERE status <> 'PROCESSING' AND expire_at < $1
  ORDER BY expire_at LIMIT $2 FOR UPDATE SKIP LOCKED)
