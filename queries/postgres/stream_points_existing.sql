-- Which of a batch's events already have their points row (the sink's unique key). $1: JSON ids.
SELECT source_event_no FROM {{points_ledger}}
WHERE source_event_no IN (SELECT value FROM json_array_elements_text(CAST($1 AS json)))
