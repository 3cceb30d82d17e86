-- Chaos storm: end every other session of this database; the ids of those ended. (CASE: the
-- asking session is never terminated, whatever order the planner evaluates the conditions in.)
SELECT CAST(pid AS BIGINT) FROM pg_stat_activity
 WHERE CASE WHEN datname = current_database() AND pid <> pg_backend_pid()
            THEN pg_terminate_backend(pid) ELSE false END
