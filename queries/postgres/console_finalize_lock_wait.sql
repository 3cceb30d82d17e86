-- Finalize waits at most 5 s for the record's row lock (this transaction only): a create
-- transaction still in flight holds it — perhaps the statement of a killed instance, waiting on
-- a stock row. The operator is told to try again rather than left hanging.
SET LOCAL lock_timeout = '5s'
