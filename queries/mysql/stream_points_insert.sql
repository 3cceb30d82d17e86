-- Points for one payment event; a duplicate source_event_no fails only this statement.
INSERT INTO {{points_ledger}} (source_event_no, order_no, user_id, points, created_at)
VALUES (?, ?, ?, ?, ?)
