-- Finalize waits at most 5 s for the record's row lock: a create transaction still in flight
-- holds it — perhaps the statement of a killed instance, waiting on a stock row. The operator is
-- told to try again rather than left hanging. Session-wide: run on a connection of its own
-- (finalize detaches it from the pool and closes it afterwards).
SET SESSION innodb_lock_wait_timeout = 5
