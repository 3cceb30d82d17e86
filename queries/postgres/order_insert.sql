-- Create an order. The unique keys req_id and order_no decide what is a duplicate, even when
-- every layer above let it through (seed §2.1). A duplicate inserts nothing: 0 rows affected,
-- no row returned; the caller ends its transaction and reads the first order back.
-- Binds: req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at.
INSERT INTO {{order_record}} (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT DO NOTHING
RETURNING id
