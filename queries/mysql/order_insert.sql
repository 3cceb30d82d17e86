-- Create an order. The unique keys req_id and order_no decide what is a duplicate, even when
-- every layer above let it through (seed §2.1, §6.1). Rows affected tell new from duplicate:
-- 1 = inserted, 2 = duplicate (its replay_count went up). The update must change the row:
-- sqlx connects with CLIENT_FOUND_ROWS, under which a no-op update such as
-- `id = LAST_INSERT_ID(id)` also reports 1 and a duplicate would look like a new order.
-- Binds: req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at.
INSERT INTO {{order_record}} (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE replay_count = replay_count + 1
