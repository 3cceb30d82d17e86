-- How this session is secured, for `idemguard doctor`: its TLS version ('' when plaintext) and
-- the authenticated user, as 'version|user'.
SELECT CONCAT(COALESCE((SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_version'), ''), '|', CURRENT_USER())
