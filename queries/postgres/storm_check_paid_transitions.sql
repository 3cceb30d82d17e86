-- Invariant: one PAID transition per order. A PAID order names the payment event that moved it,
-- that event is one of the order's own payment flows, and the consumer group recorded exactly one
-- "applied" event for it; an order that is not PAID has none.
-- Offenders: order_no, status, payment_event_id, applied events. Binds: group, req_id LIKE pattern.
SELECT o.order_no, o.status, COALESCE(o.payment_event_id, '') AS payment_event_id,
       CAST(COUNT(pe.id) AS BIGINT) AS applied, COALESCE(string_agg(pe.event_id, ',' ORDER BY pe.event_id), '') AS events
FROM {{order_record}} o
LEFT JOIN {{processed_event}} pe ON pe.order_no = o.order_no AND pe.consumer_group = $1 AND pe.outcome = 'applied'
WHERE o.req_id LIKE $2
GROUP BY o.order_no, o.status, o.payment_event_id
HAVING (o.status = 'PAID' AND (COUNT(pe.id) <> 1
          OR NOT EXISTS (SELECT 1 FROM {{payment_flow}} f WHERE f.order_no = o.order_no AND f.event_id = o.payment_event_id)))
    OR (o.status <> 'PAID' AND COUNT(pe.id) > 0)
