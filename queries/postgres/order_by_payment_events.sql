-- Which orders the payment events of a batch already paid: payment_event_id is unique, so an
-- event that paid one order can never pay another. $1: JSON array of eventIds.
-- `= ANY(ARRAY(…))`, not `IN (SELECT …)`: the array is computed once and the unique index is
-- probed with it; the IN form let a generic plan made on a young table hash-join a scan of
-- every row, which grows with the table.
SELECT order_no, payment_event_id
  FROM {{order_record}}
 WHERE payment_event_id = ANY(ARRAY(SELECT json_array_elements_text(CAST($1 AS json))))
