-- One notification per payment event (event_id unique).
INSERT INTO {{notification}} (event_id, order_no, user_id, channel, body, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (event_id) DO NOTHING
