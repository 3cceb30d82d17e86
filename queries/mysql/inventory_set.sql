-- Set the stock of a SKU, creating it if needed (seeding for tests, storms and the demo).
-- Binds: sku_id, stock, updated_at.
INSERT INTO {{inventory}} (sku_id, stock, updated_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE stock = VALUES(stock), version = version + 1, updated_at = VALUES(updated_at)
