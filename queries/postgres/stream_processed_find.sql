-- Which of a batch's eventIds this group processed within the dedup TTL. $3: JSON array of ids.
-- `= ANY(ARRAY(…))`, not `IN (SELECT …)`: the array is computed once and the unique index is
-- probed with it; the IN form let a generic plan made on a young table hash-join a scan of
-- every row, which grows with the table.
SELECT p.event_id FROM {{processed_event}} p
WHERE p.consumer_group = $1 AND p.expire_at > $2
  AND p.event_id = ANY(ARRAY(SELECT json_array_elements_text(CAST($3 AS json))))
