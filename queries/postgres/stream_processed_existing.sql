-- Which of a batch's events the group has already recorded (any age: the unique key). $1 group, $2 JSON ids.
SELECT event_id FROM {{processed_event}}
WHERE consumer_group = $1 AND event_id IN (SELECT value FROM json_array_elements_text(CAST($2 AS json)))
