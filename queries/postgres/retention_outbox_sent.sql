-- Retention: one batch of published outbox rows sent before $1 (now - retention.outbox_sent).
-- A PENDING row is never deleted: the relay has not published it yet. Rows another transaction
-- holds are skipped. $2 batch size.
DELETE FROM {{outbox}} WHERE id IN (
  SELECT id FROM {{outbox}} WHERE status = 'SENT' AND sent_at < $1
  ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
