-- The order a payment callback books against, locked until the booking's transaction ends:
-- two callbacks with different payNos for one order are booked one after the other, so the
-- second sees the first and is refused as a duplicate payment.
SELECT order_no FROM {{order_record}} WHERE order_no = ? FOR UPDATE
