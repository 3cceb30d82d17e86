-- How this session is secured, for `idemguard doctor`: its TLS version ('' when plaintext) and
-- the authenticated user, as 'version|user'.
SELECT COALESCE((SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl), '') || '|' || current_user
