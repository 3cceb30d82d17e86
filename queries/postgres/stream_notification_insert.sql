-- One notification per payment event (event_id unique). $1: created_at, $2: JSON [{event_id, order_no, user_id, channel, body}].
INSERT INTO {{notification}} (event_id, order_no, user_id, channel, body, created_at)
SELECT e.event_id, e.order_no, e.user_id, e.channel, e.body, $1
FROM json_to_recordset(CAST($2 AS json)) AS e(event_id text, order_no text, user_id bigint, channel text, body text)
ON CONFLICT (event_id) DO NOTHING
