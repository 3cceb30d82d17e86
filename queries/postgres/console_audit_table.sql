-- The audit table of console actions, on its own: on a team's system (a foreign source profile)
-- it lives in the team's database next to the record table, created once by its DBA from this
-- file (idemguard never runs `migrate` there). The actions role needs INSERT and UPDATE on it.
CREATE TABLE IF NOT EXISTS {{ops_audit}} (
  id            BIGSERIAL    PRIMARY KEY,
  operator      VARCHAR(128) NOT NULL,
  environment   VARCHAR(64)  NOT NULL,
  action        VARCHAR(64)  NOT NULL,
  target        VARCHAR(255) NOT NULL,
  before_state  TEXT,
  after_state   TEXT,
  reason        TEXT,
  outcome       VARCHAR(32)  NOT NULL,
  detail        TEXT,
  created_at    BIGINT       NOT NULL
);
CREATE INDEX IF NOT EXISTS {{ops_audit}}_ix_created_at ON {{ops_audit}} (created_at);
CREATE INDEX IF NOT EXISTS {{ops_audit}}_ix_target ON {{ops_audit}} (target);
