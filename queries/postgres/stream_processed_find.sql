-- Has this group processed this event within the dedup TTL? (1 or 0)
SELECT CAST(COUNT(*) AS BIGINT) FROM {{processed_event}}
WHERE consumer_group = $1 AND event_id = $2 AND expire_at > $3
