-- Set the stock of a SKU, creating it if needed (seeding for tests, storms and the demo).
-- Binds: sku_id, stock, updated_at.
INSERT INTO {{inventory}} (sku_id, stock, updated_at) VALUES ($1, $2, $3)
ON CONFLICT (sku_id) DO UPDATE
   SET stock = EXCLUDED.stock, version = {{inventory}}.version + 1, updated_at = EXCLUDED.updated_at
