-- A provider's payment notification; pay_no unique books it once however often it is sent.
INSERT INTO {{payment_flow}} (pay_no, order_no, amount, status, event_id, created_at)
VALUES (?, ?, ?, 'SUCCEEDED', ?, ?)
