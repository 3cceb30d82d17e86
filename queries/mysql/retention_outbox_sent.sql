-- Retention: one batch of published outbox rows sent before the cutoff (now -
-- retention.outbox_sent). A PENDING row is never deleted: the relay has not published it yet.
-- Walks the (status, id) index oldest first; binds: cutoff, batch size.
DELETE FROM {{outbox}} WHERE status = 'SENT' AND sent_at < ?
ORDER BY id LIMIT ?
