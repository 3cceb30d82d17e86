SELECT event_id FROM {{notification}}
WHERE event_id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(64) PATH '$')) AS j)
