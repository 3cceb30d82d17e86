-- Highest schema version applied (doctor, migrate).
SELECT CAST(COALESCE(MAX(version), 0) AS SIGNED) FROM idemguard_schema_version
