-- Console trace: the idempotency record(s) of a requestId or an orderNo. A record without an
-- order_no column (the article's) is found by the requestId the order row resolves to (the
-- trace's next pass). Columns the source profile lacks come back NULL and are shown as unknown.
SELECT {{r.idempotency_record.request_id}} AS request_id, {{r.idempotency_record.biz_type?}} AS biz_type,
       CAST({{r.idempotency_record.request_hash?}} AS VARCHAR(64)) AS request_hash, {{name r.idempotency_record.status}} AS status,
       CAST({{r.idempotency_record.response_code?}} AS BIGINT) AS response_code, {{r.idempotency_record.order_no?}} AS order_no,
       {{r.idempotency_record.owner?}} AS owner, {{r.idempotency_record.fence?}} AS fence,
       {{ms r.idempotency_record.lease_until?}} AS lease_until, {{r.idempotency_record.replay_count?}} AS replay_count,
       {{ms r.idempotency_record.created_at}} AS created_at, {{ms r.idempotency_record.updated_at?}} AS updated_at,
       {{ms r.idempotency_record.expire_at?}} AS expire_at, {{r.idempotency_record.version?}} AS version
FROM {{idempotency_record}} r
WHERE {{r.idempotency_record.request_id}} = $1 OR {{r.idempotency_record.order_no?}} = $2
ORDER BY {{r.idempotency_record.created_at}}
LIMIT 20
