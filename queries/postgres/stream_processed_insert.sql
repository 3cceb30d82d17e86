-- The persisted dedup state: consumer_group + event_id unique.
-- $1 group, $2 processed_at, $3 expire_at, $4: JSON [{event_id, order_no, topic, kafka_partition, kafka_offset, outcome}].
INSERT INTO {{processed_event}}
  (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at)
SELECT $1, e.event_id, e.order_no, e.topic, e.kafka_partition, e.kafka_offset, e.outcome, $2, $3
FROM json_to_recordset(CAST($4 AS json))
  AS e(event_id text, order_no text, topic text, kafka_partition integer, kafka_offset bigint, outcome text)
ON CONFLICT (consumer_group, event_id) DO NOTHING
