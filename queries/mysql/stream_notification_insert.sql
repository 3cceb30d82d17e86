-- One notification per payment event (event_id unique).
INSERT INTO {{notification}} (event_id, order_no, user_id, channel, body, created_at)
VALUES (?, ?, ?, ?, ?, ?)
