SELECT request_id, biz_type, request_hash, status, CAST(response_code AS SIGNED) AS response_code, CAST(response_body AS CHAR(16000)) AS response_body, order_no,
       owner, fence, lease_until, replay_count, created_at, updated_at, expire_at, version
FROM {{idempotency_record}} WHERE request_id = ?
