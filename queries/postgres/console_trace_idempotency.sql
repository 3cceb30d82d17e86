-- Console trace: the idempotency record(s) of a requestId or an orderNo.
SELECT request_id, biz_type, CAST(request_hash AS VARCHAR(64)) AS request_hash, status, CAST(response_code AS BIGINT) AS response_code, order_no, owner,
       fence, lease_until, replay_count, created_at, updated_at, expire_at, version
FROM {{idempotency_record}}
WHERE request_id = $1 OR order_no = $2
ORDER BY created_at
LIMIT 20
