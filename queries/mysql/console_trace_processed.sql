-- Console trace: the consumer's dedup decisions (processed_event) for an order or an event.
SELECT consumer_group, event_id, order_no, topic, CAST(kafka_partition AS SIGNED) AS kafka_partition, kafka_offset, outcome,
       processed_at, expire_at
FROM {{processed_event}}
WHERE order_no = ? OR event_id = ?
ORDER BY processed_at
LIMIT 200
