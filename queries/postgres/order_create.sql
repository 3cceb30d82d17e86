-- Create an order through the create routine (order_create_routine): order insert decided by
-- the unique keys, stock row-locked, checked, decremented and booked, in one transaction.
-- Run autocommitted: the statement is the transaction. Unknown SKU raises SQLSTATE IGS01, short
-- stock IGS02 with the stock there is in DETAIL; either way nothing is written.
-- Binds: req_id, order_no, user_id, sku_id, quantity, amount, status, fence, now.
SELECT outcome, order_id, stock_before FROM {{order_record}}_create($1, $2, $3, $4, $5, $6, $7, $8, $9)
