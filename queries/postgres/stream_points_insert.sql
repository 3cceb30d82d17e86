-- Points for a batch of payment events; source_event_no unique makes a replay a no-op.
-- $1: created_at, $2: JSON [{event_id, order_no, user_id, points}].
INSERT INTO {{points_ledger}} (source_event_no, order_no, user_id, points, created_at)
SELECT e.event_id, e.order_no, e.user_id, e.points, $1
FROM json_to_recordset(CAST($2 AS json)) AS e(event_id text, order_no text, user_id bigint, points bigint)
ON CONFLICT (source_event_no) DO NOTHING
