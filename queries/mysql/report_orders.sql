-- Post-incident report: orders created in [since, until), oldest first (bounded).
SELECT {{o.order_record.order_no}} AS order_no FROM {{order_record}} o
WHERE {{o.order_record.created_at}} >= {{at order_record.created_at ?}} AND {{o.order_record.created_at}} < {{at order_record.created_at ?}}
ORDER BY {{o.order_record.created_at}} LIMIT ?
