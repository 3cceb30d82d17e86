-- Invariant: no idempotency record of the run left PROCESSING past its lease (a dead owner's
-- record nobody could take over, or a released one nobody retried). Offenders: request_id,
-- owner, lease_until. Binds: request_id LIKE pattern of the run, now (ms).
SELECT request_id, owner, lease_until FROM {{idempotency_record}}
WHERE request_id LIKE $1 AND status = 'PROCESSING' AND lease_until < $2
ORDER BY request_id
