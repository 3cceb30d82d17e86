-- Serializes concurrent `idemguard migrate` runs (two processes at once is harmless).
SELECT pg_advisory_lock(7342001)
