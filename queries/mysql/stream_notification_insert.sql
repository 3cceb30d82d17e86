-- One notification per payment event (event_id unique). 1st: created_at, 2nd: JSON rows.
INSERT INTO {{notification}} (event_id, order_no, user_id, channel, body, created_at)
SELECT e.event_id, e.order_no, e.user_id, e.channel, e.body, ?
FROM JSON_TABLE(?, '$[*]' COLUMNS (
  event_id VARCHAR(64) PATH '$.event_id', order_no VARCHAR(32) PATH '$.order_no', user_id BIGINT PATH '$.user_id',
  channel VARCHAR(32) PATH '$.channel', body TEXT PATH '$.body')) AS e
ON DUPLICATE KEY UPDATE event_id = {{notification}}.event_id
