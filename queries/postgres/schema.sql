-- idemguard schema, PostgreSQL. Applied by `idemguard migrate` (idempotent: IF NOT EXISTS).
-- Table names are placeholders in double braces, replaced by the names in [tables] of the config.
-- Times are BIGINT epoch milliseconds (UTC) in both dialects: one representation, one comparison.

-- The API layer's idempotency record: the unique request_id insert is the atomic claim (seed §5.3).
CREATE TABLE IF NOT EXISTS {{idempotency_record}} (
  id             BIGSERIAL    PRIMARY KEY,
  request_id     VARCHAR(128) NOT NULL,
  biz_type       VARCHAR(32)  NOT NULL,
  request_hash   VARCHAR(64)  NOT NULL,            -- SHA-256 (hex) of method + path + canonical body
  status         VARCHAR(16)  NOT NULL,            -- PROCESSING | SUCCEEDED | FAILED
  response_code  INTEGER,
  response_body  TEXT,
  order_no       VARCHAR(32),
  owner          VARCHAR(255) NOT NULL,            -- instance id of the claimant
  fence          BIGINT       NOT NULL DEFAULT 0,  -- fence token of the claim
  lease_until    BIGINT       NOT NULL,
  replay_count   BIGINT       NOT NULL DEFAULT 0,
  created_at     BIGINT       NOT NULL,
  updated_at     BIGINT       NOT NULL,
  expire_at      BIGINT       NOT NULL,
  version        BIGINT       NOT NULL DEFAULT 0,
  CONSTRAINT {{idempotency_record}}_uk_request_id UNIQUE (request_id),
  CONSTRAINT {{idempotency_record}}_ck_status CHECK (status IN ('PROCESSING', 'SUCCEEDED', 'FAILED'))
);
CREATE INDEX IF NOT EXISTS {{idempotency_record}}_ix_status_age ON {{idempotency_record}} (status, created_at);
CREATE INDEX IF NOT EXISTS {{idempotency_record}}_ix_order_no ON {{idempotency_record}} (order_no);
CREATE INDEX IF NOT EXISTS {{idempotency_record}}_ix_expire_at ON {{idempotency_record}} (expire_at);

-- Orders: req_id and order_no unique — the final arbiter (seed §2.1).
CREATE TABLE IF NOT EXISTS {{order_record}} (
  id                BIGSERIAL    PRIMARY KEY,
  req_id            VARCHAR(128) NOT NULL,
  order_no          VARCHAR(32)  NOT NULL,
  user_id           BIGINT       NOT NULL,
  sku_id            BIGINT       NOT NULL,
  quantity          BIGINT       NOT NULL,
  amount            BIGINT       NOT NULL,          -- minor units (cents)
  status            VARCHAR(16)  NOT NULL,          -- CREATED | PAID | CANCELLED | REFUNDED …
  version           BIGINT       NOT NULL DEFAULT 0,-- optimistic lock of status transitions (seed §2.3)
  fence             BIGINT       NOT NULL DEFAULT 0,-- highest lock fence token that wrote this row
  payment_event_id  VARCHAR(64),                    -- the event that moved it to PAID
  replay_count      BIGINT       NOT NULL DEFAULT 0,-- duplicate creates the unique keys turned into replays
  created_at        BIGINT       NOT NULL,
  updated_at        BIGINT       NOT NULL,
  CONSTRAINT {{order_record}}_uk_req_id UNIQUE (req_id),
  CONSTRAINT {{order_record}}_uk_order_no UNIQUE (order_no),
  CONSTRAINT {{order_record}}_uk_payment_event_id UNIQUE (payment_event_id),
  CONSTRAINT {{order_record}}_ck_quantity CHECK (quantity > 0)
);
CREATE INDEX IF NOT EXISTS {{order_record}}_ix_status_age ON {{order_record}} (status, created_at);
CREATE INDEX IF NOT EXISTS {{order_record}}_ix_user_id ON {{order_record}} (user_id);

-- Stock, locked by primary key with SELECT … FOR UPDATE (seed §2.2). Never negative.
CREATE TABLE IF NOT EXISTS {{inventory}} (
  sku_id      BIGINT PRIMARY KEY,
  stock       BIGINT NOT NULL,
  version     BIGINT NOT NULL DEFAULT 0,
  updated_at  BIGINT NOT NULL,
  CONSTRAINT {{inventory}}_ck_stock CHECK (stock >= 0)
);

-- One stock decrement per order: order_no unique.
CREATE TABLE IF NOT EXISTS {{stock_movement}} (
  id          BIGSERIAL    PRIMARY KEY,
  order_no    VARCHAR(32)  NOT NULL,
  req_id      VARCHAR(128) NOT NULL,
  sku_id      BIGINT       NOT NULL,
  delta       BIGINT       NOT NULL,
  created_at  BIGINT       NOT NULL,
  CONSTRAINT {{stock_movement}}_uk_order_no UNIQUE (order_no)
);
CREATE INDEX IF NOT EXISTS {{stock_movement}}_ix_req_id ON {{stock_movement}} (req_id);

-- Payment callbacks: pay_no unique, so a provider's repeated notification is booked once.
CREATE TABLE IF NOT EXISTS {{payment_flow}} (
  id          BIGSERIAL    PRIMARY KEY,
  pay_no      VARCHAR(64)  NOT NULL,
  order_no    VARCHAR(32)  NOT NULL,
  amount      BIGINT       NOT NULL,
  status      VARCHAR(16)  NOT NULL,
  event_id    VARCHAR(64)  NOT NULL,               -- the payment event this callback produced
  created_at  BIGINT       NOT NULL,
  CONSTRAINT {{payment_flow}}_uk_pay_no UNIQUE (pay_no),
  CONSTRAINT {{payment_flow}}_uk_event_id UNIQUE (event_id)
);
CREATE INDEX IF NOT EXISTS {{payment_flow}}_ix_order_no ON {{payment_flow}} (order_no);

-- Transactional outbox: written in the payment transaction, published by the relay.
CREATE TABLE IF NOT EXISTS {{outbox}} (
  id          BIGSERIAL    PRIMARY KEY,
  event_id    VARCHAR(64)  NOT NULL,
  topic       VARCHAR(249) NOT NULL,
  msg_key     VARCHAR(128) NOT NULL,               -- orderNo
  headers     TEXT         NOT NULL,               -- JSON object: eventId, requestId, orderNo
  payload     TEXT         NOT NULL,               -- JSON
  status      VARCHAR(16)  NOT NULL,               -- PENDING | SENT
  created_at  BIGINT       NOT NULL,
  sent_at     BIGINT,
  CONSTRAINT {{outbox}}_uk_event_id UNIQUE (event_id)
);
CREATE INDEX IF NOT EXISTS {{outbox}}_ix_status_id ON {{outbox}} (status, id);
CREATE INDEX IF NOT EXISTS {{outbox}}_ix_msg_key ON {{outbox}} (msg_key);

-- Consumer sinks, each with its own unique key (seed §4.4).
CREATE TABLE IF NOT EXISTS {{points_ledger}} (
  id               BIGSERIAL    PRIMARY KEY,
  source_event_no  VARCHAR(64)  NOT NULL,
  order_no         VARCHAR(32)  NOT NULL,
  user_id          BIGINT       NOT NULL,
  points           BIGINT       NOT NULL,
  created_at       BIGINT       NOT NULL,
  CONSTRAINT {{points_ledger}}_uk_source_event_no UNIQUE (source_event_no)
);
CREATE INDEX IF NOT EXISTS {{points_ledger}}_ix_order_no ON {{points_ledger}} (order_no);

CREATE TABLE IF NOT EXISTS {{notification}} (
  id          BIGSERIAL    PRIMARY KEY,
  event_id    VARCHAR(64)  NOT NULL,
  order_no    VARCHAR(32)  NOT NULL,
  user_id     BIGINT       NOT NULL,
  channel     VARCHAR(32)  NOT NULL,
  body        TEXT         NOT NULL,
  created_at  BIGINT       NOT NULL,
  CONSTRAINT {{notification}}_uk_event_id UNIQUE (event_id)
);
CREATE INDEX IF NOT EXISTS {{notification}}_ix_order_no ON {{notification}} (order_no);

-- The consumer's persisted dedup state (seed §4.3): group + event_id unique.
CREATE TABLE IF NOT EXISTS {{processed_event}} (
  id               BIGSERIAL    PRIMARY KEY,
  consumer_group   VARCHAR(128) NOT NULL,
  event_id         VARCHAR(64)  NOT NULL,
  order_no         VARCHAR(32),
  topic            VARCHAR(249) NOT NULL,
  kafka_partition  INTEGER      NOT NULL,
  kafka_offset     BIGINT       NOT NULL,
  outcome          VARCHAR(32)  NOT NULL,
  processed_at     BIGINT       NOT NULL,
  expire_at        BIGINT       NOT NULL,
  CONSTRAINT {{processed_event}}_uk_group_event UNIQUE (consumer_group, event_id)
);
CREATE INDEX IF NOT EXISTS {{processed_event}}_ix_event_id ON {{processed_event}} (event_id);
CREATE INDEX IF NOT EXISTS {{processed_event}}_ix_order_no ON {{processed_event}} (order_no);
CREATE INDEX IF NOT EXISTS {{processed_event}}_ix_expire_at ON {{processed_event}} (expire_at);

-- Every console action attempt, refused or done: console_audit_table.sql, which `migrate`
-- runs after this file (one definition, also what a team's DBA runs on a foreign system).

-- The post-incident report reads a window of each order-sized table by created_at (schema v4,
-- without these, `report` read the whole of each table; tests/trace_scale.rs).
CREATE INDEX IF NOT EXISTS {{order_record}}_ix_created_at ON {{order_record}} (created_at);
CREATE INDEX IF NOT EXISTS {{stock_movement}}_ix_created_at ON {{stock_movement}} (created_at);
CREATE INDEX IF NOT EXISTS {{payment_flow}}_ix_created_at ON {{payment_flow}} (created_at);
CREATE INDEX IF NOT EXISTS {{points_ledger}}_ix_created_at ON {{points_ledger}} (created_at);
CREATE INDEX IF NOT EXISTS {{notification}}_ix_created_at ON {{notification}} (created_at);

CREATE TABLE IF NOT EXISTS idemguard_schema_version (
  version     BIGINT PRIMARY KEY,
  applied_at  BIGINT NOT NULL
);
