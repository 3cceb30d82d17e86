-- The Audit view and the post-incident report: actions in [since, until), newest first.
SELECT id, operator, environment, action, target, CAST(before_state AS CHAR(16000)) AS before_state,
       CAST(after_state AS CHAR(16000)) AS after_state, CAST(reason AS CHAR(4000)) AS reason, outcome,
       CAST(detail AS CHAR(4000)) AS detail, created_at
FROM {{ops_audit}} WHERE created_at >= ? AND created_at < ?
ORDER BY id DESC LIMIT ?
