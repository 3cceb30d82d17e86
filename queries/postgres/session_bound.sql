-- Every statement of this session ends after $1 ms, and so does a wait for a lock ($2 ms, the
-- same bound): `database.statement_timeout`, or `database.read_timeout` for the read faces. Run
-- on each new connection (src/db/bounds.rs), never with 0.
SELECT set_config('statement_timeout', CAST(CAST($1 AS BIGINT) AS TEXT), false),
       set_config('lock_timeout', CAST(CAST($2 AS BIGINT) AS TEXT), false)
