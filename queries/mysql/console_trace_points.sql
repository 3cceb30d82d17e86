-- Console trace: points granted for an order or a payment event (uk source_event_no).
SELECT source_event_no, order_no, user_id, points, created_at
FROM {{points_ledger}}
WHERE order_no = ? OR source_event_no = ?
ORDER BY created_at
LIMIT 50
