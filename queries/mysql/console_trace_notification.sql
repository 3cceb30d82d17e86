-- Console trace: notifications sent for an order or a payment event (uk event_id).
SELECT {{n.notification.event_id}} AS event_id, {{n.notification.order_no}} AS order_no, {{n.notification.user_id}} AS user_id,
       {{n.notification.channel}} AS channel, CAST({{n.notification.body}} AS CHAR(4096)) AS body, {{ms n.notification.created_at}} AS created_at
FROM {{notification}} n
WHERE {{n.notification.order_no}} = ? OR {{n.notification.event_id}} = ?
ORDER BY {{n.notification.created_at}}
LIMIT 50
