-- The orders of a batch of transitions (the payment consumer's order sink), locked until the
-- transaction ends. In order_no order, so two consumers locking overlapping batches take the
-- locks in the same order and cannot deadlock. $1: JSON array of orderNos.
-- `= ANY(ARRAY(…))`, not `IN (SELECT …)`: the array is computed once and the unique index is
-- probed with it; the IN form let a generic plan made on a young table hash-join a scan of
-- every row, which grows with the table.
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
  FROM {{order_record}}
 WHERE order_no = ANY(ARRAY(SELECT json_array_elements_text(CAST($1 AS json))))
 ORDER BY order_no
   FOR UPDATE
