//! The order system of the design article "订单幂等三层防线" as its team built it: its DDL as
//! written on MariaDB (§2.1 order_record, §5.3 idempotency_record, §2.2 inventory) and a faithful
//! PostgreSQL translation, with the columns §2.3 (version) and §4.4 (payment_event_id) add, and
//! the payment, points and in-site-message tables of §1.1 / §4.4 in the same style. Set up here,
//! by the test, never by idemguard — and under table names of the fixture's own, so a test proves
//! the console reads the names the configuration gives.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemguard::config::{Config, ConfigSource, Dialect};
use idemguard::db::Database;

/// The fixture's table names (not the profile's: the test maps them through the environment).
pub const ORDERS: &str = "shop_order";
pub const IDEM: &str = "shop_idem_request";
pub const INVENTORY: &str = "shop_inventory";
pub const PAYMENTS: &str = "shop_pay_flow";
pub const POINTS: &str = "shop_points_flow";
pub const MESSAGES: &str = "shop_site_message";

/// The wall clock of the article's server: China Standard Time, as the example profile says.
pub const OFFSET: Duration = Duration::from_secs(8 * 3600);

const MARIADB: &str = "
CREATE TABLE shop_order (
  id BIGINT PRIMARY KEY AUTO_INCREMENT,
  req_id VARCHAR(64) NOT NULL COMMENT '幂等请求号',
  order_no VARCHAR(32) NOT NULL COMMENT '业务订单号',
  user_id BIGINT NOT NULL,
  status TINYINT NOT NULL DEFAULT 0,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  UNIQUE KEY uk_req_id (req_id),
  UNIQUE KEY uk_order_no (order_no)
) ENGINE=InnoDB;
ALTER TABLE shop_order ADD COLUMN version INT NOT NULL DEFAULT 0;
ALTER TABLE shop_order ADD COLUMN payment_event_id VARCHAR(64) NULL, ADD UNIQUE KEY uk_payment_event_id (payment_event_id);
CREATE TABLE shop_idem_request (
  id BIGINT PRIMARY KEY AUTO_INCREMENT,
  request_id VARCHAR(64) NOT NULL,
  request_hash VARCHAR(64) NOT NULL,
  status TINYINT NOT NULL DEFAULT 0,
  response_code INT NULL,
  response_body TEXT NULL,
  created_at DATETIME NOT NULL,
  expire_at DATETIME NOT NULL,
  UNIQUE KEY uk_request_id (request_id)
);
CREATE TABLE shop_inventory (sku_id BIGINT PRIMARY KEY, stock INT NOT NULL) ENGINE=InnoDB;
CREATE TABLE shop_pay_flow (
  id BIGINT PRIMARY KEY AUTO_INCREMENT,
  pay_no VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  amount BIGINT NOT NULL,
  status VARCHAR(16) NOT NULL,
  event_id VARCHAR(64) NOT NULL,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  UNIQUE KEY uk_pay_no (pay_no)
) ENGINE=InnoDB;
CREATE TABLE shop_points_flow (
  id BIGINT PRIMARY KEY AUTO_INCREMENT,
  source_event_no VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  user_id BIGINT NOT NULL,
  points INT NOT NULL,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  UNIQUE KEY uk_source_event_no (source_event_no)
) ENGINE=InnoDB;
CREATE TABLE shop_site_message (
  id BIGINT PRIMARY KEY AUTO_INCREMENT,
  event_id VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  user_id BIGINT NOT NULL,
  channel VARCHAR(16) NOT NULL,
  body VARCHAR(255) NOT NULL,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  UNIQUE KEY uk_event_id (event_id)
) ENGINE=InnoDB;
";

/// The same, translated: TINYINT → SMALLINT, DATETIME → timestamp (without time zone, a wall
/// clock like DATETIME), AUTO_INCREMENT → BIGSERIAL, UNIQUE KEY → named constraints, COMMENT →
/// COMMENT ON COLUMN.
const POSTGRES: &str = "
CREATE TABLE shop_order (
  id BIGSERIAL PRIMARY KEY,
  req_id VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  user_id BIGINT NOT NULL,
  status SMALLINT NOT NULL DEFAULT 0,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT uk_req_id UNIQUE (req_id),
  CONSTRAINT uk_order_no UNIQUE (order_no)
);
COMMENT ON COLUMN shop_order.req_id IS '幂等请求号';
COMMENT ON COLUMN shop_order.order_no IS '业务订单号';
ALTER TABLE shop_order ADD COLUMN version INT NOT NULL DEFAULT 0;
ALTER TABLE shop_order ADD COLUMN payment_event_id VARCHAR(64) NULL, ADD CONSTRAINT uk_payment_event_id UNIQUE (payment_event_id);
CREATE TABLE shop_idem_request (
  id BIGSERIAL PRIMARY KEY,
  request_id VARCHAR(64) NOT NULL,
  request_hash VARCHAR(64) NOT NULL,
  status SMALLINT NOT NULL DEFAULT 0,
  response_code INT NULL,
  response_body TEXT NULL,
  created_at TIMESTAMP NOT NULL,
  expire_at TIMESTAMP NOT NULL,
  CONSTRAINT uk_request_id UNIQUE (request_id)
);
CREATE TABLE shop_inventory (sku_id BIGINT PRIMARY KEY, stock INT NOT NULL);
CREATE TABLE shop_pay_flow (
  id BIGSERIAL PRIMARY KEY,
  pay_no VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  amount BIGINT NOT NULL,
  status VARCHAR(16) NOT NULL,
  event_id VARCHAR(64) NOT NULL,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT uk_pay_no UNIQUE (pay_no)
);
CREATE TABLE shop_points_flow (
  id BIGSERIAL PRIMARY KEY,
  source_event_no VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  user_id BIGINT NOT NULL,
  points INT NOT NULL,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT uk_source_event_no UNIQUE (source_event_no)
);
CREATE TABLE shop_site_message (
  id BIGSERIAL PRIMARY KEY,
  event_id VARCHAR(64) NOT NULL,
  order_no VARCHAR(32) NOT NULL,
  user_id BIGINT NOT NULL,
  channel VARCHAR(16) NOT NULL,
  body VARCHAR(255) NOT NULL,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT uk_event_id UNIQUE (event_id)
);
";

/// The article's system on a fresh database, and the example profile pointed at it.
pub struct ArticleSystem {
    pub dialect: Dialect,
    /// config/profiles/article-mysql.toml, its table names mapped to the fixture's.
    pub config: Config,
    /// Superuser access, for the fixture's own writes and checks.
    pub admin: Database,
}

/// The profile's table keys and the fixture's names for them.
pub const TABLES: [(&str, &str); 6] = [
    ("IDEMPOTENCY_RECORD", IDEM),
    ("ORDER_RECORD", ORDERS),
    ("INVENTORY", INVENTORY),
    ("PAYMENT_FLOW", PAYMENTS),
    ("POINTS_LEDGER", POINTS),
    ("NOTIFICATION", MESSAGES),
];

/// The example profile with the fixture's table names, as a team would set them.
pub fn article_config(extra_env: &[(&str, &str)]) -> Config {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/profiles/article-mysql.toml");
    let mut env: Vec<(String, String)> = TABLES
        .iter()
        .map(|(k, v)| (format!("IDEMGUARD_SOURCE__{k}__TABLE"), v.to_string()))
        .collect();
    let (allow, names) = crate::common::ALLOW_UNVERIFIED;
    env.push((allow.into(), names.into()));
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    Config::load(&ConfigSource {
        file: Some(file),
        env,
    })
    .expect("the example profile loads")
}

pub async fn article_system(dialect: Dialect) -> ArticleSystem {
    let base = crate::common::fresh_database_config(dialect).await;
    let admin = Database::connect(&base)
        .await
        .expect("connect to the fixture database");
    let ddl = if dialect == Dialect::Postgres {
        POSTGRES
    } else {
        MARIADB
    };
    for statement in ddl.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        sqlx::Executor::execute(&admin.pool, statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let mut config = article_config(&[]);
    config.database.url = base.database.url.clone();
    ArticleSystem {
        dialect,
        config,
        admin,
    }
}

/// `ms` (epoch milliseconds) as the article server's DATETIME wall clock.
pub fn wall_clock(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms as u64) + OFFSET;
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .trim_end_matches('Z')
        .replace('T', " ")
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl ArticleSystem {
    /// Run `sql` with `?` placeholders (rewritten to `$n` on PostgreSQL) and string binds.
    pub async fn exec(&self, sql: &str, binds: &[&str]) {
        let text = if self.dialect == Dialect::Postgres {
            let mut n = 0;
            sql.chars()
                .map(|c| {
                    if c == '?' {
                        n += 1;
                        format!("${n}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        } else {
            sql.replace("AS TIMESTAMP)", "AS DATETIME)")
        };
        let mut q = sqlx::query(&text);
        for b in binds {
            q = q.bind(b.to_string());
        }
        q.execute(&self.admin.pool)
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    }

    /// An idempotency record as §5.3 writes it: status 0 PROCESSING / 1 SUCCESS / 2 FAILED.
    pub async fn record(&self, request_id: &str, status: i64, created_ms: i64) {
        let (code, body) = if status == 1 {
            ("200", r#"{"code":0,"msg":"下单成功"}"#)
        } else {
            ("", "")
        };
        let cast = if self.dialect == Dialect::Postgres {
            "CAST(? AS SMALLINT)"
        } else {
            "?"
        };
        let sql = format!(
            "INSERT INTO {IDEM} (request_id, request_hash, status, response_code, response_body, created_at, expire_at) \
             VALUES (?, ?, {cast}, {}, {}, CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP))",
            if code.is_empty() { "NULL" } else { "200" },
            if body.is_empty() { "NULL" } else { "?" },
        );
        let hash = format!("{:064x}", created_ms);
        let status = status.to_string();
        let (created, expire) = (wall_clock(created_ms), wall_clock(created_ms + 86_400_000));
        let mut binds = vec![request_id, hash.as_str(), status.as_str()];
        if !body.is_empty() {
            binds.push(body);
        }
        binds.extend([created.as_str(), expire.as_str()]);
        self.exec(&sql, &binds).await;
    }

    /// An order as §2.1 inserts it (status 0), or paid by `event` (§2.3's update, version + 1; the
    /// paid code is 1: §2.3's 200 does not fit §2.1's TINYINT).
    pub async fn order(&self, req_id: &str, order_no: &str, event: Option<&str>, created_ms: i64) {
        let created = wall_clock(created_ms);
        self.exec(
            &format!("INSERT INTO {ORDERS} (req_id, order_no, user_id, status, created_at) VALUES (?, ?, 10086, 0, CAST(? AS TIMESTAMP))"),
            &[req_id, order_no, &created],
        )
        .await;
        if let Some(e) = event {
            self.exec(
                &format!("UPDATE {ORDERS} SET status = 1, version = version + 1, payment_event_id = ? WHERE order_no = ? AND version = 0"),
                &[e, order_no],
            )
            .await;
        }
    }

    /// The payment event's effects (§4.4): a payment flow row, points and an in-site message.
    pub async fn paid(&self, order_no: &str, pay_no: &str, event: &str, at_ms: i64) {
        let at = wall_clock(at_ms);
        self.exec(
            &format!("INSERT INTO {PAYMENTS} (pay_no, order_no, amount, status, event_id, created_at) VALUES (?, ?, 9900, 'SUCCESS', ?, CAST(? AS TIMESTAMP))"),
            &[pay_no, order_no, event, &at],
        )
        .await;
        self.exec(
            &format!("INSERT INTO {POINTS} (source_event_no, order_no, user_id, points, created_at) VALUES (?, ?, 10086, 99, CAST(? AS TIMESTAMP))"),
            &[event, order_no, &at],
        )
        .await;
        self.exec(
            &format!("INSERT INTO {MESSAGES} (event_id, order_no, user_id, channel, body, created_at) VALUES (?, ?, 10086, 'site', '支付成功', CAST(? AS TIMESTAMP))"),
            &[event, order_no, &at],
        )
        .await;
    }

    /// The stored status of a record (to see what finalize wrote).
    pub async fn record_status(&self, request_id: &str) -> i64 {
        let sql = if self.dialect == Dialect::Postgres {
            format!("SELECT CAST(status AS BIGINT) FROM {IDEM} WHERE request_id = $1")
        } else {
            format!("SELECT CAST(status AS SIGNED) FROM {IDEM} WHERE request_id = ?")
        };
        sqlx::query_scalar(&sql)
            .bind(request_id.to_string())
            .fetch_one(&self.admin.pool)
            .await
            .unwrap()
    }
}

/// The example profile file.
pub const PROFILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/profiles/article-mysql.toml"
);

impl ArticleSystem {
    /// What the real binary needs to read this fixture through the example profile: its
    /// database and the fixture's table names (the profile itself via `--config`).
    pub fn binary_env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = TABLES
            .iter()
            .map(|(k, v)| (format!("IDEMGUARD_SOURCE__{k}__TABLE"), v.to_string()))
            .collect();
        env.push((
            "IDEMGUARD_DATABASE__URL".into(),
            self.config.database.url.clone(),
        ));
        let (allow, names) = crate::common::ALLOW_UNVERIFIED;
        env.push((allow.into(), names.into()));
        env
    }
}

/// `idemguard --config <the example profile> args`, with `env`; (exit status, stdout+stderr).
pub fn run_profiled(env: &[(String, String)], args: &[&str]) -> (Option<i32>, String) {
    run_with_config(PROFILE, env, args)
}

/// `idemguard --config <config> args` with `env` on top, trace events off; (exit status,
/// stdout+stderr).
pub fn run_with_config<K: AsRef<OsStr>, V: AsRef<OsStr>>(
    config: &str,
    env: &[(K, V)],
    args: &[&str],
) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .env("IDEMGUARD_LOG", "error");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run idemguard");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The first JSON document of a command's output.
pub fn first_json(out: &str) -> serde_json::Value {
    serde_json::Deserializer::from_str(out)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON document: {out}"))
}

/// Redisson's `tryLockInnerAsync` script (RedissonLock.java): HSET field = 1 (or HINCRBY when
/// re-entered) and PEXPIRE, returning nil when taken.
pub const REDISSON_LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then \
    redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; end; \
    if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; end; return redis.call('pttl', KEYS[1]);";

/// The main Redis of the stack, as the article's services reach it.
pub async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open("redis://127.0.0.1:6379")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the main Redis answers (scripts/stack up)")
}

/// Takes `name` as Redisson's RLock does for `field` (`<clientId>:<threadId>`), 30 s watchdog.
pub async fn redisson_lock(c: &mut redis::aio::MultiplexedConnection, name: &str, field: &str) {
    let taken: Option<i64> = redis::cmd("EVAL")
        .arg(REDISSON_LOCK)
        .arg(1)
        .arg(name)
        .arg(30_000)
        .arg(field)
        .query_async(c)
        .await
        .unwrap();
    assert_eq!(taken, None, "Redisson's script took {name}");
}

/// The article's §3.2 lock: `setIfAbsent(lockKey, requestId, Duration.ofSeconds(30))`.
pub async fn set_if_absent(c: &mut redis::aio::MultiplexedConnection, key: &str, value: &str) {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("EX")
        .arg(30)
        .query_async(c)
        .await
        .unwrap();
    assert_eq!(set.as_deref(), Some("OK"), "setIfAbsent took {key}");
}

/// A lock the way redis-py's `Lock` takes it (its own client, in the stack's venv) on the Redis
/// at `url`; returns the token it stored.
pub fn redis_py_lock(url: &str, name: &str) -> String {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.stack/venv/bin/python");
    let script = "import sys, redis\n\
        r = redis.Redis.from_url(sys.argv[1])\n\
        l = r.lock(sys.argv[2], timeout=30)\n\
        assert l.acquire(blocking=False)\n\
        print(l.local.token.decode())\n";
    let out = std::process::Command::new(python)
        .args(["-c", script, url, name])
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e} (scripts/stack up installs redis-py)"));
    assert!(
        out.status.success(),
        "redis-py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A key of another type (a list) that expires in a minute: what a lock pattern may also match.
pub async fn expiring_list(c: &mut redis::aio::MultiplexedConnection, key: &str) {
    let _: i64 = redis::cmd("RPUSH")
        .arg(key)
        .arg("x")
        .query_async(c)
        .await
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(key)
        .arg(60_000)
        .query_async(c)
        .await
        .unwrap();
}

/// Deletes the given Redis keys when dropped (a test's locks on the shared Redis).
pub struct RedisKeys(pub Vec<String>);

impl Drop for RedisKeys {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open("redis://127.0.0.1:6379") else {
            return;
        };
        let Ok(mut c) = client.get_connection() else {
            return;
        };
        for k in &self.0 {
            let _: Result<i64, _> = redis::cmd("DEL").arg(k).query(&mut c);
        }
    }
}
