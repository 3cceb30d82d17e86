-- Take stock for an order, under the row lock of inventory_lock. The CHECK (stock >= 0) of the
-- table refuses a negative result whatever the code above does.
-- Binds: quantity, updated_at, sku_id.
UPDATE {{inventory}} SET stock = stock - ?, version = version + 1, updated_at = ? WHERE sku_id = ?
