-- The persisted dedup state: consumer_group + event_id unique.
INSERT INTO {{processed_event}}
  (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at)
SELECT ?, e.event_id, e.order_no, e.topic, e.kafka_partition, e.kafka_offset, e.outcome, ?, ?
FROM JSON_TABLE(?, '$[*]' COLUMNS (
  event_id VARCHAR(64) PATH '$.event_id', order_no VARCHAR(32) PATH '$.order_no', topic VARCHAR(249) PATH '$.topic',
  kafka_partition INT PATH '$.kafka_partition', kafka_offset BIGINT PATH '$.kafka_offset', outcome VARCHAR(32) PATH '$.outcome')) AS e
ON DUPLICATE KEY UPDATE event_id = {{processed_event}}.event_id
