-- Finalize on a team's own record (source profile): the record as the operator's action sees it.
SELECT {{r.idempotency_record.request_id}} AS request_id, {{name r.idempotency_record.status}} AS status,
       CAST({{r.idempotency_record.response_code?}} AS BIGINT) AS response_code, {{ms r.idempotency_record.created_at}} AS created_at,
       CAST({{r.idempotency_record.version?}} AS BIGINT) AS version
FROM {{idempotency_record}} r
WHERE {{r.idempotency_record.request_id}} = $1
