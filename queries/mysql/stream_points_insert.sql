-- Points for a batch of payment events; source_event_no unique makes a replay a no-op.
-- 1st: created_at, 2nd: JSON [{event_id, order_no, user_id, points}].
INSERT INTO {{points_ledger}} (source_event_no, order_no, user_id, points, created_at)
SELECT e.event_id, e.order_no, e.user_id, e.points, ?
FROM JSON_TABLE(?, '$[*]' COLUMNS (
  event_id VARCHAR(64) PATH '$.event_id', order_no VARCHAR(32) PATH '$.order_no',
  user_id BIGINT PATH '$.user_id', points BIGINT PATH '$.points')) AS e
ON DUPLICATE KEY UPDATE source_event_no = {{points_ledger}}.source_event_no
