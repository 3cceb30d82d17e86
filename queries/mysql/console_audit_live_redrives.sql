-- A redrive's "exactly once" rule: the rows of one DLQ message (?) that are a redrive done or
-- under way (outcome attempt or done), other than the row ? of the redrive asking. A failed
-- publish (error) or a refusal does not count: it may be retried.
SELECT id FROM {{ops_audit}}
WHERE target = ? AND action = 'redrive' AND outcome IN ('attempt', 'done') AND id <> ?
ORDER BY id
