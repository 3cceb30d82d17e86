-- Which of a batch's events the group has already recorded (any age: the unique key). $1 group, $2 JSON ids.
-- Driven from the ids, one probe of the unique key (consumer_group, event_id) each: the LATERAL …
-- LIMIT 1 keeps the planner from reading every row of the group and filtering, which it
-- prefers while it believes a group has few rows (one group holds the whole table here).
SELECT p.event_id
  FROM json_array_elements_text(CAST($2 AS json)) AS j(id)
  CROSS JOIN LATERAL (
        SELECT event_id FROM {{processed_event}}
         WHERE consumer_group = $1 AND event_id = j.id
         LIMIT 1) AS p
