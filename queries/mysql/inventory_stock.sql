-- The stock of one SKU (no lock). No row: unknown SKU.
SELECT stock FROM {{inventory}} WHERE sku_id = ?
