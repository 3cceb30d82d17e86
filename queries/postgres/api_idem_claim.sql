-- The atomic claim (seed §5.3): the unique request_id decides; 0 rows = someone holds it.
INSERT INTO {{idempotency_record}}
  (request_id, biz_type, request_hash, status, owner, fence, lease_until, created_at, updated_at, expire_at, version)
VALUES ($1, $2, $3, 'PROCESSING', $4, $5, $6, $7, $8, $9, 0)
ON CONFLICT (request_id) DO NOTHING
