UPDATE {{outbox}} SET status = 'SENT', sent_at = ? WHERE id = ?
