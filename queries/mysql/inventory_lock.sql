-- The stock of one SKU, row-locked by primary key until the create transaction ends, so two
-- orders cannot both see the last unit (seed §2.2). No row: unknown SKU.
SELECT stock FROM {{inventory}} WHERE sku_id = ? FOR UPDATE
