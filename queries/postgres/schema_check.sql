-- Every column the code uses, of every table: fails on a database created by an older schema
-- (CREATE TABLE IF NOT EXISTS never alters a table that already exists).
SELECT id, request_id, biz_type, request_hash, status, response_code, response_body, order_no, owner, fence, lease_until, replay_count, created_at, updated_at, expire_at, version FROM {{idempotency_record}} WHERE 1 = 0;
SELECT id, req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, replay_count, created_at, updated_at FROM {{order_record}} WHERE 1 = 0;
SELECT sku_id, stock, version, updated_at FROM {{inventory}} WHERE 1 = 0;
SELECT id, order_no, req_id, sku_id, delta, created_at FROM {{stock_movement}} WHERE 1 = 0;
SELECT id, pay_no, order_no, amount, status, event_id, created_at FROM {{payment_flow}} WHERE 1 = 0;
SELECT id, event_id, topic, msg_key, headers, payload, status, created_at, sent_at FROM {{outbox}} WHERE 1 = 0;
SELECT id, source_event_no, order_no, user_id, points, created_at FROM {{points_ledger}} WHERE 1 = 0;
SELECT id, event_id, order_no, user_id, channel, body, created_at FROM {{notification}} WHERE 1 = 0;
SELECT id, consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at FROM {{processed_event}} WHERE 1 = 0;
SELECT id, operator, environment, action, target, before_state, after_state, reason, outcome, detail, created_at FROM {{ops_audit}} WHERE 1 = 0
