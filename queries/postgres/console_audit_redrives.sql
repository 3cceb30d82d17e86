-- The DLQ view: every redrive since $1 (a redrive follows its message), oldest first, at most $2.
-- Ordered by created_at, then id: the created_at index serves both the range and the order (by
-- id alone, MySQL read the whole primary key).
SELECT id, operator, environment, action, target, before_state, after_state, reason, outcome, detail, created_at
FROM {{ops_audit}} WHERE action = 'redrive' AND created_at >= $1
ORDER BY created_at, id LIMIT $2
