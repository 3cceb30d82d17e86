-- Which of a batch's eventIds this group processed within the dedup TTL. 3rd: JSON array of ids.
SELECT p.event_id FROM {{processed_event}} p
WHERE p.consumer_group = ? AND p.expire_at > ?
  AND p.event_id IN (SELECT j.event_id FROM JSON_TABLE(?, '$[*]' COLUMNS (event_id VARCHAR(64) PATH '$')) AS j)
