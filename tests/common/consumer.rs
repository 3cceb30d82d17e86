//! What the consumer tests share (`stream_layer`, `consumer_faults`, `order_service_faults`): a
//! database and fresh payment and DLQ topics of the test's own, payment events and a producer
//! for them, and an in-process consumer-group member to start, wait on and stop.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect};
use idemguard::contracts::{headers, new_event_id, Instance, OrderNo, PaymentSucceeded};
use idemguard::db::Database;
use idemguard::stream::{ConsumeOptions, ConsumeStats, PaymentConsumer};
use idemguard::trace::Tracer;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use super::{fresh_topics, migrated_database, placeholders, unique_suffix};

/// A consumer test's world: its database, its payment and DLQ topics (batches of 50, no trace
/// topic) and a consumer group of its own.
pub struct ConsumerSetup {
    pub dialect: Dialect,
    pub config: Config,
    /// The test's own view of its database, for fixtures and the final counts.
    pub db: Database,
    pub group: String,
}

pub async fn consumer_setup(dialect: Dialect) -> ConsumerSetup {
    super::log::test_log();
    let (mut config, db) = migrated_database(dialect).await;
    let topics = fresh_topics(&config, &["payment.succeeded", "payment.succeeded.dlq"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.dlq_topic = topics[1].clone();
    config.consumer.batch_size = 50;
    config.trace.enabled = false;
    ConsumerSetup {
        dialect,
        config,
        db,
        group: format!("igt-group-{}", unique_suffix()),
    }
}

impl ConsumerSetup {
    /// The real `idemguard consume --group G` on the test's database and topics, followed by
    /// `extra` (e.g. `--crash-after-db-commit 1`); no trace topic, stdout closed, killed when
    /// dropped.
    pub fn consume_command(&self, extra: &[&str]) -> tokio::process::Command {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml");
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
        c.args(["--config", config, "consume", "--group", &self.group])
            .args(extra)
            .env("IDEMGUARD_DATABASE__URL", &self.config.database.url)
            .env(
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
                &self.config.kafka.payment_topic,
            )
            .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &self.config.kafka.dlq_topic)
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// A member of the test's group, connected as `self.config` says.
    pub async fn start_member(&self) -> Member {
        Member::start(&self.config, &self.group).await
    }
}

/// A CREATED order of `user_id`, written straight into the schema: (orderNo, requestId).
pub async fn create_order(db: &Database, user_id: i64) -> (String, String) {
    let order_no = OrderNo::generate().to_string();
    let req = format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7());
    let sql = format!(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES ({}, 1, 1, 1999, 'CREATED', 0, 0)",
        placeholders(db.dialect(), 3)
    );
    sqlx::query(&sql)
        .bind(&req)
        .bind(&order_no)
        .bind(user_id)
        .execute(&db.pool)
        .await
        .unwrap();
    (order_no, req)
}

/// A payment event for `order_no` with a fresh eventId and payNo.
pub fn payment(order_no: &str, request_id: &str, user_id: i64) -> PaymentSucceeded {
    PaymentSucceeded {
        event_id: new_event_id(),
        order_no: order_no.into(),
        request_id: request_id.into(),
        pay_no: format!("PAY{}", unique_suffix()),
        user_id,
        amount: 1999,
        paid_at: 0,
    }
}

pub fn producer(config: &Config) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("acks", "all")
        // consumer_faults sends a message the DLQ producer (1 MB limit) cannot copy.
        .set("message.max.bytes", "2000000")
        .create()
        .unwrap()
}

/// Produces `e` as the outbox relay does: keyed by orderNo, with its eventId, requestId and
/// orderNo headers.
pub async fn produce(p: &FutureProducer, topic: &str, e: &PaymentSucceeded) {
    let body = serde_json::to_vec(e).unwrap();
    let h = OwnedHeaders::new()
        .insert(Header {
            key: headers::EVENT_ID,
            value: Some(e.event_id.as_bytes()),
        })
        .insert(Header {
            key: headers::REQUEST_ID,
            value: Some(e.request_id.as_bytes()),
        })
        .insert(Header {
            key: headers::ORDER_NO,
            value: Some(e.order_no.as_bytes()),
        });
    p.send(
        FutureRecord::to(topic)
            .key(&e.order_no)
            .payload(&body)
            .headers(h),
        Duration::from_secs(10),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
}

/// A counter of [`ConsumeStats`].
pub fn get(c: &AtomicU64) -> u64 {
    ConsumeStats::get(c)
}

/// An in-process consumer-group member with a pool of its own.
pub struct Member {
    pub stop: CancellationToken,
    pub stats: Arc<ConsumeStats>,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Member {
    /// Starts a member of `group`, connected as `config` says.
    pub async fn start(config: &Config, group: &str) -> Member {
        let db = Database::connect(config)
            .await
            .expect("the consumer connects");
        let options = ConsumeOptions {
            group: Some(group.to_string()),
            ..Default::default()
        };
        let tracer = Tracer::log_only(&Instance::current());
        let consumer = PaymentConsumer::new(config, db, tracer, options).unwrap();
        let stats = consumer.stats();
        let stop = CancellationToken::new();
        let handle = tokio::spawn(consumer.run(stop.clone()));
        Member {
            stop,
            stats,
            handle,
        }
    }

    pub fn get(&self, pick: fn(&ConsumeStats) -> &AtomicU64) -> u64 {
        ConsumeStats::get(pick(&self.stats))
    }

    /// Waits (bounded) until the member has applied `n` events; fails at once if it died.
    pub async fn until_applied(&self, n: u64, secs: u64) {
        self.until(&format!("{n} events applied"), secs, |s| {
            ConsumeStats::get(&s.applied) >= n
        })
        .await;
    }

    /// Waits (bounded) until `done`; fails at once if the member stopped on its own.
    pub async fn until(&self, what: &str, secs: u64, done: impl Fn(&ConsumeStats) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done(&self.stats) {
            assert!(
                !self.handle.is_finished(),
                "the consumer stopped on its own before {what}: {:?}",
                self.stats
            );
            assert!(
                Instant::now() < deadline,
                "timed out after {secs}s waiting for {what}: {:?}",
                self.stats
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops it after its current batch (offsets committed); its counters.
    pub async fn stop(self) -> Arc<ConsumeStats> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the consumer stops within 30s")
            .unwrap()
            .unwrap();
        self.stats
    }
}
