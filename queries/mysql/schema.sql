-- idemguard schema, MySQL 8 / MariaDB 10.6+. Applied by `idemguard migrate` (IF NOT EXISTS).
-- Indexes are declared inside CREATE TABLE, because MySQL has no CREATE INDEX IF NOT EXISTS.
-- sqlx's Any driver reads TEXT columns as BLOB: SELECTs cast them with a length,
-- CAST(col AS CHAR(n)), which MySQL sends as VARCHAR.
-- Table names are placeholders in double braces, replaced by the names in [tables] of the config.
-- Times are BIGINT epoch milliseconds (UTC) in both dialects.

-- The API layer's idempotency record: the unique request_id insert is the atomic claim (seed §5.3).
CREATE TABLE IF NOT EXISTS {{idempotency_record}} (
  id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  request_id     VARCHAR(128) NOT NULL,
  biz_type       VARCHAR(32)  NOT NULL,
  request_hash   VARCHAR(64)  NOT NULL,
  status         VARCHAR(16)  NOT NULL,
  response_code  INT          NULL,
  response_body  MEDIUMTEXT   NULL,
  order_no       VARCHAR(32)  NULL,
  owner          VARCHAR(255) NOT NULL,
  fence          BIGINT       NOT NULL DEFAULT 0,
  lease_until    BIGINT       NOT NULL,
  replay_count   BIGINT       NOT NULL DEFAULT 0,
  created_at     BIGINT       NOT NULL,
  updated_at     BIGINT       NOT NULL,
  expire_at      BIGINT       NOT NULL,
  version        BIGINT       NOT NULL DEFAULT 0,
  UNIQUE KEY uk_request_id (request_id),
  KEY ix_status_age (status, created_at),
  KEY ix_order_no (order_no),
  KEY ix_expire_at (expire_at),
  CONSTRAINT {{idempotency_record}}_ck_status CHECK (status IN ('PROCESSING', 'SUCCEEDED', 'FAILED'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Orders: req_id and order_no unique — the final arbiter (seed §2.1).
CREATE TABLE IF NOT EXISTS {{order_record}} (
  id                BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  req_id            VARCHAR(128) NOT NULL,
  order_no          VARCHAR(32)  NOT NULL,
  user_id           BIGINT       NOT NULL,
  sku_id            BIGINT       NOT NULL,
  quantity          BIGINT       NOT NULL,
  amount            BIGINT       NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  version           BIGINT       NOT NULL DEFAULT 0,
  fence             BIGINT       NOT NULL DEFAULT 0,
  payment_event_id  VARCHAR(64)  NULL,
  replay_count      BIGINT       NOT NULL DEFAULT 0,
  created_at        BIGINT       NOT NULL,
  updated_at        BIGINT       NOT NULL,
  UNIQUE KEY uk_req_id (req_id),
  UNIQUE KEY uk_order_no (order_no),
  UNIQUE KEY uk_payment_event_id (payment_event_id),
  KEY ix_status_age (status, created_at),
  KEY ix_user_id (user_id),
  CONSTRAINT {{order_record}}_ck_quantity CHECK (quantity > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Stock, locked by primary key with SELECT … FOR UPDATE (seed §2.2). Never negative.
CREATE TABLE IF NOT EXISTS {{inventory}} (
  sku_id      BIGINT NOT NULL PRIMARY KEY,
  stock       BIGINT NOT NULL,
  version     BIGINT NOT NULL DEFAULT 0,
  updated_at  BIGINT NOT NULL,
  CONSTRAINT {{inventory}}_ck_stock CHECK (stock >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One stock decrement per order: order_no unique.
CREATE TABLE IF NOT EXISTS {{stock_movement}} (
  id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  order_no    VARCHAR(32)  NOT NULL,
  req_id      VARCHAR(128) NOT NULL,
  sku_id      BIGINT       NOT NULL,
  delta       BIGINT       NOT NULL,
  created_at  BIGINT       NOT NULL,
  UNIQUE KEY uk_order_no (order_no),
  KEY ix_req_id (req_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Payment callbacks: pay_no unique.
CREATE TABLE IF NOT EXISTS {{payment_flow}} (
  id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  pay_no      VARCHAR(64)  NOT NULL,
  order_no    VARCHAR(32)  NOT NULL,
  amount      BIGINT       NOT NULL,
  status      VARCHAR(16)  NOT NULL,
  event_id    VARCHAR(64)  NOT NULL,
  created_at  BIGINT       NOT NULL,
  UNIQUE KEY uk_pay_no (pay_no),
  UNIQUE KEY uk_event_id (event_id),
  KEY ix_order_no (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Transactional outbox: written in the payment transaction, published by the relay.
CREATE TABLE IF NOT EXISTS {{outbox}} (
  id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id    VARCHAR(64)  NOT NULL,
  topic       VARCHAR(249) NOT NULL,
  msg_key     VARCHAR(128) NOT NULL,
  headers     TEXT         NOT NULL,
  payload     MEDIUMTEXT   NOT NULL,
  status      VARCHAR(16)  NOT NULL,
  created_at  BIGINT       NOT NULL,
  sent_at     BIGINT       NULL,
  UNIQUE KEY uk_event_id (event_id),
  KEY ix_status_id (status, id),
  KEY ix_msg_key (msg_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Consumer sinks, each with its own unique key (seed §4.4).
CREATE TABLE IF NOT EXISTS {{points_ledger}} (
  id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  source_event_no  VARCHAR(64)  NOT NULL,
  order_no         VARCHAR(32)  NOT NULL,
  user_id          BIGINT       NOT NULL,
  points           BIGINT       NOT NULL,
  created_at       BIGINT       NOT NULL,
  UNIQUE KEY uk_source_event_no (source_event_no),
  KEY ix_order_no (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{notification}} (
  id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id    VARCHAR(64)  NOT NULL,
  order_no    VARCHAR(32)  NOT NULL,
  user_id     BIGINT       NOT NULL,
  channel     VARCHAR(32)  NOT NULL,
  body        TEXT         NOT NULL,
  created_at  BIGINT       NOT NULL,
  UNIQUE KEY uk_event_id (event_id),
  KEY ix_order_no (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The consumer's persisted dedup state (seed §4.3): group + event_id unique.
CREATE TABLE IF NOT EXISTS {{processed_event}} (
  id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  consumer_group   VARCHAR(128) NOT NULL,
  event_id         VARCHAR(64)  NOT NULL,
  order_no         VARCHAR(32)  NULL,
  topic            VARCHAR(249) NOT NULL,
  kafka_partition  INT          NOT NULL,
  kafka_offset     BIGINT       NOT NULL,
  outcome          VARCHAR(32)  NOT NULL,
  processed_at     BIGINT       NOT NULL,
  expire_at        BIGINT       NOT NULL,
  UNIQUE KEY uk_group_event (consumer_group, event_id),
  KEY ix_event_id (event_id),
  KEY ix_order_no (order_no),
  KEY ix_expire_at (expire_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Every console action attempt, refused or done: console_audit_table.sql, which `migrate`
-- runs after this file (one definition, also what a team's DBA runs on a foreign system).

-- The post-incident report reads a window of each order-sized table by created_at (schema v4,
-- without these, `report` read the whole of each table; tests/trace_scale.rs). Outside
-- CREATE TABLE so that `migrate` adds them to a database created before v4; MySQL has no
-- CREATE INDEX IF NOT EXISTS, so `migrate` skips one that exists (error 1061).
CREATE INDEX ix_created_at ON {{order_record}} (created_at);
CREATE INDEX ix_created_at ON {{stock_movement}} (created_at);
CREATE INDEX ix_created_at ON {{payment_flow}} (created_at);
CREATE INDEX ix_created_at ON {{points_ledger}} (created_at);
CREATE INDEX ix_created_at ON {{notification}} (created_at);

CREATE TABLE IF NOT EXISTS idemguard_schema_version (
  version     BIGINT NOT NULL PRIMARY KEY,
  applied_at  BIGINT NOT NULL
) ENGINE=InnoDB;
