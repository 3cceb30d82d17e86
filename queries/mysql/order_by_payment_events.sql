-- Which orders the payment events of a batch already paid: payment_event_id is unique, so an
-- event that paid one order can never pay another. 1st: JSON array of eventIds.
SELECT order_no, payment_event_id
  FROM {{order_record}}
 WHERE payment_event_id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(64) PATH '$')) AS j)
