-- The Audit view and the post-incident report: actions in [since, until), newest first.
SELECT id, operator, environment, action, target, before_state, after_state, reason, outcome, detail, created_at
FROM {{ops_audit}} WHERE created_at >= $1 AND created_at < $2
ORDER BY id DESC LIMIT $3
