//! Retention is enforced. Rows past their retention go — finished idempotency
//! records, published outbox rows, the consumer's dedup state — and rows within it stay, as do a
//! PROCESSING record and an unpublished outbox row; on both dialects, by `idemguard purge` (one
//! pass, in batches) and by the background task of `serve` and of `consume`.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use idemguard::api::server;
use idemguard::config::{Config, Dialect};
use idemguard::contracts::{now_ms, Instance};
use idemguard::db::Database;
use idemguard::stream::{ConsumeOptions, PaymentConsumer};
use idemguard::trace::Tracer;
use tokio_util::sync::CancellationToken;

const HOUR: i64 = 3_600_000;

async fn record(db: &Database, request_id: &str, status: &str, expire_at: i64) {
    let sql = format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES ({})",
        placeholders(db.dialect(), 9)
    );
    let t = expire_at - 7 * 24 * HOUR;
    sqlx::query(&sql)
        .bind(request_id)
        .bind("ORDER")
        .bind("h")
        .bind(status)
        .bind("gone")
        .bind(0_i64)
        .bind(t)
        .bind(t)
        .bind(expire_at)
        .execute(&db.pool)
        .await
        .unwrap();
}

async fn outbox(db: &Database, event_id: &str, status: &str, sent_at: Option<i64>) {
    let sql = format!(
        "INSERT INTO outbox (event_id, topic, msg_key, headers, payload, status, created_at, sent_at) VALUES ({})",
        placeholders(db.dialect(), 8)
    );
    let created = sent_at.unwrap_or(now_ms() - 30 * 24 * HOUR) - 1000;
    sqlx::query(&sql)
        .bind(event_id)
        .bind("t")
        .bind("k")
        .bind("{}")
        .bind("{}")
        .bind(status)
        .bind(created)
        .bind(sent_at)
        .execute(&db.pool)
        .await
        .unwrap();
}

async fn processed(db: &Database, event_id: &str, expire_at: i64) {
    let sql = format!(
        "INSERT INTO processed_event (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at) VALUES ({})",
        placeholders(db.dialect(), 9)
    );
    sqlx::query(&sql)
        .bind("g")
        .bind(event_id)
        .bind("o")
        .bind("t")
        .bind(0_i32)
        .bind(0_i64)
        .bind("applied")
        .bind(expire_at - 7 * 24 * HOUR)
        .bind(expire_at)
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Rows on either side of every retention, with `outbox_sent` shortened to 1 h: five of each
/// kind past it (more than one batch of 2), and the ones that must stay.
async fn seed(db: &Database) {
    let now = now_ms();
    for i in 0..5 {
        record(
            db,
            &format!("old-done-{i}"),
            if i % 2 == 0 { "SUCCEEDED" } else { "FAILED" },
            now - HOUR,
        )
        .await;
        outbox(db, &format!("old-sent-{i}"), "SENT", Some(now - 2 * HOUR)).await;
        processed(db, &format!("old-seen-{i}"), now - HOUR).await;
    }
    record(db, "recent-done", "SUCCEEDED", now + HOUR).await;
    record(db, "old-processing", "PROCESSING", now - 30 * 24 * HOUR).await;
    outbox(db, "recent-sent", "SENT", Some(now - 10 * 60_000)).await;
    outbox(db, "old-pending", "PENDING", None).await;
    processed(db, "recent-seen", now + HOUR).await;
}

async fn ids(db: &Database, sql: &str) -> Vec<String> {
    let mut v: Vec<String> = sqlx::query_scalar(sql).fetch_all(&db.pool).await.unwrap();
    v.sort();
    v
}

async fn left_records(db: &Database) -> Vec<String> {
    ids(db, "SELECT request_id FROM idempotency_record").await
}
async fn left_outbox(db: &Database) -> Vec<String> {
    ids(db, "SELECT event_id FROM outbox").await
}
async fn left_processed(db: &Database) -> Vec<String> {
    ids(db, "SELECT event_id FROM processed_event").await
}

async fn assert_only_the_kept_rows_left(db: &Database, dialect: Dialect) {
    assert_eq!(
        left_records(db).await,
        vec!["old-processing", "recent-done"],
        "{dialect}: a PROCESSING record is never purged"
    );
    assert_eq!(
        left_outbox(db).await,
        vec!["old-pending", "recent-sent"],
        "{dialect}: an unsent outbox row is never purged"
    );
    assert_eq!(left_processed(db).await, vec!["recent-seen"], "{dialect}");
}

/// `idemguard purge`, the binary a cron runs: one pass in batches of 2, counts printed.
async fn purge_command(dialect: Dialect) {
    let (config, db) = migrated_database(dialect).await;
    seed(&db).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .arg("--config")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"))
        .args(["purge", "--json"])
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_RETENTION__BATCH", "2")
        .env("IDEMGUARD_RETENTION__OUTBOX_SENT", "1h")
        .env("IDEMGUARD_LOG", "error")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{dialect}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        counts,
        serde_json::json!([
            {"table": "idempotency_record", "deleted": 5},
            {"table": "outbox", "deleted": 5},
            {"table": "processed_event", "deleted": 5},
        ]),
        "{dialect}"
    );
    assert_only_the_kept_rows_left(&db, dialect).await;
    db.pool.close().await;
}

per_dialect!(purge_command => purge_command_postgres, purge_command_mysql);

async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn short_retention(config: &mut Config) {
    config.retention.interval = Duration::from_millis(200);
    config.retention.batch = 2;
    config.retention.outbox_sent = Duration::from_secs(3600);
    config.trace.enabled = false;
}

/// The running services purge on their own: `serve` the records and the sent outbox rows,
/// `consume` the dedup state.
async fn background_tasks(dialect: Dialect) {
    let (mut config, db) = migrated_database(dialect).await;
    let topics = fresh_topics(&config, &["payment.succeeded", "payment.succeeded.dlq"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.dlq_topic = topics[1].clone();
    short_retention(&mut config);
    seed(&db).await;

    let serve = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    wait_for("serve purges records and sent outbox rows", || async {
        left_records(&db).await.len() == 2 && left_outbox(&db).await.len() == 2
    })
    .await;
    assert_eq!(
        left_processed(&db).await.len(),
        6,
        "{dialect}: serve leaves the consumer's state alone"
    );

    let tracer = Tracer::log_only(&Instance::current());
    let options = ConsumeOptions {
        group: Some(format!("igt-retention-{}", unique_suffix())),
        ..Default::default()
    };
    let consumer = PaymentConsumer::new(&config, db.clone(), tracer, options).unwrap();
    let stop = CancellationToken::new();
    let consuming = tokio::spawn(consumer.run(stop.clone()));
    wait_for("consume purges the dedup state", || async {
        left_processed(&db).await.len() == 1
    })
    .await;
    assert_only_the_kept_rows_left(&db, dialect).await;

    stop.cancel();
    consuming.await.unwrap().unwrap();
    serve.shutdown.cancel();
    serve.done.await.unwrap().unwrap();
    db.pool.close().await;
}

per_dialect!(background_tasks => background_tasks_postgres, background_tasks_mysql);
