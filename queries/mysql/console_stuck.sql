-- Console stuck view: PROCESSING idempotency records created before the cut-off (now - stuck threshold),
-- oldest first, with what the order table says about the same requestId.
SELECT r.request_id, r.order_no, r.owner, r.fence, r.lease_until, r.replay_count, r.created_at, r.updated_at, r.version,
       o.order_no AS found_order_no, o.status AS found_order_status, o.updated_at AS found_order_updated_at
FROM {{idempotency_record}} r
LEFT JOIN {{order_record}} o ON o.req_id = r.request_id
WHERE r.status = 'PROCESSING' AND r.created_at <= ?
ORDER BY r.created_at
LIMIT ?
