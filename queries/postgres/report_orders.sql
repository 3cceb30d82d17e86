-- Post-incident report: orders created in [$1, $2), oldest first (bounded).
SELECT order_no FROM {{order_record}} WHERE created_at >= $1 AND created_at < $2 ORDER BY created_at LIMIT $3
