-- Invariant: one payment_flow per payNo, and (the storm pays each order with one payNo) one per
-- order. Offenders: order_no, flows, their payNos. Binds: req_id LIKE pattern of the run.
SELECT o.order_no, CAST(COUNT(p.id) AS SIGNED) AS n, CAST(COALESCE(GROUP_CONCAT(p.pay_no ORDER BY p.pay_no SEPARATOR ','), '') AS CHAR(4000)) AS pay_nos
FROM {{order_record}} o JOIN {{payment_flow}} p ON p.order_no = o.order_no
WHERE o.req_id LIKE ?
GROUP BY o.order_no
HAVING COUNT(p.id) > 1 OR COUNT(DISTINCT p.pay_no) <> COUNT(p.id)
