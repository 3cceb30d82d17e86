-- After a duplicate create: the first request's order. Run on the primary pool, never the
-- replica (seed §2.4). order_insert already counted the replay. No row: the conflict was on
-- order_no, not req_id.
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
  FROM {{order_record}} WHERE req_id = ?
