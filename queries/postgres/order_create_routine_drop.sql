-- Before order_create_routine: nothing to drop on PostgreSQL, whose CREATE OR REPLACE FUNCTION
-- swaps the function atomically while callers keep running. A statement that does nothing, so
-- both dialects run the same steps.
SELECT 1
