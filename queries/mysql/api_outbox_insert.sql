-- Written in the same transaction as the payment_flow row: a crash after the commit loses no event.
INSERT INTO {{outbox}} (event_id, topic, msg_key, headers, payload, status, created_at)
VALUES (?, ?, ?, ?, ?, 'PENDING', ?)
