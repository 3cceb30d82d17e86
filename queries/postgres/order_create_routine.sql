-- The create transaction of line 1 as one server-side function, so an order costs the
-- database one round trip instead of six (BEGIN, insert, lock, decrement, movement, COMMIT).
-- Installed by `idemguard migrate` as one statement; `order_create` calls it.
--
--  0. Lock the request's idempotency record row (SELECT … FOR UPDATE) and refuse when it says
--     FAILED: the client was told no order exists and to send a new key, so no order may ever be
--     created for this request id — not even by a statement of a killed instance still in
--     flight. An operator's `finalize` locks the same row and looks for the order under that
--     lock, so the database serializes the two: whichever commits first, the other sees it.
--     Lock order: record row, then order keys, then inventory — finalize takes only the record
--     row and reads the order, so the two never wait on each other in a cycle. No record (the
--     idempotency.enabled = false fault switch): nothing to lock, the create goes on.
--  1. The unique keys req_id and order_no decide what is a duplicate, even when every layer
--     above let it through (seed §2.1, §6.1): ON CONFLICT DO NOTHING … RETURNING.
--     A duplicate writes nothing and returns 'replayed'; the caller's statement (its whole
--     transaction when autocommitted) ends, and the caller reads the first order back from the
--     primary (order_replay).
--  2. In the same transaction, SELECT stock … FOR UPDATE on inventory by primary key (seed
--     §2.2): two orders of one SKU can never both see the last unit.
--  3. Check it. Unknown SKU (SQLSTATE IGS01) and short stock (IGS02, DETAIL = the stock there
--     is) raise, which undoes the order insert: nothing is written.
--  4. Decrement (the table's CHECK (stock >= 0) refuses a negative stock whatever happens
--     above) and book the stock_movement, whose unique order_no stops one order from taking
--     stock twice.
-- Returns one row: ('created', new order id, stock before), ('replayed', NULL, NULL) or
-- ('abandoned', NULL, NULL) when the record is FAILED (nothing written).
-- Binds of the caller: req_id, order_no, user_id, sku_id, quantity, amount, status, fence, now.
CREATE OR REPLACE FUNCTION {{order_record}}_create(
  p_req_id VARCHAR, p_order_no VARCHAR, p_user_id BIGINT, p_sku_id BIGINT, p_quantity BIGINT,
  p_amount BIGINT, p_status VARCHAR, p_fence BIGINT, p_now BIGINT)
RETURNS TABLE (outcome VARCHAR, order_id BIGINT, stock_before BIGINT)
LANGUAGE plpgsql AS $routine$
DECLARE
  v_id     BIGINT;
  v_stock  BIGINT;
  v_record VARCHAR;
BEGIN
  SELECT status INTO v_record FROM {{idempotency_record}} WHERE request_id = p_req_id FOR UPDATE;
  IF v_record = 'FAILED' THEN
    RETURN QUERY SELECT 'abandoned'::VARCHAR, NULL::BIGINT, NULL::BIGINT;
    RETURN;
  END IF;
  INSERT INTO {{order_record}} (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at)
  VALUES (p_req_id, p_order_no, p_user_id, p_sku_id, p_quantity, p_amount, p_status, p_fence, p_now, p_now)
  ON CONFLICT DO NOTHING
  RETURNING id INTO v_id;
  IF v_id IS NULL THEN
    RETURN QUERY SELECT 'replayed'::VARCHAR, NULL::BIGINT, NULL::BIGINT;
    RETURN;
  END IF;
  SELECT stock INTO v_stock FROM {{inventory}} WHERE sku_id = p_sku_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'unknown SKU %', p_sku_id USING ERRCODE = 'IGS01';
  END IF;
  IF v_stock < p_quantity THEN
    RAISE EXCEPTION 'out of stock: SKU % has %, the order wants %', p_sku_id, v_stock, p_quantity
      USING ERRCODE = 'IGS02', DETAIL = v_stock::TEXT;
  END IF;
  UPDATE {{inventory}} SET stock = stock - p_quantity, version = version + 1, updated_at = p_now WHERE sku_id = p_sku_id;
  INSERT INTO {{stock_movement}} (order_no, req_id, sku_id, delta, created_at)
  VALUES (p_order_no, p_req_id, p_sku_id, -p_quantity, p_now);
  RETURN QUERY SELECT 'created'::VARCHAR, v_id, v_stock;
END
$routine$
