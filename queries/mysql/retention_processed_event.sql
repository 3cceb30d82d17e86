-- Retention: one batch of the consumer's dedup state past expire_at (consumer.dedup_ttl, seed
-- §4.3). A redelivery older than that is still stopped by the sinks' unique keys. A short
-- statement on the expire_at index; binds: now, batch size.
DELETE FROM {{processed_event}} WHERE expire_at < ?
ORDER BY expire_at LIMIT ?
