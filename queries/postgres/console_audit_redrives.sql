-- The DLQ view: every redrive since $1 (a redrive follows its message), oldest first, at most $2.
SELECT id, operator, environment, action, target, before_state, after_state, reason, outcome, detail, created_at
FROM {{ops_audit}} WHERE action = 'redrive' AND created_at >= $1
ORDER BY id LIMIT $2
