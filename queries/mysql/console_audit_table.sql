-- The audit table of console actions, on its own: on a team's system (a foreign source profile)
-- it lives in the team's database next to the record table, created once by its DBA from this
-- file (idemguard never runs `migrate` there). The actions role needs INSERT and UPDATE on it.
CREATE TABLE IF NOT EXISTS {{ops_audit}} (
  id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  operator      VARCHAR(128) NOT NULL,
  environment   VARCHAR(64)  NOT NULL,
  action        VARCHAR(64)  NOT NULL,
  target        VARCHAR(255) NOT NULL,
  before_state  MEDIUMTEXT   NULL,
  after_state   MEDIUMTEXT   NULL,
  reason        TEXT         NULL,
  outcome       VARCHAR(32)  NOT NULL,
  detail        TEXT         NULL,
  created_at    BIGINT       NOT NULL,
  KEY ix_created_at (created_at),
  KEY ix_target (target)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
