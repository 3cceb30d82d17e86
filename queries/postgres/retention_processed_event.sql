-- Retention: one batch of the consumer's dedup state past expire_at (consumer.dedup_ttl, seed
-- §4.3). A redelivery older than that is still stopped by the sinks' unique keys. Rows another
-- transaction holds are skipped. $1 now, $2 batch size.
DELETE FROM {{processed_event}} WHERE id IN (
  SELECT id FROM {{processed_event}} WHERE expire_at < $1
  ORDER BY expire_at LIMIT $2 FOR UPDATE SKIP LOCKED)
