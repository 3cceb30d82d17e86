-- The atomic claim (seed §5.3): the unique request_id decides; a duplicate-key error = someone holds it.
INSERT INTO {{idempotency_record}}
  (request_id, biz_type, request_hash, status, owner, fence, lease_until, created_at, updated_at, expire_at, version)
VALUES (?, ?, ?, 'PROCESSING', ?, ?, ?, ?, ?, ?, 0)
