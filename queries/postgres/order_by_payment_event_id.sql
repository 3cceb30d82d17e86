-- One order by its payment_event_id (unique), read from the pool it is run on: the primary for every
-- decision, the replica only for the console's views.
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
  FROM {{order_record}} WHERE payment_event_id = $1
