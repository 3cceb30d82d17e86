-- Which of a batch's events already have their points row (the sink's unique key). $1: JSON ids.
-- `= ANY(ARRAY(…))`, not `IN (SELECT …)`: the array is computed once and the unique index is
-- probed with it; the IN form let a generic plan made on a young table hash-join a scan of
-- every row, which grows with the table.
SELECT source_event_no FROM {{points_ledger}}
WHERE source_event_no = ANY(ARRAY(SELECT json_array_elements_text(CAST($1 AS json))))
