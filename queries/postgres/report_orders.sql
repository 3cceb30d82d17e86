-- Post-incident report: orders created in [$1, $2), oldest first (bounded).
SELECT {{o.order_record.order_no}} AS order_no FROM {{order_record}} o
WHERE {{o.order_record.created_at}} >= {{at order_record.created_at $1}} AND {{o.order_record.created_at}} < {{at order_record.created_at $2}}
ORDER BY {{o.order_record.created_at}} LIMIT $3
