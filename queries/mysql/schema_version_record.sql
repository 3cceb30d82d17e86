INSERT IGNORE INTO idemguard_schema_version (version, applied_at) VALUES (?, ?)
