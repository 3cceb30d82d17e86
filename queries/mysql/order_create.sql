-- Create an order through the create procedure (order_create_routine): order insert decided by
-- the unique keys, stock row-locked, checked, decremented and booked, in one transaction of
-- its own. One row: (outcome, order id, stock before) with outcome created | replayed |
-- unknown_sku | out_of_stock.
-- Binds: req_id, order_no, user_id, sku_id, quantity, amount, status, fence, now.
CALL {{order_record}}_create(?, ?, ?, ?, ?, ?, ?, ?, ?)
