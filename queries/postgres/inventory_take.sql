-- Take stock for an order, under the row lock of inventory_lock. The CHECK (stock >= 0) of the
-- table refuses a negative result whatever the code above does.
-- Binds: quantity, updated_at, sku_id.
UPDATE {{inventory}} SET stock = stock - $1, version = version + 1, updated_at = $2 WHERE sku_id = $3
