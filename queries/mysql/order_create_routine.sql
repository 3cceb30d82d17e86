-- The create transaction of line 1 as one stored procedure, so an order costs the database
-- one round trip instead of six (BEGIN, insert, lock, decrement, movement, COMMIT). Installed
-- by `idemguard migrate` as one statement (after order_create_routine_drop); `order_create`
-- calls it. It runs its own transaction: call it outside one.
--
--  0. Lock the request's idempotency record row (SELECT … FOR UPDATE) and refuse when it says
--     FAILED: the client was told no order exists and to send a new key, so no order may ever be
--     created for this request id — not even by a statement of a killed instance still in
--     flight. An operator's `finalize` locks the same row and looks for the order under that
--     lock, so the database serializes the two: whichever commits first, the other sees it.
--     Lock order: record row, then order keys, then inventory — finalize takes only the record
--     row and reads the order, so the two never wait on each other in a cycle. No record (the
--     idempotency.enabled = false fault switch): nothing to lock but the index gap, the create
--     goes on.
--  1. The unique keys req_id and order_no decide what is a duplicate, even
--     when every layer above let it through (seed §2.1, §6.1). Rows affected tell new from
--     duplicate: 1 = inserted, 2 = duplicate (its replay_count went up; the update must change
--     the row — under CLIENT_FOUND_ROWS a no-op update also reports 1). A duplicate commits
--     (only the replay count) and returns 'replayed'; the caller reads the first order back
--     from the primary (order_replay).
--  2. In the same transaction, SELECT stock … FOR UPDATE on inventory by primary key (seed
--     §2.2): two orders of one SKU can never both see the last unit.
--  3. Check it. Unknown SKU or short stock: ROLLBACK (the order insert is undone, nothing is
--     written) and return 'unknown_sku' / 'out_of_stock' with the stock there is.
--  4. Decrement (the table's CHECK (stock >= 0) refuses a negative stock whatever happens
--     above), book the stock_movement (unique order_no: one order never takes stock twice),
--     COMMIT, return 'created'.
-- Any SQL error (a deadlock victim, a duplicate movement) rolls back and is raised again.
-- Returns one row: (outcome, order id or NULL, stock before or NULL); outcome 'abandoned' when
-- the record is FAILED (nothing written).
-- Binds of the caller: req_id, order_no, user_id, sku_id, quantity, amount, status, fence, now.
CREATE PROCEDURE {{order_record}}_create(
  IN p_req_id VARCHAR(128), IN p_order_no VARCHAR(32), IN p_user_id BIGINT, IN p_sku_id BIGINT,
  IN p_quantity BIGINT, IN p_amount BIGINT, IN p_status VARCHAR(16), IN p_fence BIGINT, IN p_now BIGINT)
BEGIN
  DECLARE v_id BIGINT;
  DECLARE v_stock BIGINT DEFAULT NULL;
  DECLARE v_record VARCHAR(16) DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;
  START TRANSACTION;
  SELECT status INTO v_record FROM {{idempotency_record}} WHERE request_id = p_req_id FOR UPDATE;
  IF v_record = 'FAILED' THEN
    ROLLBACK;
    SELECT CAST('abandoned' AS CHAR(16)) AS outcome, CAST(NULL AS SIGNED) AS order_id, CAST(NULL AS SIGNED) AS stock_before;
  ELSE
    INSERT INTO {{order_record}} (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at)
    VALUES (p_req_id, p_order_no, p_user_id, p_sku_id, p_quantity, p_amount, p_status, p_fence, p_now, p_now)
    ON DUPLICATE KEY UPDATE replay_count = replay_count + 1;
    IF ROW_COUNT() <> 1 THEN
      COMMIT;
      SELECT CAST('replayed' AS CHAR(16)) AS outcome, CAST(NULL AS SIGNED) AS order_id, CAST(NULL AS SIGNED) AS stock_before;
    ELSE
      SET v_id = LAST_INSERT_ID();
      SELECT stock INTO v_stock FROM {{inventory}} WHERE sku_id = p_sku_id FOR UPDATE;
      IF v_stock IS NULL THEN
        ROLLBACK;
        SELECT CAST('unknown_sku' AS CHAR(16)) AS outcome, CAST(NULL AS SIGNED) AS order_id, CAST(NULL AS SIGNED) AS stock_before;
      ELSEIF v_stock < p_quantity THEN
        ROLLBACK;
        SELECT CAST('out_of_stock' AS CHAR(16)) AS outcome, CAST(NULL AS SIGNED) AS order_id, v_stock AS stock_before;
      ELSE
        UPDATE {{inventory}} SET stock = stock - p_quantity, version = version + 1, updated_at = p_now WHERE sku_id = p_sku_id;
        INSERT INTO {{stock_movement}} (order_no, req_id, sku_id, delta, created_at)
        VALUES (p_order_no, p_req_id, p_sku_id, -p_quantity, p_now);
        COMMIT;
        SELECT CAST('created' AS CHAR(16)) AS outcome, v_id AS order_id, v_stock AS stock_before;
      END IF;
    END IF;
  END IF;
END
