-- Post-incident report: idempotency records created in the window [since, until) whose status contradicts the
-- order tables — a FAILED record although an order exists for its request id (the client was
-- told to send a new key: a second order may follow), or a SUCCEEDED record whose order does not
-- exist. Bounded by the last bind.
SELECT r.request_id, r.status, COALESCE(o.order_no, r.order_no, '') AS order_no,
       CASE WHEN r.status = 'FAILED' THEN 'failed_with_order' ELSE 'succeeded_without_order' END AS problem
FROM {{idempotency_record}} r LEFT JOIN {{order_record}} o ON o.req_id = r.request_id
WHERE r.created_at >= ? AND r.created_at < ?
  AND ((r.status = 'FAILED' AND o.id IS NOT NULL)
    OR (r.status = 'SUCCEEDED' AND (r.order_no IS NULL
        OR NOT EXISTS (SELECT 1 FROM {{order_record}} x WHERE x.order_no = r.order_no))))
ORDER BY r.created_at
LIMIT ?
