-- The persisted dedup state: consumer_group + event_id unique.
INSERT INTO {{processed_event}}
  (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (consumer_group, event_id) DO NOTHING
