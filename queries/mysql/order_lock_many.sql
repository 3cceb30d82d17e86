-- The orders of a batch of transitions (the payment consumer's order sink), locked until the
-- transaction ends. MariaDB takes the row locks in the order of the JSON array, not of the
-- ORDER BY: the caller (Orders::transition_batch_in) passes the orderNos sorted and distinct,
-- so two consumers locking overlapping batches take the locks in the same order and cannot
-- deadlock. 1st: JSON array of orderNos.
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
  FROM {{order_record}}
 WHERE order_no IN (SELECT j.order_no FROM JSON_TABLE(?, '$[*]' COLUMNS (order_no VARCHAR(32) PATH '$')) AS j)
 ORDER BY order_no
   FOR UPDATE
