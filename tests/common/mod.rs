//! Shared test harness: every test gets its own database (and its own topics), so tests run in
//! parallel and run twice. The services are the real ones of `scripts/stack up`; a missing
//! service fails the test loudly — nothing is skipped. What a test creates here is removed when
//! the test ends, pass or fail ([`Leftovers`]).
#![allow(dead_code)]

pub mod article;
pub mod consumer;
pub mod first_contact;
pub mod locks;
pub mod log;
pub mod own_broker;

use std::cell::RefCell;
use std::time::Duration;

use idemguard::config::{Config, ConfigSource, Dialect, KafkaConfig};
use idemguard::db::{migrate, Database};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

/// Where the test databases are created. Override with IDEMGUARD_TEST_POSTGRES_URL /
/// IDEMGUARD_TEST_MYSQL_URL (a URL of the server; the path is replaced).
pub fn server_url(dialect: Dialect) -> String {
    match dialect {
        Dialect::Postgres => std::env::var("IDEMGUARD_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into()),
        Dialect::Mysql => std::env::var("IDEMGUARD_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/mysql".into()),
    }
}

/// The local stack's configuration (config/local.toml), without the process environment, so a
/// developer's IDEMGUARD_* variables cannot change what a test means.
pub fn local_config() -> Config {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    Config::load(&ConfigSource {
        file: Some(file),
        env: vec![],
    })
    .expect("config/local.toml loads")
}

/// The stack's connections are plaintext on loopback: a test of a production environment names
/// them in `environment.allow_unverified`, as a team would name a connection it accepts so.
pub const ALLOW_UNVERIFIED: (&str, &str) = (
    "IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED",
    "database,redis,kafka",
);

/// A file of the stack's test CA and its client (`scripts/stack up` makes them under .stack/tls/).
pub fn stack_tls_file(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".stack/tls")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: run `scripts/stack up` (it makes the test CA and the TLS servers)",
        p.display()
    );
    p.display().to_string()
}

/// `kafka` on the stack's mutual-TLS listener (localhost:9093, which takes nothing else): the
/// broker verified against the test CA, and the client certificate, whose CN the broker maps to
/// the principal `idemguard` (`ssl.principal.mapping.rules` in scripts/stack).
pub fn kafka_over_mutual_tls(kafka: &mut KafkaConfig) {
    kafka.bootstrap_servers = "localhost:9093".into();
    kafka.security_protocol = idemguard::config::KafkaSecurityProtocol::Ssl;
    kafka.ssl_ca_file = stack_tls_file("ca.pem");
    kafka.ssl_cert_file = stack_tls_file("client.pem");
    kafka.ssl_key_file = stack_tls_file("client.key");
}

pub fn unique_suffix() -> String {
    format!(
        "{:x}",
        uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff_ffff
    )
}

fn with_path(url: &str, db: &str) -> String {
    let mut u = url::Url::parse(url).expect("test server url");
    u.set_path(&format!("/{db}"));
    u.to_string()
}

/// A fresh, empty database on the dialect's server; returns the config pointing at it.
pub async fn fresh_database_config(dialect: Dialect) -> Config {
    let server = server_url(dialect);
    let name = format!("igt_{}", unique_suffix());
    let admin = Database::connect_url(&local_config(), &server).await.unwrap_or_else(|e| {
        panic!("the {dialect} test server is not reachable: {e:#}. Start the stack: scripts/stack up")
    });
    sqlx::Executor::execute(&admin.pool, format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create test database");
    remove_at_end(|l| l.databases.push((dialect, name.clone())));
    admin.pool.close().await;
    let mut config = local_config();
    config.database.url = with_path(&server, &name);
    config.database.max_connections = 16;
    config
}

/// A fresh database with the schema applied.
pub async fn migrated_database(dialect: Dialect) -> (Config, Database) {
    migrated_database_with(dialect, |_| {}).await
}

/// [`migrated_database`], its configuration changed by `tweak` before connecting.
pub async fn migrated_database_with(
    dialect: Dialect,
    tweak: impl FnOnce(&mut Config),
) -> (Config, Database) {
    let mut config = fresh_database_config(dialect).await;
    tweak(&mut config);
    let db = Database::connect(&config)
        .await
        .expect("connect to the test database");
    migrate::migrate(&db)
        .await
        .expect("migrate the test database");
    (config, db)
}

/// Creates topics unique to this test (3 partitions); returns their names in order.
pub async fn fresh_topics(config: &Config, base: &[&str]) -> Vec<String> {
    let suffix = unique_suffix();
    let names: Vec<String> = base.iter().map(|b| format!("{b}.t{suffix}")).collect();
    create_topics(config, &names).await;
    names
}

/// Creates the topics `names` (3 partitions), removed when the test ends.
pub async fn create_topics(config: &Config, names: &[String]) {
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .expect("kafka admin client");
    let topics: Vec<NewTopic> = names
        .iter()
        .map(|n| NewTopic::new(n, 3, TopicReplication::Fixed(1)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(&topics, &opts)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the Kafka broker at {} is not reachable: {e}. Start the stack: scripts/stack up",
                config.kafka.bootstrap_servers
            )
        });
    remove_at_end(|l| l.topics.push((config.kafka.clone(), names.to_vec())));
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

/// What the running test created on the shared servers: its databases, topics and MariaDB users.
#[derive(Default)]
struct Created {
    databases: Vec<(Dialect, String)>,
    /// Topics, with the `[kafka]` that reaches their broker (TLS included).
    topics: Vec<(KafkaConfig, Vec<String>)>,
    /// Databases on a server reached with a configuration of their own (the TLS servers): the
    /// configuration, the server's URL, the name.
    databases_on: Vec<(Config, String, String)>,
    mysql_users: Vec<String>,
}

/// The running test's [`Created`], removed when the test's thread ends. libtest runs every test
/// on a thread of its own and a thread's locals are dropped whether the test returned or
/// panicked, so a failed test leaves nothing behind either, and no test has to remember a guard.
/// (A database created on a runtime worker thread is covered too: the worker's locals drop with
/// the runtime.)
#[derive(Default)]
pub struct Leftovers(Created);

thread_local! {
    static LEFTOVERS: RefCell<Leftovers> = RefCell::new(Leftovers::default());
}

fn remove_at_end(record: impl FnOnce(&mut Created)) {
    LEFTOVERS.with(|l| record(&mut l.borrow_mut().0));
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if self.0.databases.is_empty()
            && self.0.topics.is_empty()
            && self.0.mysql_users.is_empty()
            && self.0.databases_on.is_empty()
        {
            return;
        }
        let created = std::mem::take(&mut self.0);
        // A thread with a runtime of its own: Drop cannot await, and the test's runtime is gone.
        // Bounded, so a server that hangs cannot hold the test binary forever. The stack is that
        // of a test thread: the unoptimized connect futures overflow a plain thread's 2 MiB.
        let cleaner = std::thread::Builder::new()
            .name("test-cleanup".into())
            .stack_size(16 << 20);
        let _ = cleaner
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    if tokio::time::timeout(Duration::from_secs(60), created.remove())
                        .await
                        .is_err()
                    {
                        eprintln!(
                            "test cleanup timed out: {:?} / {:?} may be left",
                            created.databases, created.topics
                        );
                    }
                });
            })
            .map(|t| t.join());
    }
}

impl Created {
    async fn remove(&self) {
        for (dialect, name) in &self.databases {
            if let Err(e) = drop_database(*dialect, name).await {
                eprintln!("test cleanup: cannot drop {dialect} database {name}: {e:#}");
            }
        }
        for user in &self.mysql_users {
            if let Err(e) = drop_mysql_user(user).await {
                eprintln!("test cleanup: cannot drop MariaDB user {user}: {e:#}");
            }
        }
        for (config, server, name) in &self.databases_on {
            let dropped = async {
                let admin = Database::connect_url(config, server).await?;
                let sql = match admin.dialect() {
                    Dialect::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                    Dialect::Mysql => format!("DROP DATABASE IF EXISTS {name}"),
                };
                sqlx::Executor::execute(&admin.pool, sql.as_str()).await?;
                admin.pool.close().await;
                anyhow::Ok(())
            };
            if let Err(e) = dropped.await {
                eprintln!("test cleanup: cannot drop database {name}: {e:#}");
            }
        }
        // A trace's readers close on threads of their own: none may be alive when its topics go.
        if !self.topics.is_empty()
            && !idemguard::console::read::topics::readers_closed(Duration::from_secs(10))
        {
            eprintln!("test cleanup: readers still closing after 10 s");
        }
        for (kafka, topics) in &self.topics {
            let admin: Result<AdminClient<DefaultClientContext>, _> =
                idemguard::kafka_client::client_config(kafka)
                    .set("log_level", "3")
                    .create();
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            let deleted = match admin {
                Ok(admin) => admin
                    .delete_topics(
                        &names,
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                    )
                    .await
                    .map(|_| ()),
                Err(e) => Err(e),
            };
            if let Err(e) = deleted {
                eprintln!("test cleanup: cannot delete topics {names:?}: {e}");
            }
        }
    }
}

/// Records a MariaDB user `'{user}'@'%'` the test created, to be dropped when the test ends.
pub fn remove_mysql_user_at_end(user: &str) {
    remove_at_end(|c| c.mysql_users.push(user.to_string()));
}

async fn drop_mysql_user(user: &str) -> anyhow::Result<()> {
    let admin = Database::connect_url(&local_config(), &server_url(Dialect::Mysql)).await?;
    sqlx::Executor::execute(
        &admin.pool,
        format!("DROP USER IF EXISTS '{user}'@'%'").as_str(),
    )
    .await?;
    admin.pool.close().await;
    Ok(())
}

/// Drops a test database even if something the failed test started still uses it: PostgreSQL
/// ends those sessions itself (`WITH (FORCE)`); on MariaDB they are killed first, since an open
/// transaction's metadata lock would make `DROP DATABASE` wait.
async fn drop_database(dialect: Dialect, name: &str) -> anyhow::Result<()> {
    let admin = Database::connect_url(&local_config(), &server_url(dialect)).await?;
    let mut conn = admin.pool.acquire().await?;
    match dialect {
        Dialect::Postgres => {
            sqlx::Executor::execute(&mut *conn, "SET lock_timeout = '10s'").await?;
            sqlx::Executor::execute(
                &mut *conn,
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
            )
            .await?;
        }
        Dialect::Mysql => {
            sqlx::Executor::execute(&mut *conn, "SET SESSION lock_wait_timeout = 10").await?;
            let sessions = "SELECT CAST(id AS SIGNED) FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()";
            let ids: Vec<i64> = sqlx::query_scalar(sessions)
                .bind(name)
                .fetch_all(&mut *conn)
                .await?;
            for id in ids {
                let _ =
                    sqlx::Executor::execute(&mut *conn, format!("KILL CONNECTION {id}").as_str())
                        .await;
            }
            sqlx::Executor::execute(
                &mut *conn,
                format!("DROP DATABASE IF EXISTS {name}").as_str(),
            )
            .await?;
        }
    }
    drop(conn);
    admin.pool.close().await;
    Ok(())
}

/// Both dialects, for tests that must hold on each.
pub const DIALECTS: [Dialect; 2] = [Dialect::Postgres, Dialect::Mysql];

/// `n` bind placeholders of the dialect: `$1, $2` or `?, ?`.
pub fn placeholders(dialect: Dialect, n: usize) -> String {
    (1..=n)
        .map(|i| {
            if dialect == Dialect::Postgres {
                format!("${i}")
            } else {
                "?".into()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `SELECT COUNT(*) FROM {tail}` as an i64 in either dialect, e.g. `count(&db, "order_record WHERE status = 'PAID'")`.
pub async fn count(db: &Database, tail: &str) -> i64 {
    let cast = if db.dialect() == Dialect::Postgres {
        "BIGINT"
    } else {
        "SIGNED"
    };
    sqlx::query_scalar::<_, i64>(&format!("SELECT CAST(COUNT(*) AS {cast}) FROM {tail}"))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Records topics the test created itself (not through [`fresh_topics`]), to be deleted when the
/// test ends.
pub fn remove_topics_at_end(config: &Config, names: &[String]) {
    remove_at_end(|l| l.topics.push((config.kafka.clone(), names.to_vec())));
}

/// A fresh database named `name` on the server at `server` (reached with `config`: its TLS and
/// password file), dropped when the test ends.
pub async fn fresh_database_on(config: &Config, server: &str) -> String {
    let name = format!("igt_{}", unique_suffix());
    let admin = Database::connect_url(config, server).await.unwrap_or_else(|e| {
        panic!("the test server {server} is not reachable: {e:#}. Start the stack: scripts/stack up")
    });
    sqlx::Executor::execute(&admin.pool, format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create test database");
    admin.pool.close().await;
    remove_at_end(|l| {
        l.databases_on
            .push((config.clone(), server.to_string(), name.clone()))
    });
    name
}

/// The peak resident memory of process `pid` so far (VmHWM, kB); `None` once it has gone.
pub fn peak_memory_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `SQL` on `db`, panicking with the statement when it fails (test fixtures and faults).
pub async fn exec(db: &Database, sql: &str) {
    sqlx::query(sql)
        .execute(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// One test per dialect for `async fn $body(dialect: Dialect)`: `$pg` runs it on PostgreSQL,
/// `$my` on MySQL/MariaDB — two tests, so a failure on one never hides the other's result.
/// `$body(&setup)` passes `&setup(dialect).await` instead. The test attribute is
/// `#[tokio::test]` unless one is given first.
#[macro_export]
macro_rules! per_dialect {
    ($body:ident $(( & $setup:ident ))? => $pg:ident, $my:ident) => {
        $crate::per_dialect!(#[tokio::test] $body $((&$setup))? => $pg, $my);
    };
    (#[$test:meta] $body:ident => $pg:ident, $my:ident) => {
        #[$test]
        async fn $pg() {
            $body(idemguard::config::Dialect::Postgres).await;
        }

        #[$test]
        async fn $my() {
            $body(idemguard::config::Dialect::Mysql).await;
        }
    };
    (#[$test:meta] $body:ident(&$setup:ident) => $pg:ident, $my:ident) => {
        #[$test]
        async fn $pg() {
            $body(&$setup(idemguard::config::Dialect::Postgres).await).await;
        }

        #[$test]
        async fn $my() {
            $body(&$setup(idemguard::config::Dialect::Mysql).await).await;
        }
    };
}
