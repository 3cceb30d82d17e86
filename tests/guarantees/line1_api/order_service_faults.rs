//! The order service's guarantees, each under the fault it is about,
//! against the real stack and the real binaries, both dialects:
//! - a crash of `idemguard serve` between the commit and the publish, and between the publish
//!   and the mark, loses no event and applies none twice;
//! - Redis down while a record's owner is dead: the record's lease decides, a retry resolves;
//!   the give-up path after an unknown error releases the record for a retry;
//! - Ctrl-C on `serve` and on `consume` with requests and events in flight;
//! - guard branches: a dead owner's fast-path placeholder lets the database decide; two retries
//!   reclaiming one dead owner's record at once, exactly one wins (the trace shows the race run);
//!   a record gone between the claim's insert and its read answers 500 and drops the placeholder,
//!   so the retry creates the order; replays counted while the database fails are kept;
//! - a finalize the database refuses, then `serve` SIGKILLed before its background retry: the
//!   fast path never held the answer, so the retry reaches the record, reclaims it and gets the
//!   same order (the gap the 180 s chaos storm found, BENCHMARKS.md).

use crate::common;
use crate::support::redis_server;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::consumer::Member;
use common::*;
use idemguard::api::payments::{self, OutboxRelay, PayableOrder};
use idemguard::api::server;
use idemguard::config::{Config, Dialect};
use idemguard::contracts::{
    now_ms, Instance, OrderNo, Outcome as Decision, PaymentSucceeded, RequestId,
};
use idemguard::db::orders::{NewOrder, OrderRecord, Orders};
use idemguard::db::Database;
use idemguard::storm::interception::read_trace;
use idemguard::trace::Tracer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use redis_server::RedisServer;
use reqwest::StatusCode;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

const SKU: i64 = 11;

/// A migrated database of its own, its own payment / DLQ / trace topics and consumer group.
/// The database and topics are removed when the test ends, pass or fail (tests/common).
async fn rig(dialect: Dialect) -> (Config, Database) {
    common::log::test_log();
    let (mut config, db) = migrated_database(dialect).await;
    let topics = fresh_topics(
        &config,
        &["payment.succeeded", "payment.succeeded.dlq", "trace"],
    )
    .await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.dlq_topic = topics[1].clone();
    config.kafka.trace_topic = topics[2].clone();
    config.kafka.consumer_group = format!("igt-faults-api-{}", unique_suffix());
    config.trace.enabled = false;
    (config, db)
}

fn tracer() -> Tracer {
    Tracer::log_only(&Instance::current())
}

fn key() -> String {
    idemguard::contracts::RequestId::generate("APP", "ORDER").to_string()
}

fn order_body() -> serde_json::Value {
    serde_json::json!({"userId": 42, "skuId": SKU, "quantity": 1, "amount": 1999})
}

/// `n` orders written through the database layer (stock for them set first).
async fn orders(db: &Database, n: usize) -> Vec<OrderRecord> {
    let orders = Orders::new(db.clone(), tracer());
    orders.set_stock(SKU, 1000).await.unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let new = NewOrder {
            request_id: RequestId::parse(&key()).unwrap(),
            order_no: OrderNo::generate(),
            user_id: 42,
            sku_id: SKU,
            quantity: 1,
            amount: 1999,
            fence: None,
        };
        out.push(orders.create(&new).await.unwrap().into_order());
    }
    out
}

/// Books a payment (payment_flow + PENDING outbox row, one transaction) for each order.
async fn book(config: &Config, db: &Database, orders: &[OrderRecord]) {
    for o in orders {
        let payable = PayableOrder {
            order_no: o.order_no.clone(),
            request_id: o.req_id.clone(),
            user_id: o.user_id,
            amount: o.amount,
        };
        payments::book_payment(
            db,
            config,
            &tracer(),
            &payable,
            &format!("PAY-{}", o.order_no),
        )
        .await
        .unwrap();
    }
}

/// Waits (bounded) until `check` holds.
async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sessions of this test's database waiting for a row lock.
async fn lock_waiters(db: &Database) -> i64 {
    let sql = match db.dialect() {
        Dialect::Postgres => "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        Dialect::Mysql => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.innodb_trx t JOIN information_schema.processlist p \
             ON p.id = t.trx_mysql_thread_id WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
        }
    };
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Every message on `topic`, from the start, read until the topic has been quiet for 1.5 s:
/// (eventId header, payload).
fn read_topic(config: &Config, topic: &str) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", format!("igt-reader-{}", uuid::Uuid::now_v7()))
        .set("enable.auto.commit", "false")
        .set("log_level", "3")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (deadline, mut quiet_since) = (Instant::now() + Duration::from_secs(30), Instant::now());
    let mut out = Vec::new();
    while quiet_since.elapsed() < Duration::from_millis(1500) {
        assert!(
            Instant::now() < deadline,
            "{topic} not read to its end within 30s"
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            quiet_since = Instant::now();
            let payload = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            let event: PaymentSucceeded = serde_json::from_str(&payload).unwrap();
            out.push((event.event_id, payload));
        }
    }
    out
}

/// The event ids of the booked payments, sorted.
async fn booked_event_ids(db: &Database) -> Vec<String> {
    let mut ids: Vec<String> = sqlx::query_scalar("SELECT event_id FROM payment_flow")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    ids.sort();
    ids
}

/// The real `idemguard` binary on this test's configuration (a private 0600 file, removed when
/// the child is dropped); killed if still running when dropped.
struct Child {
    child: tokio::process::Child,
    config_file: PathBuf,
    stdout: Option<tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>>,
}

impl Child {
    fn spawn(config: &Config, args: &[&str]) -> Child {
        let config_file =
            std::env::temp_dir().join(format!("igt-faults-api-{}.toml", uuid::Uuid::now_v7()));
        std::fs::write(&config_file, toml::to_string(config).unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .arg("--config")
            .arg(&config_file)
            .args(args)
            .env_remove("IDEMGUARD_CONFIG")
            .env("IDEMGUARD_LOG", "warn,idemguard=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the idemguard binary starts");
        let stdout = child
            .stdout
            .take()
            .map(|s| tokio::io::BufReader::new(s).lines());
        Child {
            child,
            config_file,
            stdout,
        }
    }

    /// `idemguard serve` on a free port; returns it with its base URL once it listens.
    async fn serve(config: &Config, faults: &[&str]) -> (Child, String) {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(faults);
        let mut c = Child::spawn(config, &args);
        let lines = c.stdout.as_mut().unwrap();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("serve prints its address within 30s")
            .unwrap()
            .unwrap_or_default();
        let base = line.rsplit(' ').next().unwrap().to_string();
        assert!(
            base.starts_with("http://"),
            "unexpected first line of serve: {line}"
        );
        (c, base)
    }

    fn interrupt(&self) {
        let pid = self.child.id().expect("the child is running") as libc::pid_t;
        // SAFETY: sends a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    }

    /// SIGKILL: nothing of the process runs after this (no background task, no cleanup).
    async fn kill(&mut self) {
        self.child.kill().await.expect("SIGKILL to our own child");
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    async fn exit(&mut self, within: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the child did not exit within {within:?}"))
            .unwrap()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config_file);
    }
}

/// The consumer's effects, one per payment: a processed_event row for the group, a points row and
/// a notification per booked event, and every order PAID.
async fn assert_one_effect_per_payment(config: &Config, db: &Database, n: i64) {
    let group = &config.kafka.consumer_group;
    assert_eq!(
        count(
            db,
            &format!("processed_event WHERE consumer_group = '{group}'")
        )
        .await,
        n,
        "processed_event rows"
    );
    assert_eq!(count(db, "points_ledger").await, n, "points rows");
    assert_eq!(
        count(
            db,
            "points_ledger WHERE source_event_no IN (SELECT event_id FROM payment_flow)"
        )
        .await,
        n,
        "points rows of the booked events"
    );
    assert_eq!(count(db, "notification").await, n, "notifications");
    assert_eq!(
        count(
            db,
            "notification WHERE event_id IN (SELECT event_id FROM payment_flow)"
        )
        .await,
        n,
        "notifications of the booked events"
    );
    assert_eq!(
        count(db, "order_record WHERE status = 'PAID'").await,
        n,
        "orders PAID"
    );
}

// ---------------------------------------------------------------------------------------------
// A crash between commit and publish loses no event (and one between publish and mark
// applies none twice).

#[derive(Clone, Copy, PartialEq, Debug)]
enum RelayCrash {
    BeforePublish,
    AfterPublish,
}

async fn relay_crash_loses_no_event(dialect: Dialect, crash: RelayCrash) {
    const N: usize = 5;
    let (config, db) = rig(dialect).await;
    let placed = orders(&db, N).await;
    book(&config, &db, &placed).await;
    let events = booked_event_ids(&db).await;
    assert_eq!(
        count(&db, "outbox WHERE status = 'PENDING'").await,
        N as i64
    );

    // The relay of a real `idemguard serve` claims the committed batch and the process dies.
    let flag = match crash {
        RelayCrash::BeforePublish => "--crash-before-publish",
        RelayCrash::AfterPublish => "--crash-after-publish",
    };
    // Not `Child::serve`: the relay may abort before the address is printed.
    let mut crashed = Child::spawn(&config, &["serve", "--listen", "127.0.0.1:0", flag]);
    let status = crashed.exit(Duration::from_secs(60)).await;
    assert!(
        !status.success(),
        "serve {flag} was meant to abort, it exited with {status}"
    );
    assert_eq!(
        count(&db, "outbox WHERE status = 'PENDING'").await,
        N as i64,
        "a crash before the mark leaves every row PENDING"
    );
    let topic = config.kafka.payment_topic.clone();
    let (cfg, t) = (config.clone(), topic.clone());
    let before: Vec<(String, String)> = tokio::task::spawn_blocking(move || read_topic(&cfg, &t))
        .await
        .unwrap();
    let mut published: Vec<String> = before.iter().map(|(id, _)| id.clone()).collect();
    published.sort();
    match crash {
        RelayCrash::BeforePublish => assert!(
            published.is_empty(),
            "nothing was published before the crash: {published:?}"
        ),
        RelayCrash::AfterPublish => assert_eq!(
            published, events,
            "the whole batch was published before the crash"
        ),
    }

    // Restarted without the fault: the relay publishes what is still PENDING.
    let (mut restarted, _) = Child::serve(&config, &[]).await;
    wait_until(
        Duration::from_secs(30),
        "the restarted relay publishes the outbox",
        || async { count(&db, "outbox WHERE status = 'PENDING'").await == 0 },
    )
    .await;
    let copies = if crash == RelayCrash::AfterPublish {
        2
    } else {
        1
    };
    let (cfg, t) = (config.clone(), topic.clone());
    let after: Vec<(String, String)> = tokio::task::spawn_blocking(move || read_topic(&cfg, &t))
        .await
        .unwrap();
    assert_eq!(
        after.len(),
        N * copies,
        "each event on the topic {copies} time(s)"
    );
    let mut distinct: Vec<String> = after.iter().map(|(id, _)| id.clone()).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct, events, "every booked event reached the topic");

    // The consumer applies each payment once, whatever reached the topic twice.
    let consumer = Member::start(&config, &config.kafka.consumer_group).await;
    wait_until(
        Duration::from_secs(60),
        "the consumer receives every message",
        || async { consumer.get(|s| &s.received) >= (N * copies) as u64 },
    )
    .await;
    let group = config.kafka.consumer_group.clone();
    wait_until(
        Duration::from_secs(30),
        "the consumer applies every payment",
        || async {
            count(
                &db,
                &format!("processed_event WHERE consumer_group = '{group}'"),
            )
            .await
                >= N as i64
        },
    )
    .await;
    assert_eq!(
        consumer.get(|s| &s.applied),
        N as u64,
        "applied once per payment"
    );
    assert_eq!(consumer.get(|s| &s.dlq), 0, "nothing to the DLQ");
    consumer.stop().await;
    assert_one_effect_per_payment(&config, &db, N as i64).await;

    restarted.interrupt();
    assert!(restarted.exit(Duration::from_secs(30)).await.success());
}

async fn relay_crash_before_publish(dialect: Dialect) {
    relay_crash_loses_no_event(dialect, RelayCrash::BeforePublish).await;
}

async fn relay_crash_after_publish(dialect: Dialect) {
    relay_crash_loses_no_event(dialect, RelayCrash::AfterPublish).await;
}

per_dialect!(relay_crash_before_publish => relay_crash_before_publish_loses_no_event_postgres, relay_crash_before_publish_loses_no_event_mysql);
per_dialect!(relay_crash_after_publish => relay_crash_after_publish_applies_no_event_twice_postgres, relay_crash_after_publish_applies_no_event_twice_mysql);

#[tokio::test]
async fn crash_switches_are_refused_in_production() {
    let mut config = local_config();
    config.environment.production = true;
    // The stack's plaintext connections, named: the refusal under test is the fault switch's.
    config.environment.allow_unverified = ["database", "redis", "kafka"].map(String::from).to_vec();
    let faults = server::Faults {
        crash_before_publish: true,
        ..Default::default()
    };
    let e = server::start_with(config.clone(), "127.0.0.1:0", faults)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("production"), "{e}");
    // The binaries refuse every crash switch before touching anything.
    let file = std::env::temp_dir().join(format!("igt-faults-api-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
    for args in [
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--crash-after-request-lock",
        ][..],
        &["serve", "--listen", "127.0.0.1:0", "--crash-before-publish"],
        &["serve", "--listen", "127.0.0.1:0", "--crash-after-publish"],
        &["consume", "--crash-after-db-commit", "1"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .arg("--config")
            .arg(&file)
            .args(args)
            .env_remove("IDEMGUARD_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains("fault injection")
                && stderr.contains("production"),
            "{args:?}: {}\n{stderr}",
            out.status
        );
    }
    let _ = std::fs::remove_file(&file);
}

// ---------------------------------------------------------------------------------------------
// Nothing blocks forever.

/// A PROCESSING record under `owner` whose lease ends at `lease_until`, as a process that died
/// mid-request leaves it.
async fn processing_record(db: &Database, k: &str, owner: &str, lease_until: i64) {
    let sql = format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES ({})",
        placeholders(db.dialect(), 9)
    );
    let hash = idemguard::api::idempotency::request_hash("POST", "/orders", &order_body());
    let now = now_ms();
    sqlx::query(&sql)
        .bind(k)
        .bind("ORDER")
        .bind(&hash)
        .bind("PROCESSING")
        .bind(owner)
        .bind(lease_until)
        .bind(now - 60_000)
        .bind(now - 60_000)
        .bind(now + 86_400_000)
        .execute(&db.pool)
        .await
        .unwrap();
}

async fn post_order(
    http: &reqwest::Client,
    base: &str,
    k: &str,
) -> (StatusCode, serde_json::Value) {
    let r = http
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", k)
        .json(&order_body())
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

async fn record_status(db: &Database, k: &str) -> String {
    sqlx::query_scalar(&format!(
        "SELECT status FROM idempotency_record WHERE request_id = '{k}'"
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Redis (fast path, request locks, heartbeats) is down and the record's owner is dead: the
/// record's lease decides. Lease over: the retry reclaims and gets the order (the first one if
/// the dead owner had committed it). Lease running: 409 until it ends, then resolved.
async fn redis_down_the_lease_decides(dialect: Dialect) {
    let mut redis = RedisServer::start();
    let (mut config, db) = rig(dialect).await;
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];
    let service = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", service.addr);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let placed = orders(&db, 1).await; // sets the stock; its order is the one a dead owner committed
    redis.kill();
    let now = now_ms();

    // Lease over, the dead owner wrote nothing: the retry creates exactly one order.
    let k = key();
    processing_record(&db, &k, "dead-host-1-000001", now - 1000).await;
    let (status, body) = post_order(&http, &base, &k).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
        1
    );
    assert_eq!(record_status(&db, &k).await, "SUCCEEDED");

    // Lease over, the dead owner had committed its order: the retry gets that order back.
    let first = &placed[0];
    processing_record(&db, &first.req_id, "dead-host-2-000002", now - 1000).await;
    let (status, body) = post_order(&http, &base, &first.req_id).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["orderNo"],
        first.order_no.as_str(),
        "the first order, not a new one"
    );
    assert_eq!(
        count(
            &db,
            &format!("order_record WHERE req_id = '{}'", first.req_id)
        )
        .await,
        1
    );

    // Lease running: 409 while it runs, resolved once it is over.
    let k = key();
    let lease_until = now_ms() + 3000;
    processing_record(&db, &k, "dead-host-3-000003", lease_until).await;
    let (status, _) = post_order(&http, &base, &k).await;
    assert_eq!(status, StatusCode::CONFLICT, "the owner's lease still runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    let resolved = loop {
        let (status, body) = post_order(&http, &base, &k).await;
        if status != StatusCode::CONFLICT {
            break (status, body);
        }
        assert!(
            Instant::now() < deadline,
            "still 409 20 s after a 3 s lease: the key is blocked"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(resolved.0, StatusCode::CREATED, "{}", resolved.1);
    assert!(
        now_ms() >= lease_until,
        "resolved only once the lease was over"
    );
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
        1
    );

    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
}

per_dialect!(redis_down_the_lease_decides => redis_down_the_lease_decides_postgres, redis_down_the_lease_decides_mysql);

/// The endpoint fails with an error whose outcome is unknown (the order table is missing): the
/// owner answers 500 and releases the record, and the retry — once the fault is gone —
/// resolves at once (no 409 for the lease's 30 s) with exactly one order.
async fn unknown_error_releases_the_record(dialect: Dialect) {
    let (config, db) = rig(dialect).await;
    orders(&db, 0).await;
    let service = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", service.addr);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
    sqlx::query(&rename("order_record", "order_record_away"))
        .execute(&db.pool)
        .await
        .unwrap();
    let k = key();
    let (status, body) = post_order(&http, &base, &k).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(
        record_status(&db, &k).await,
        "PROCESSING",
        "no outcome stored for an unknown one"
    );
    sqlx::query(&rename("order_record_away", "order_record"))
        .execute(&db.pool)
        .await
        .unwrap();
    let (status, body) = post_order(&http, &base, &k).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
        1
    );
    assert_eq!(record_status(&db, &k).await, "SUCCEEDED");
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
}

per_dialect!(unknown_error_releases_the_record => unknown_error_releases_the_record_postgres, unknown_error_releases_the_record_mysql);

// ---------------------------------------------------------------------------------------------
// Ctrl-C finishes what is in flight.

/// A transaction holding the stock row and the given orders' rows: requests that need them wait
/// mid-flight until it ends.
async fn hold_rows(db: &Database, order_nos: &[String]) -> sqlx::Transaction<'static, sqlx::Any> {
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT stock FROM inventory WHERE sku_id = {SKU} FOR UPDATE"
    ))
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    for o in order_nos {
        sqlx::query(&format!(
            "SELECT status FROM order_record WHERE order_no = '{o}' FOR UPDATE"
        ))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    }
    tx
}

/// SIGINT on `idemguard serve` while orders and payment callbacks wait on row locks: each gets
/// its answer, each record is final, each booked payment is published, the heartbeat is
/// stopped, the trace is flushed.
async fn sigint_on_serve_finishes_in_flight(dialect: Dialect) {
    const ORDERS: usize = 4;
    const CALLBACKS: usize = 3;
    let (mut config, db) = rig(dialect).await;
    config.trace.enabled = true;
    let payable = orders(&db, CALLBACKS).await;
    let (mut serve, base) = Child::serve(&config, &[]).await;
    let order_nos: Vec<String> = payable.iter().map(|o| o.order_no.clone()).collect();
    let held = hold_rows(&db, &order_nos).await;

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut keys = Vec::new();
    let mut in_flight = Vec::new();
    for i in 0..ORDERS + CALLBACKS {
        let k = key();
        keys.push(k.clone());
        let (path, body) = if i < ORDERS {
            ("orders", order_body())
        } else {
            let o = &payable[i - ORDERS];
            (
                "payments/callback",
                serde_json::json!({"payNo": format!("PAY-{}", o.order_no), "orderNo": o.order_no, "amount": o.amount}),
            )
        };
        let req = http
            .post(format!("{base}/{path}"))
            .header("Idempotency-Key", k)
            .json(&body);
        in_flight.push(tokio::spawn(async move {
            let r = req.send().await?;
            let status = r.status();
            Ok::<_, reqwest::Error>((status, r.text().await?))
        }));
    }
    let total = (ORDERS + CALLBACKS) as i64;
    wait_until(
        Duration::from_secs(30),
        "every request waits on a held row",
        || async { lock_waiters(&db).await >= total || in_flight.iter().any(|t| t.is_finished()) },
    )
    .await;
    if let Some(i) = in_flight.iter().position(|t| t.is_finished()) {
        let answer = in_flight.remove(i).await.unwrap();
        panic!("request {i} was answered before the held rows were released: {answer:?}");
    }

    // The instance's heartbeat, to see it stopped (deleted, not left to expire) at exit.
    let health: serde_json::Value = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let heartbeat = idemguard::contracts::keys::instance(health["instance"].as_str().unwrap());
    let mut redis = redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let beating = |r: &mut redis::aio::MultiplexedConnection| {
        let (mut r, key) = (r.clone(), heartbeat.clone());
        async move {
            redis::cmd("EXISTS")
                .arg(&key)
                .query_async::<i64>(&mut r)
                .await
                .unwrap()
        }
    };
    assert_eq!(beating(&mut redis).await, 1, "{heartbeat} while serving");

    serve.interrupt();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(serve.running(), "serve exited with requests in flight");
    held.rollback().await.unwrap();

    for (i, task) in in_flight.into_iter().enumerate() {
        let (status, body) = task
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("request {i} in flight got no answer: {e}"));
        assert_eq!(status, StatusCode::CREATED, "request {i}: {body}");
    }
    assert!(
        serve.exit(Duration::from_secs(30)).await.success(),
        "serve exits 0 after Ctrl-C"
    );
    assert_eq!(
        beating(&mut redis).await,
        0,
        "{heartbeat} stopped at exit, not left to expire"
    );

    for k in &keys {
        assert_eq!(
            record_status(&db, k).await,
            "SUCCEEDED",
            "record {k} is final"
        );
    }
    assert_eq!(count(&db, "payment_flow").await, CALLBACKS as i64);
    assert_eq!(
        count(&db, "outbox WHERE status = 'PENDING'").await,
        0,
        "the outbox was published before exit"
    );
    let events = booked_event_ids(&db).await;
    let (cfg, topic) = (config.clone(), config.kafka.payment_topic.clone());
    let mut published: Vec<String> = tokio::task::spawn_blocking(move || read_topic(&cfg, &topic))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    published.sort();
    assert_eq!(
        published, events,
        "every booked payment's event is on the topic"
    );

    let (kafka, topic) = (config.kafka.clone(), config.kafka.trace_topic.clone());
    let trace =
        tokio::task::spawn_blocking(move || read_trace(&kafka, &topic, Duration::from_secs(30)))
            .await
            .unwrap()
            .unwrap();
    for k in &keys {
        assert!(
            trace
                .iter()
                .any(|e| e.outcome == Decision::Finalized
                    && e.request_id.as_deref() == Some(k.as_str())),
            "the trace topic has the finalize of {k}"
        );
    }
    for id in &events {
        assert!(
            trace.iter().any(|e| e.outcome == Decision::EventPublished
                && e.event_id.as_deref() == Some(id.as_str())),
            "the trace topic has the publish of {id}"
        );
    }
}

per_dialect!(sigint_on_serve_finishes_in_flight => sigint_on_serve_finishes_in_flight_postgres, sigint_on_serve_finishes_in_flight_mysql);

/// Payments booked while the relay sleeps, more than one batch of them, then shutdown: the
/// relay's last rounds publish them all before it returns.
async fn relay_drains_the_outbox_on_shutdown(dialect: Dialect) {
    let (mut config, db) = rig(dialect).await;
    config.api.relay_batch = 2;
    config.api.relay_interval = Duration::from_secs(3600); // only a wake or shutdown moves it
    let relay = OutboxRelay::new(&config, db.clone(), tracer()).unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(relay.run(stop.clone()));
    let placed = orders(&db, 5).await;
    book(&config, &db, &placed).await; // no wake: the relay sleeps through these
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the relay stops within 60s")
        .unwrap();
    assert_eq!(
        count(&db, "outbox WHERE status = 'PENDING'").await,
        0,
        "every booked event published before the relay returned"
    );
}

per_dialect!(relay_drains_the_outbox_on_shutdown => relay_drains_the_outbox_on_shutdown_postgres, relay_drains_the_outbox_on_shutdown_mysql);

/// The group's committed offset on each partition of the payment topic.
fn committed_offsets(config: &Config) -> Vec<(i32, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", &config.kafka.consumer_group)
        .set("enable.auto.commit", "false")
        .set("log_level", "3")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition(&config.kafka.payment_topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    committed
        .elements()
        .iter()
        .map(|e| {
            (
                e.partition(),
                if let Offset::Offset(o) = e.offset() {
                    o
                } else {
                    0
                },
            )
        })
        .collect()
}

/// SIGINT on `idemguard consume` while its batch waits on a row lock: the batch is applied and
/// its offsets committed before exit — the database's processed_event rows (partition, offset)
/// are covered by the committed offsets, and a restarted member applies nothing twice.
async fn sigint_on_consume_commits_what_it_applied(dialect: Dialect) {
    const N: usize = 6;
    let (config, db) = rig(dialect).await;
    let placed = orders(&db, N + 3).await;
    let (first, later) = placed.split_at(N);
    book(&config, &db, first).await;
    let relay = OutboxRelay::new(&config, db.clone(), tracer()).unwrap();
    assert_eq!(relay.publish_pending().await.unwrap(), N);

    let order_nos: Vec<String> = first.iter().map(|o| o.order_no.clone()).collect();
    let held = hold_rows(&db, &order_nos).await;
    let group = config.kafka.consumer_group.clone();
    let mut consume = Child::spawn(&config, &["consume", "--group", &group]);
    wait_until(
        Duration::from_secs(60),
        "the consumer's batch waits on the held orders",
        || async { lock_waiters(&db).await >= 1 },
    )
    .await;
    consume.interrupt();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(consume.running(), "consume exited with a batch in flight");
    held.rollback().await.unwrap();
    assert!(
        consume.exit(Duration::from_secs(30)).await.success(),
        "consume exits 0 after Ctrl-C"
    );

    let applied = count(
        &db,
        &format!("processed_event WHERE consumer_group = '{group}'"),
    )
    .await;
    assert!(applied > 0, "the batch in flight was applied before exit");
    #[derive(sqlx::FromRow)]
    struct Applied {
        kafka_partition: i32,
        kafka_offset: i64,
    }
    let rows: Vec<Applied> = sqlx::query_as(&format!("SELECT kafka_partition, kafka_offset FROM processed_event WHERE consumer_group = '{group}'")).fetch_all(&db.pool).await.unwrap();
    let cfg = config.clone();
    let committed = tokio::task::spawn_blocking(move || committed_offsets(&cfg))
        .await
        .unwrap();
    for r in &rows {
        let c = committed
            .iter()
            .find(|(p, _)| *p == r.kafka_partition)
            .map_or(0, |(_, o)| *o);
        assert!(
            c > r.kafka_offset,
            "partition {}: offset {} applied but the group committed only up to {c}",
            r.kafka_partition,
            r.kafka_offset
        );
    }

    // A restarted member: it applies the rest and new events, nothing twice.
    let consumer = Member::start(&config, &config.kafka.consumer_group).await;
    book(&config, &db, later).await;
    assert_eq!(relay.publish_pending().await.unwrap(), later.len());
    let all = (N + later.len()) as i64;
    wait_until(
        Duration::from_secs(60),
        "the restarted member applies every event",
        || async {
            count(
                &db,
                &format!("processed_event WHERE consumer_group = '{group}'"),
            )
            .await
                >= all
        },
    )
    .await;
    assert_eq!(
        consumer.get(|s| &s.dedup_hits),
        0,
        "nothing applied before was received again"
    );
    assert_eq!(consumer.get(|s| &s.sink_duplicates), 0);
    assert_eq!(
        consumer.get(|s| &s.received),
        (all - applied) as u64,
        "only what was not applied was received"
    );
    consumer.stop().await;
    assert_one_effect_per_payment(&config, &db, all).await;
}

per_dialect!(sigint_on_consume_commits_what_it_applied => sigint_on_consume_commits_what_it_applied_postgres, sigint_on_consume_commits_what_it_applied_mysql);

// ---------------------------------------------------------------------------------------------
// Guard branches under their faults, produced from outside through Redis and the
// database.

/// The service on a private Redis, with its trace on the test's topic.
async fn guarded_service(
    dialect: Dialect,
) -> (RedisServer, Config, Database, server::Server, String) {
    let redis = RedisServer::start();
    let (mut config, db) = rig(dialect).await;
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];
    config.trace.enabled = true;
    orders(&db, 0).await; // the SKU's stock
    let service = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", service.addr);
    (redis, config, db, service, base)
}

async fn trace_of(config: &Config) -> Vec<idemguard::contracts::TraceEvent> {
    let (kafka, topic) = (config.kafka.clone(), config.kafka.trace_topic.clone());
    tokio::task::spawn_blocking(move || read_trace(&kafka, &topic, Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap()
}

/// A placeholder on the fast path whose owner has no heartbeat (it died mid-request): the fast
/// path does not answer 409 for it; the database decides — a new claim when the owner died
/// before its record, a reclaim when its record's lease is over. One order each.
async fn a_dead_owners_placeholder_lets_the_database_decide(dialect: Dialect) {
    let (redis, _config, db, service, base) = guarded_service(dialect).await;
    let http = reqwest::Client::new();
    let mut r = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let hash = idemguard::api::idempotency::request_hash("POST", "/orders", &order_body());
    let placeholder = |owner: &str| {
        serde_json::json!({"state": "PROCESSING", "hash": hash, "owner": owner, "nonce": "n"})
            .to_string()
    };
    let before_record = key();
    let with_record = key();
    for (k, owner) in [
        (&before_record, "dead-host-7-000007"),
        (&with_record, "dead-host-8-000008"),
    ] {
        let _: () = redis::cmd("SET")
            .arg(format!("idem:{k}"))
            .arg(placeholder(owner))
            .arg("PX")
            .arg(60_000)
            .query_async(&mut r)
            .await
            .unwrap();
    }
    processing_record(&db, &with_record, "dead-host-8-000008", now_ms() - 1000).await;
    for k in [&before_record, &with_record] {
        let (status, body) = post_order(&http, &base, k).await;
        assert_eq!(status, StatusCode::CREATED, "{dialect}: {body}");
        assert_eq!(
            count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
            1,
            "{dialect}"
        );
        assert_eq!(record_status(&db, k).await, "SUCCEEDED", "{dialect}");
    }
    // A live owner's placeholder still answers 409.
    let live = key();
    let owner = "live-host-9-000009";
    let _: () = redis::cmd("SET")
        .arg(format!("instance:{owner}"))
        .arg("1")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut r)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("idem:{live}"))
        .arg(placeholder(owner))
        .arg("PX")
        .arg(60_000)
        .query_async(&mut r)
        .await
        .unwrap();
    let (status, _) = post_order(&http, &base, &live).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "{dialect}: a live owner's placeholder"
    );
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
}

per_dialect!(a_dead_owners_placeholder_lets_the_database_decide => a_dead_owners_fast_path_placeholder_lets_the_database_decide_postgres, a_dead_owners_fast_path_placeholder_lets_the_database_decide_mysql);

/// Two retries of each of 30 keys at once, each key's record left PROCESSING by a dead owner
/// whose lease is over, Redis down (no fast path to serialise them): exactly one retry reclaims
/// and creates the order, the other gets 409 or the replay. The trace proves the race was run:
/// some loser had read the dead owner's record and still lost the reclaim.
async fn two_retries_reclaim_once(dialect: Dialect) {
    const KEYS: usize = 30;
    let (mut redis, config, db, service, base) = guarded_service(dialect).await;
    redis.kill();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let keys: Vec<String> = (0..KEYS).map(|_| key()).collect();
    let dead = "dead-host-5-000005";
    for k in &keys {
        processing_record(&db, k, dead, now_ms() - 1000).await;
    }
    let send = |k: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .post(format!("{base}/orders"))
                .header("Idempotency-Key", &k)
                .json(&order_body())
                .send()
                .await
                .unwrap();
            (r.status(), r.headers().contains_key("idempotent-replayed"))
        }
    };
    for k in &keys {
        let (a, b) = tokio::join!(send(k.clone()), send(k.clone()));
        let created_fresh = [a, b]
            .iter()
            .filter(|(s, replayed)| *s == StatusCode::CREATED && !replayed)
            .count();
        assert_eq!(created_fresh, 1, "{dialect}: {k}: {a:?} {b:?}");
        for (s, _) in [a, b] {
            assert!(
                s == StatusCode::CREATED || s == StatusCode::CONFLICT,
                "{dialect}: {s}"
            );
        }
        assert_eq!(
            count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
            1,
            "{dialect}: {k}"
        );
    }
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
    let lost_the_race = trace_of(&config)
        .await
        .iter()
        .filter(|e| {
            e.outcome == Decision::InFlightRejected && e.detail == format!("{dead} is processing")
        })
        .count();
    assert!(
        lost_the_race >= 1,
        "{dialect}: no retry lost the reclaim of a record it had read: the race was not run"
    );
}

per_dialect!(two_retries_reclaim_once => two_retries_reclaim_a_dead_owners_record_once_postgres, two_retries_reclaim_a_dead_owners_record_once_mysql);

/// The claim's insert meets a record that is gone when it reads it back (purged by retention
/// in between). Produced by a trigger that makes the insert of this one key report a
/// conflict (MariaDB) or do nothing (PostgreSQL) with no row there. The request answers 500,
/// creates nothing and drops its fast-path placeholder; the retry, the fault gone, creates the
/// order at once — not 409 from the placeholder of an owner that gave up.
async fn a_record_purged_between_insert_and_read(dialect: Dialect) {
    let (_redis, _config, db, service, base) = guarded_service(dialect).await;
    let http = reqwest::Client::new();
    let k = key();
    let install = match dialect {
        Dialect::Postgres => vec![
            format!("CREATE FUNCTION igt_purged() RETURNS trigger AS $$ BEGIN IF NEW.request_id = '{k}' THEN RETURN NULL; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"),
            "CREATE TRIGGER igt_purged BEFORE INSERT ON idempotency_record FOR EACH ROW EXECUTE FUNCTION igt_purged()".to_string(),
        ],
        Dialect::Mysql => vec![format!(
            "CREATE TRIGGER igt_purged BEFORE INSERT ON idempotency_record FOR EACH ROW BEGIN IF NEW.request_id = '{k}' THEN SIGNAL SQLSTATE '23000' SET MYSQL_ERRNO = 1062, MESSAGE_TEXT = 'Duplicate entry (test: purged before the read)'; END IF; END"
        )],
    };
    for sql in &install {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
    let (status, body) = post_order(&http, &base, &k).await;
    assert_eq!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{dialect}: {body}"
    );
    let of_k = format!("WHERE req_id = '{k}'");
    assert_eq!(
        count(&db, &format!("order_record {of_k}")).await,
        0,
        "{dialect}"
    );
    sqlx::raw_sql("DROP TRIGGER igt_purged ON idempotency_record")
        .execute(&db.pool)
        .await
        .or(sqlx::raw_sql("DROP TRIGGER igt_purged")
            .execute(&db.pool)
            .await)
        .unwrap();
    let (status, body) = post_order(&http, &base, &k).await;
    assert_eq!(status, StatusCode::CREATED, "{dialect}: {body}");
    assert_eq!(
        count(&db, &format!("order_record {of_k}")).await,
        1,
        "{dialect}"
    );
    assert_eq!(record_status(&db, &k).await, "SUCCEEDED", "{dialect}");
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
}

per_dialect!(a_record_purged_between_insert_and_read => a_record_purged_between_insert_and_read_is_retried_cleanly_postgres, a_record_purged_between_insert_and_read_is_retried_cleanly_mysql);

/// Replays counted while the database fails are kept for the next flush, not lost.
async fn replay_counts_survive_a_failed_flush(dialect: Dialect) {
    let (_config, db) = rig(dialect).await;
    let k = key();
    processing_record(&db, &k, "host-1-000001", now_ms() + 60_000).await;
    let counter = idemguard::api::guard::ReplayCounter::default();
    for _ in 0..3 {
        counter.add(&k);
    }
    let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
    let run = |sql: String| {
        let db = db.clone();
        async move { sqlx::query(&sql).execute(&db.pool).await.unwrap() }
    };
    run(rename("idempotency_record", "idempotency_record_away")).await;
    counter.flush(&db).await; // fails: the table is away
    run(rename("idempotency_record_away", "idempotency_record")).await;
    let replays = |n: i64| {
        let (db, k) = (db.clone(), k.clone());
        async move {
            let with_n =
                format!("idempotency_record WHERE request_id = '{k}' AND replay_count = {n}");
            count(&db, &with_n).await == 1
        }
    };
    assert!(
        replays(0).await,
        "{dialect}: the failed flush wrote nothing"
    );
    counter.flush(&db).await;
    assert!(
        replays(3).await,
        "{dialect}: the failed flush's counts were kept"
    );
    counter.flush(&db).await;
    assert!(replays(3).await, "{dialect}: and written once");
}

per_dialect!(replay_counts_survive_a_failed_flush => replay_counts_survive_a_failed_flush_postgres, replay_counts_survive_a_failed_flush_mysql);

/// An owner alive but late: its lease is over and its liveness cannot be read (Redis down), so a
/// retry reclaims its record and gets an order. The late owner's finalize, arriving after, writes
/// nothing: the record keeps the retry's answer (the finalize is conditional on the owner).
async fn a_late_owners_finalize_writes_nothing(dialect: Dialect) {
    use idemguard::api::idempotency::{self, FinalResponse};
    let (mut redis, _config, db, service, base) = guarded_service(dialect).await;
    redis.kill();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let k = key();
    let late = "late-host-7-000007";
    processing_record(&db, &k, late, now_ms() - 1000).await;
    let (status, body) = post_order(&http, &base, &k).await;
    assert_eq!(status, StatusCode::CREATED, "{dialect}: {body}");
    let order_no = body["orderNo"].as_str().expect("an orderNo").to_string();
    let late_answer = FinalResponse {
        status: "FAILED",
        code: 422,
        body: r#"{"late":true}"#.into(),
        order_no: None,
    };
    let wrote = idempotency::finalize(&db, &k, late, &late_answer, 86_400_000)
        .await
        .unwrap();
    assert!(!wrote, "{dialect}: the late owner's finalize wrote");
    let rec = idempotency::get(&db, &k)
        .await
        .unwrap()
        .expect("the record");
    assert_eq!(
        (rec.status.as_str(), rec.order_no.as_deref()),
        ("SUCCEEDED", Some(order_no.as_str())),
        "{dialect}: {rec:?}"
    );
    assert_ne!(rec.owner, late, "{dialect}");
    let (again, replay) = post_order(&http, &base, &k).await;
    assert_eq!(
        (again, &replay["orderNo"]),
        (StatusCode::CREATED, &body["orderNo"])
    );
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
}

per_dialect!(a_late_owners_finalize_writes_nothing => a_late_owners_finalize_writes_nothing_postgres, a_late_owners_finalize_writes_nothing_mysql);

/// Makes the database refuse the finalize of key `k` (a trigger failing any update that ends
/// its record), as a session ended under the statement would.
async fn refuse_finalize(db: &Database, k: &str) {
    let install = match db.dialect() {
        Dialect::Postgres => vec![
            format!("CREATE FUNCTION igt_refuse_finalize() RETURNS trigger AS $$ BEGIN IF NEW.request_id = '{k}' AND NEW.status <> 'PROCESSING' THEN RAISE EXCEPTION 'test: finalize refused'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"),
            "CREATE TRIGGER igt_refuse_finalize BEFORE UPDATE ON idempotency_record FOR EACH ROW EXECUTE FUNCTION igt_refuse_finalize()".to_string(),
        ],
        Dialect::Mysql => vec![format!(
            "CREATE TRIGGER igt_refuse_finalize BEFORE UPDATE ON idempotency_record FOR EACH ROW BEGIN IF NEW.request_id = '{k}' AND NEW.status <> 'PROCESSING' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'test: finalize refused'; END IF; END"
        )],
    };
    for sql in &install {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
}

/// The fault of [`refuse_finalize`] gone.
async fn accept_finalize(db: &Database) {
    let drop = match db.dialect() {
        Dialect::Postgres => "DROP TRIGGER igt_refuse_finalize ON idempotency_record",
        Dialect::Mysql => "DROP TRIGGER igt_refuse_finalize",
    };
    exec(db, drop).await;
}

/// The finalize of one key is refused by the database (a trigger, as a session ended under it
/// would), `serve` answers 201 and is SIGKILLed before its background retry. The fast path must
/// not hold that answer — it would keep every retry away from the record, PROCESSING for good
/// (found by the 180 s chaos storm). Once the owner's heartbeat and the record's lease are gone,
/// a retry with the same key on a new service reclaims the record, gets the same order back from
/// the database layer — the same 201 body — and the record ends SUCCEEDED holding it.
async fn a_refused_finalize_then_a_crash_leaves_no_record_processing(dialect: Dialect) {
    let redis = RedisServer::start();
    let (mut config, db) = rig(dialect).await;
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];
    config.instance.heartbeat_ttl = Duration::from_secs(2);
    config.idempotency.lease = Duration::from_secs(3);
    orders(&db, 0).await; // the SKU's stock
    let k = key();
    refuse_finalize(&db, &k).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let post = |base: String| {
        let (http, k) = (http.clone(), k.clone());
        async move {
            let r = http
                .post(format!("{base}/orders"))
                .header("Idempotency-Key", &k)
                .json(&order_body())
                .send()
                .await
                .unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };

    let (mut first, base) = Child::serve(&config, &[]).await;
    let (status, answered) = post(base).await;
    assert_eq!(status, StatusCode::CREATED, "{dialect}: {answered}");
    assert_eq!(
        record_status(&db, &k).await,
        "PROCESSING",
        "{dialect}: the finalize was refused"
    );
    // Killed before its background retry (a second later) — which the trigger refuses anyway.
    first.kill().await;
    accept_finalize(&db).await;

    // The client's retry, on a new service, until the dead owner's heartbeat and lease are gone.
    let (mut second, base) = Child::serve(&config, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, again) = loop {
        let (status, body) = post(base.clone()).await;
        if status != StatusCode::CONFLICT {
            break (status, body);
        }
        assert!(
            Instant::now() < deadline,
            "{dialect}: still 409 30 s after a 3 s lease and a 2 s heartbeat"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(status, StatusCode::CREATED, "{dialect}: {again}");
    assert_eq!(again, answered, "{dialect}: the same 201 body");
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
        1,
        "{dialect}: one order"
    );
    let rec = idemguard::api::idempotency::get(&db, &k)
        .await
        .unwrap()
        .expect("the record");
    assert_eq!(
        (rec.status.as_str(), rec.response_body.as_deref()),
        ("SUCCEEDED", Some(answered.as_str())),
        "{dialect}: the record is final with the first answer, not left PROCESSING behind the fast path"
    );
    second.kill().await;
}

per_dialect!(a_refused_finalize_then_a_crash_leaves_no_record_processing => a_refused_finalize_then_a_crash_leaves_no_record_processing_postgres, a_refused_finalize_then_a_crash_leaves_no_record_processing_mysql);

/// The fast path's value of `k` on the service's private Redis (None when absent).
async fn fast_path_value(redis: &RedisServer, k: &str) -> Option<serde_json::Value> {
    let mut r = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let raw: Option<String> = redis::cmd("GET")
        .arg(format!("idem:{k}"))
        .query_async(&mut r)
        .await
        .unwrap();
    raw.map(|v| serde_json::from_str(&v).unwrap())
}

/// A refused finalize, the service alive: the fast path keeps only the owner's placeholder (a
/// retry meanwhile is 409, never the answer of a record that does not hold it); the background
/// retry writes the record once the database accepts it, and only then the fast path's answer,
/// which a retry gets replayed — the same 201 body.
async fn a_refused_finalize_reaches_the_fast_path_only_once_written(dialect: Dialect) {
    let (redis, _config, db, service, base) = guarded_service(dialect).await;
    let http = reqwest::Client::new();
    let k = key();
    refuse_finalize(&db, &k).await;
    let post = || {
        http.post(format!("{base}/orders"))
            .header("Idempotency-Key", &k)
            .json(&order_body())
            .send()
    };
    let first = post().await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED, "{dialect}");
    let answered = first.text().await.unwrap();
    assert_eq!(record_status(&db, &k).await, "PROCESSING", "{dialect}");
    let held = fast_path_value(&redis, &k).await;
    assert_eq!(
        held.as_ref().map(|v| v["state"].clone()),
        Some("PROCESSING".into()),
        "{dialect}: the fast path holds no answer the record does not: {held:?}"
    );
    let meanwhile = post().await.unwrap();
    assert_eq!(meanwhile.status(), StatusCode::CONFLICT, "{dialect}");

    accept_finalize(&db).await;
    wait_until(
        Duration::from_secs(20),
        "the background finalize writes the record",
        || async { record_status(&db, &k).await == "SUCCEEDED" },
    )
    .await;
    wait_until(
        Duration::from_secs(5),
        "the background finalize then writes the fast path",
        || async {
            fast_path_value(&redis, &k)
                .await
                .is_some_and(|v| v["state"] == "FINISHED")
        },
    )
    .await;
    let held = fast_path_value(&redis, &k).await.unwrap();
    assert_eq!(held["body"], answered.as_str(), "{dialect}");
    let replay = post().await.unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED, "{dialect}");
    assert!(
        replay.headers().contains_key("idempotent-replayed"),
        "{dialect}"
    );
    assert_eq!(replay.text().await.unwrap(), answered, "{dialect}");
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{k}'")).await,
        1,
        "{dialect}"
    );
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();
}

per_dialect!(a_refused_finalize_reaches_the_fast_path_only_once_written => a_refused_finalize_reaches_the_fast_path_only_once_written_postgres, a_refused_finalize_reaches_the_fast_path_only_once_written_mysql);
