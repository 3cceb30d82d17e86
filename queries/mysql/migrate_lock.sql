-- Serializes concurrent `idemguard migrate` runs; 1 = acquired, 0 = timed out.
SELECT CAST(GET_LOCK('idemguard.migrate', 60) AS SIGNED)
