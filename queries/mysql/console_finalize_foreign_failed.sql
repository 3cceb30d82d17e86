-- Finalize on a team's own record: write the team's code for FAILED, only while the record is
-- still as the operator saw it (its PROCESSING code and its created_at: the same row, not a new
-- one of the same request id) and, where the team keeps a version column, the version seen.
-- The version is bumped as the article's optimistic lock does on every status change (§2.3:
-- `SET status = …, version = version + 1 WHERE … AND version = ?`), so the team's own
-- version-checked writes see the change. Without a version column both are no-ops. Nothing fences
-- a late commit of the team's own service.
UPDATE {{idempotency_record}}
SET {{idempotency_record.status}} = {{code idempotency_record.status FAILED}},
    {{idempotency_record.response_code}} = ?, {{idempotency_record.response_body}} = ?{{bump idempotency_record.version?}}
WHERE {{idempotency_record.request_id}} = ?
  AND {{idempotency_record.status}} = {{code idempotency_record.status PROCESSING}}
  AND {{idempotency_record.created_at}} = {{at idempotency_record.created_at ?}}
  AND COALESCE({{idempotency_record.version?}}, -1) = COALESCE(?, -1)
