SELECT event_id FROM {{processed_event}}
WHERE consumer_group = ? AND event_id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(64) PATH '$')) AS j)
