-- Locks: which plain-token lock values are requestIds the database knows — the article's §3.2
-- lock stores the requestId (`setIfAbsent(lockKey, requestId, 30s)`) — and their orders. Every
-- token of a scan in one statement: $1 is a JSON array of the tokens (text: the parameter is
-- typed TEXT, which every driver binds and describes).
SELECT t.token AS request_id, {{o.order_record.order_no}} AS order_no
FROM json_array_elements_text(CAST(CAST($1 AS TEXT) AS json)) AS t(token)
LEFT JOIN {{order_record}} o ON {{o.order_record.req_id}} = t.token
LEFT JOIN {{idempotency_record}} r ON {{r.idempotency_record.request_id}} = t.token
WHERE {{o.order_record.req_id}} IS NOT NULL OR {{r.idempotency_record.request_id}} IS NOT NULL
