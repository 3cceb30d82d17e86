-- What the run's metrics must agree with: the orders and payment flows the run created.
-- Binds: req_id LIKE pattern (twice).
SELECT (SELECT CAST(COUNT(*) AS SIGNED) FROM {{order_record}} WHERE req_id LIKE ?) AS orders,
       (SELECT CAST(COUNT(p.id) AS SIGNED) FROM {{order_record}} o
          JOIN {{payment_flow}} p ON p.order_no = o.order_no WHERE o.req_id LIKE ?) AS payments
