-- What the run's metrics must agree with: the orders and payment flows the run created.
-- Binds: req_id LIKE pattern (twice).
SELECT (SELECT CAST(COUNT(*) AS BIGINT) FROM {{order_record}} WHERE req_id LIKE $1) AS orders,
       (SELECT CAST(COUNT(p.id) AS BIGINT) FROM {{order_record}} o
          JOIN {{payment_flow}} p ON p.order_no = o.order_no WHERE o.req_id LIKE $2) AS payments
