-- Chaos storm: every other session of this database (the caller ends each with KILL CONNECTION).
SELECT CAST(id AS SIGNED) FROM information_schema.processlist
 WHERE db = DATABASE() AND id <> CONNECTION_ID()
