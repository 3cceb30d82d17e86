-- Has this group processed this event within the dedup TTL? (1 or 0)
SELECT CAST(COUNT(*) AS SIGNED) FROM {{processed_event}}
WHERE consumer_group = ? AND event_id = ? AND expire_at > ?
