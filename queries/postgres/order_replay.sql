-- After a duplicate create: the first request's order, from the primary (an UPDATE can only
-- run there, so a lagging replica can never make a duplicate look new — seed §2.4). Counts the
-- replay, as MySQL's order_insert does. No row: the conflict was on order_no, not req_id.
UPDATE {{order_record}} SET replay_count = replay_count + 1
 WHERE req_id = $1
RETURNING id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at
