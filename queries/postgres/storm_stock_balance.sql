-- One SKU's books: current stock, the quantities of its orders, the decrements booked for it.
-- The storm compares them with the stock it set. Binds: sku_id (three times).
SELECT CAST(i.stock AS BIGINT) AS stock,
       (SELECT CAST(COALESCE(SUM(o.quantity), 0) AS BIGINT) FROM {{order_record}} o WHERE o.sku_id = $2) AS ordered,
       (SELECT CAST(COALESCE(SUM(-m.delta), 0) AS BIGINT) FROM {{stock_movement}} m WHERE m.sku_id = $3) AS taken
FROM {{inventory}} i WHERE i.sku_id = $1
