-- Console stuck view: PROCESSING idempotency records created before the cut-off (now - stuck threshold),
-- oldest first, with what the order table says about the same requestId. Columns the source
-- profile lacks (owner, lease, version…) come back NULL and are shown as unknown.
SELECT {{r.idempotency_record.request_id}} AS request_id, {{r.idempotency_record.order_no?}} AS order_no,
       {{r.idempotency_record.owner?}} AS owner, {{r.idempotency_record.fence?}} AS fence,
       {{ms r.idempotency_record.lease_until?}} AS lease_until, {{r.idempotency_record.replay_count?}} AS replay_count,
       {{ms r.idempotency_record.created_at}} AS created_at, {{ms r.idempotency_record.updated_at?}} AS updated_at,
       {{r.idempotency_record.version?}} AS version,
       {{o.order_record.order_no}} AS found_order_no, {{name o.order_record.status}} AS found_order_status,
       {{ms o.order_record.updated_at?}} AS found_order_updated_at
FROM {{idempotency_record}} r
LEFT JOIN {{order_record}} o ON {{o.order_record.req_id}} = {{r.idempotency_record.request_id}}
WHERE {{r.idempotency_record.status}} = {{code idempotency_record.status PROCESSING}}
  AND {{r.idempotency_record.created_at}} <= {{at idempotency_record.created_at ?}}
ORDER BY {{r.idempotency_record.created_at}}
LIMIT ?
