-- Finalize on a team's own record: write the team's code for FAILED, only while the record is
-- still as the operator saw it (its PROCESSING code and its created_at: the same row, not a new
-- one of the same request id). Nothing fences a late commit of the team's own service.
UPDATE {{idempotency_record}}
SET {{idempotency_record.status}} = {{code idempotency_record.status FAILED}},
    {{idempotency_record.response_code}} = $1, {{idempotency_record.response_body}} = $2
WHERE {{idempotency_record.request_id}} = $3
  AND {{idempotency_record.status}} = {{code idempotency_record.status PROCESSING}}
  AND {{idempotency_record.created_at}} = {{at idempotency_record.created_at $4}}
