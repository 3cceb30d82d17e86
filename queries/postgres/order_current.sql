-- The order as it is now, locked until the transaction ends: the re-read after a transition
-- whose UPDATE matched nothing. A locking read sees the latest committed row even where a plain
-- SELECT would see an older snapshot (MySQL's REPEATABLE READ).
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
  FROM {{order_record}} WHERE order_no = $1
   FOR UPDATE
