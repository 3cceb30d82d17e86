-- Post-incident report: orders created in [?, ?), oldest first (bounded).
SELECT order_no FROM {{order_record}} WHERE created_at >= ? AND created_at < ? ORDER BY created_at LIMIT ?
