-- The "attempt" row of an operator action, written BEFORE the action runs: an action whose
-- audit cannot be written is not performed. Its outcome is filled in by console_audit_outcome.
INSERT INTO {{ops_audit}} (operator, environment, action, target, before_state, after_state, reason, outcome, detail, created_at)
VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)
