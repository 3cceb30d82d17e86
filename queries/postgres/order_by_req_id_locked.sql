-- The order of a req_id, read under finalize's lock of the record row: a locking read sees the
-- latest committed row (never an older snapshot), so an order committed by a create that held
-- the record row a moment ago is found.
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
  FROM {{order_record}} WHERE req_id = $1 FOR SHARE
