-- A redrive's "exactly once" rule: the rows of one DLQ position (?) that are a redrive done or
-- under way (outcome attempt or done), other than the row ? of the redrive asking. A failed
-- publish (error) or a refusal does not count: it may be retried. Each row's before_state says
-- which message it read (`audit_row_is_of`).
SELECT id, CAST(before_state AS CHAR(16000)) AS before_state FROM {{ops_audit}}
WHERE target = ? AND action = 'redrive' AND outcome IN ('attempt', 'done') AND id <> ?
ORDER BY id
