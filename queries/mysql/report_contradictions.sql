-- Post-incident report: idempotency records created in [since, until) whose status contradicts the
-- order tables — a FAILED record although an order exists for its request id (the client was
-- told to send a new key: a second order may follow), or a SUCCEEDED record whose order does not
-- exist (neither the one it names nor one of its request id). Bounded by the limit.
SELECT {{r.idempotency_record.request_id}} AS request_id, {{name r.idempotency_record.status}} AS status,
       COALESCE({{o.order_record.order_no}}, {{r.idempotency_record.order_no?}}, '') AS order_no,
       CASE WHEN {{r.idempotency_record.status}} = {{code idempotency_record.status FAILED}} THEN 'failed_with_order' ELSE 'succeeded_without_order' END AS problem
FROM {{idempotency_record}} r LEFT JOIN {{order_record}} o ON {{o.order_record.req_id}} = {{r.idempotency_record.request_id}}
WHERE {{r.idempotency_record.created_at}} >= {{at idempotency_record.created_at ?}} AND {{r.idempotency_record.created_at}} < {{at idempotency_record.created_at ?}}
  AND (({{r.idempotency_record.status}} = {{code idempotency_record.status FAILED}} AND {{o.order_record.req_id}} IS NOT NULL)
    OR ({{r.idempotency_record.status}} = {{code idempotency_record.status SUCCEEDED}}
        AND NOT EXISTS (SELECT 1 FROM {{order_record}} x
                        WHERE {{x.order_record.order_no}} = COALESCE({{r.idempotency_record.order_no?}}, {{o.order_record.order_no}}))))
ORDER BY {{r.idempotency_record.created_at}}
LIMIT ?
