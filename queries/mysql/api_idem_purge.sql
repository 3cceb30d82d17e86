-- Retention: finished records past expire_at. PROCESSING records are never purged (an operator resolves them).
DELETE FROM {{idempotency_record}} WHERE status <> 'PROCESSING' AND expire_at < ?
