-- The DLQ view: every redrive since ? (a redrive follows its message), oldest first, at most ?.
-- Ordered by created_at, then id: the created_at index serves both the range and the order (by
-- id alone, MySQL read the whole primary key).
SELECT id, operator, environment, action, target, CAST(before_state AS CHAR(16000)) AS before_state,
       CAST(after_state AS CHAR(16000)) AS after_state, CAST(reason AS CHAR(4000)) AS reason, outcome,
       CAST(detail AS CHAR(4000)) AS detail, created_at
FROM {{ops_audit}} WHERE action = 'redrive' AND created_at >= ?
ORDER BY created_at, id LIMIT ?
