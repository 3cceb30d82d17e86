SELECT event_id FROM {{notification}}
WHERE event_id IN (SELECT value FROM json_array_elements_text(CAST($1 AS json)))
