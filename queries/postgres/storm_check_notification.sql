-- Invariant: one notification per payment event AND per order. A PAID order has exactly one, for the
-- event that paid it; any other order has none. Offenders: order_no, status, payment_event_id,
-- rows, their events. Binds: req_id LIKE pattern of the run.
SELECT o.order_no, o.status, COALESCE(o.payment_event_id, '') AS payment_event_id,
       CAST(COUNT(s.id) AS BIGINT) AS n, COALESCE(string_agg(s.event_id, ',' ORDER BY s.event_id), '') AS events
FROM {{order_record}} o LEFT JOIN {{notification}} s ON s.order_no = o.order_no
WHERE o.req_id LIKE $1
GROUP BY o.order_no, o.status, o.payment_event_id
HAVING COUNT(s.id) <> CASE WHEN o.status = 'PAID' THEN 1 ELSE 0 END
    OR SUM(CASE WHEN s.event_id <> o.payment_event_id THEN 1 ELSE 0 END) > 0
