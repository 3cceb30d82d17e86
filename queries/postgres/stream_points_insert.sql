-- Points for one payment event; source_event_no unique makes a replay a no-op (0 rows).
INSERT INTO {{points_ledger}} (source_event_no, order_no, user_id, points, created_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (source_event_no) DO NOTHING
