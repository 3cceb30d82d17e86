-- The transitions of a batch, decided in code on rows order_lock_many locked in this
-- transaction (the state machine, the fence, the payment event): one UPDATE writes them all.
-- The version check stays, so a row changed since it was read is skipped, never overwritten;
-- the caller compares rows affected with the rows it sent. At most one row per order.
-- $1: JSON [{order_no, version, status, fence, payment_event_id?}], $2: updated_at.
UPDATE {{order_record}} AS o
   SET status = j.status,
       version = o.version + 1,
       fence = GREATEST(o.fence, j.fence),
       payment_event_id = COALESCE(j.payment_event_id, o.payment_event_id),
       updated_at = $2
  FROM json_to_recordset(CAST($1 AS json))
       AS j(order_no VARCHAR(32), version BIGINT, status VARCHAR(16), fence BIGINT, payment_event_id VARCHAR(64))
 WHERE o.order_no = j.order_no
   AND o.version = j.version
