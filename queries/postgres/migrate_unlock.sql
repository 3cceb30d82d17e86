SELECT pg_advisory_unlock(7342001)
