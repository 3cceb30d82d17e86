-- Every statement of this session is bounded by ? ms (given twice): a wait for a table's
-- metadata lock by lock_wait_timeout (whole seconds, both servers), the whole statement by
-- MariaDB's max_statement_time (seconds), or by MySQL's max_execution_time (ms; SELECTs only).
-- Each server reads only its own comment (MariaDB ignores `/*!50708`, MySQL ignores `/*M!`), so
-- both see two placeholders. Run on each new connection (src/db/bounds.rs), never with 0.
SET SESSION lock_wait_timeout = CEILING(? / 1000)
  /*M!100108 , max_statement_time = ? / 1000 */
  /*!50708 , max_execution_time = ? */
