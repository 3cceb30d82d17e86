-- One SKU's books: current stock, the quantities of its orders, the decrements booked for it.
-- The storm compares them with the stock it set. Binds: sku_id (three times).
SELECT CAST(i.stock AS SIGNED) AS stock,
       (SELECT CAST(COALESCE(SUM(o.quantity), 0) AS SIGNED) FROM {{order_record}} o WHERE o.sku_id = ?) AS ordered,
       (SELECT CAST(COALESCE(SUM(-m.delta), 0) AS SIGNED) FROM {{stock_movement}} m WHERE m.sku_id = ?) AS taken
FROM {{inventory}} i WHERE i.sku_id = ?
