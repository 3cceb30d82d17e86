//! Shared test harness: every test gets its own database (and its own topics), so tests run in
//! parallel and run twice. The services are the real ones of `scripts/stack up`; a missing
//! service fails the test loudly — nothing is skipped.
#![allow(dead_code)]

use std::time::Duration;

use idemguard::config::{Config, ConfigSource, Dialect};
use idemguard::db::{migrate, Database};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

/// Where the test databases are created. Override with IDEMGUARD_TEST_POSTGRES_URL /
/// IDEMGUARD_TEST_MYSQL_URL (a URL of the server; the path is replaced).
pub fn server_url(dialect: Dialect) -> String {
    match dialect {
        Dialect::Postgres => std::env::var("IDEMGUARD_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into()),
        Dialect::Mysql => std::env::var("IDEMGUARD_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/mysql".into()),
    }
}

/// The local stack's configuration (config/local.toml), without the process environment, so a
/// developer's IDEMGUARD_* variables cannot change what a test means.
pub fn local_config() -> Config {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    Config::load(&ConfigSource { file: Some(file), env: vec![] }).expect("config/local.toml loads")
}

pub fn unique_suffix() -> String {
    format!("{:x}", uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff_ffff)
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
    sqlx::Executor::execute(&admin.pool, format!("CREATE DATABASE {name}").as_str()).await.expect("create test database");
    admin.pool.close().await;
    let mut config = local_config();
    config.database.url = with_path(&server, &name);
    config.database.max_connections = 16;
    config
}

/// A fresh database with the schema applied.
pub async fn migrated_database(dialect: Dialect) -> (Config, Database) {
    let config = fresh_database_config(dialect).await;
    let db = Database::connect(&config).await.expect("connect to the test database");
    migrate::migrate(&db).await.expect("migrate the test database");
    (config, db)
}

/// Creates topics unique to this test (3 partitions); returns their names in order.
pub async fn fresh_topics(config: &Config, base: &[&str]) -> Vec<String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .create()
        .expect("kafka admin client");
    let suffix = unique_suffix();
    let names: Vec<String> = base.iter().map(|b| format!("{b}.t{suffix}")).collect();
    let topics: Vec<NewTopic> = names.iter().map(|n| NewTopic::new(n, 3, TopicReplication::Fixed(1))).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics(&topics, &opts).await.unwrap_or_else(|e| {
        panic!("the Kafka broker at {} is not reachable: {e}. Start the stack: scripts/stack up", config.kafka.bootstrap_servers)
    });
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
    names
}

/// Both dialects, for tests that must hold on each.
pub const DIALECTS: [Dialect; 2] = [Dialect::Postgres, Dialect::Mysql];

/// `n` bind placeholders of the dialect: `$1, $2` or `?, ?`.
pub fn placeholders(dialect: Dialect, n: usize) -> String {
    (1..=n).map(|i| if dialect == Dialect::Postgres { format!("${i}") } else { "?".into() }).collect::<Vec<_>>().join(", ")
}

/// `SELECT COUNT(*) FROM {tail}` as an i64 in either dialect, e.g. `count(&db, "order_record WHERE status = 'PAID'")`.
pub async fn count(db: &Database, tail: &str) -> i64 {
    let cast = if db.dialect() == Dialect::Postgres { "BIGINT" } else { "SIGNED" };
    sqlx::query_scalar::<_, i64>(&format!("SELECT CAST(COUNT(*) AS {cast}) FROM {tail}")).fetch_one(&db.pool).await.unwrap()
}
