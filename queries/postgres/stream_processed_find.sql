-- Which of a batch's eventIds this group processed within the dedup TTL. $3: JSON array of ids.
SELECT p.event_id FROM {{processed_event}} p
WHERE p.consumer_group = $1 AND p.expire_at > $2
  AND p.event_id IN (SELECT value FROM json_array_elements_text(CAST($3 AS json)))
