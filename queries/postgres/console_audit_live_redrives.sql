-- A redrive's "exactly once" rule: the rows of one DLQ position ($1) that are a redrive done or
-- under way (outcome attempt or done), other than the row $2 of the redrive asking. A failed
-- publish (error) or a refusal does not count: it may be retried. Each row's before_state says
-- which message it read (`audit_row_is_of`).
SELECT id, before_state FROM {{ops_audit}}
WHERE target = $1 AND action = 'redrive' AND outcome IN ('attempt', 'done') AND id <> $2
ORDER BY id
