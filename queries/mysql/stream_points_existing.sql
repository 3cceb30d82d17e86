-- Which of a batch's events already have their points row (the sink's unique key). JSON ids.
SELECT source_event_no FROM {{points_ledger}}
WHERE source_event_no IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(64) PATH '$')) AS j)
