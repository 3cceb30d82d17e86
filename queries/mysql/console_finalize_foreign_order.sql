-- Finalize on a team's own record: reconcile with the team's order table by the request id.
SELECT {{o.order_record.order_no}} AS order_no, {{name o.order_record.status}} AS status
FROM {{order_record}} o
WHERE {{o.order_record.req_id}} = ?
