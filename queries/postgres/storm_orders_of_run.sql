-- The orders a storm run created: its requestIds carry the run id. Binds: req_id LIKE pattern.
SELECT req_id, order_no, status, sku_id, quantity FROM {{order_record}} WHERE req_id LIKE $1
