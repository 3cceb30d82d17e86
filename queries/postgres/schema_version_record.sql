INSERT INTO idemguard_schema_version (version, applied_at) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING
