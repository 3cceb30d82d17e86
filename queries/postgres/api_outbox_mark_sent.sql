UPDATE {{outbox}} SET status = 'SENT', sent_at = $1 WHERE id = $2
