-- Which of a batch's eventIds this group processed within the dedup TTL. $3: JSON array of ids.
-- Driven from the ids, one probe of the unique key (consumer_group, event_id) each: the LATERAL …
-- LIMIT 1 keeps the planner from reading every row of the group and filtering, which it
-- prefers while it believes a group has few rows (one group holds the whole table here).
SELECT p.event_id
  FROM json_array_elements_text(CAST($3 AS json)) AS j(id)
  CROSS JOIN LATERAL (
        SELECT event_id FROM {{processed_event}}
         WHERE consumer_group = $1 AND event_id = j.id AND expire_at > $2
         LIMIT 1) AS p
