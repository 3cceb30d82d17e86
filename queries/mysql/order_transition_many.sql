-- The transitions of a batch, decided in code on rows order_lock_many locked in this
-- transaction (the state machine, the fence, the payment event): one UPDATE writes them all.
-- The version check stays, so a row changed since it was read is skipped, never overwritten;
-- the caller compares rows affected with the rows it sent. At most one row per order.
-- 1st: JSON [{order_no, version, status, fence, payment_event_id?}], 2nd: updated_at.
UPDATE {{order_record}} AS o
  JOIN JSON_TABLE(?, '$[*]' COLUMNS (
         order_no VARCHAR(32) PATH '$.order_no', version BIGINT PATH '$.version',
         status VARCHAR(16) PATH '$.status', fence BIGINT PATH '$.fence',
         payment_event_id VARCHAR(64) PATH '$.payment_event_id')) AS j
    ON o.order_no = j.order_no AND o.version = j.version
   SET o.payment_event_id = COALESCE(j.payment_event_id, o.payment_event_id),
       o.fence = GREATEST(o.fence, j.fence),
       o.status = j.status,
       o.updated_at = ?,
       o.version = o.version + 1
