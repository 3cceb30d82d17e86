-- One status transition, optimistic (seed §2.3): applies only if nobody wrote the order since
-- it was read (version), the order is in an allowed predecessor status (the state machine's
-- table, padded to four slots), and the writer's lock fence token is not older than the one
-- that last wrote the row — so a holder whose lock expired cannot overwrite its successor.
-- A NULL fence is an unfenced write (no lock held): it neither checks nor raises the fence.
-- Binds: status, fence, payment_event_id, updated_at, order_no, version, 4 × predecessor, fence.
UPDATE {{order_record}}
   SET status = ?,
       version = version + 1,
       fence = GREATEST(fence, COALESCE(?, 0)),
       payment_event_id = COALESCE(?, payment_event_id),
       updated_at = ?
 WHERE order_no = ?
   AND version = ?
   AND status IN (?, ?, ?, ?)
   AND fence <= COALESCE(?, fence)
