-- The record of a stock decrement; order_no is unique, so one order can never take stock twice.
-- Binds: order_no, req_id, sku_id, delta, created_at.
INSERT INTO {{stock_movement}} (order_no, req_id, sku_id, delta, created_at) VALUES (?, ?, ?, ?, ?)
