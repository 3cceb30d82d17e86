-- Which of a batch's events the group has already recorded (any age: the unique key). $1 group, $2 JSON ids.
-- `= ANY(ARRAY(…))`, not `IN (SELECT …)`: the array is computed once and the unique index is
-- probed with it; the IN form let a generic plan made on a young table hash-join a scan of
-- every row, which grows with the table.
SELECT event_id FROM {{processed_event}}
WHERE consumer_group = $1 AND event_id = ANY(ARRAY(SELECT json_array_elements_text(CAST($2 AS json))))
