//! The console tests' world: a fresh database, a Redis server of the test's own (so the lock list
//! is exactly what the test wrote, and so the test may kill it), fresh topics, and one incident
//! written into all of them.
//!
//! The incident is written here row by row, key by key and message by message, in the shapes the
//! shared contracts fix (queries/*/schema.sql, contracts::keys, LockHolder, PaymentSucceeded,
//! TraceEvent through the real Tracer). When the API service and the consumer exist, `Incident::
//! write` is the one function to replace by driving them (POST /orders twice, a payment callback,
//! the consumer over three deliveries); the tests read only the `Incident` IDs it returns.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect};
use idemguard::contracts::{
    format_ms, headers, keys, new_event_id, now_ms, Instance, Layer, LockHolder, OrderNo, Outcome,
    PaymentSucceeded, RequestId, TraceEvent,
};
use idemguard::db::Database;
use idemguard::trace::Tracer;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::common;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Update;
use idemguard::console::tui::ui;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tokio::sync::mpsc;

use crate::support::redis_server;
pub use redis_server::RedisServer;

pub struct World {
    pub config: Config,
    pub db: Database,
    pub redis: RedisServer,
    pub redlock: Vec<RedisServer>,
    pub dialect: Dialect,
}

pub async fn world(dialect: Dialect, redlock_nodes: usize) -> World {
    let (mut config, db) = common::migrated_database(dialect).await;
    let redis = RedisServer::start();
    let redlock: Vec<RedisServer> = (0..redlock_nodes).map(|_| RedisServer::start()).collect();
    config.redis.url = redis.url();
    config.redis.redlock_nodes = redlock.iter().map(|r| r.url()).collect();
    let topics = common::fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.kafka.consumer_group = format!("igt-group-{}", common::unique_suffix());
    config.console.refresh = Duration::from_millis(250);
    World {
        config,
        db,
        redis,
        redlock,
        dialect,
    }
}

/// The IDs of the incident, for the tests to look things up by.
#[derive(Debug, Clone)]
pub struct Incident {
    pub order_no: String,
    pub request_id: String,
    pub event_id: String,
    pub pay_no: String,
    /// Base time of the incident (epoch ms, the start of a minute + 10 s, ten minutes ago), so
    /// every row has a known offset from it.
    pub t0: i64,
    pub live_instance: String,
    pub dead_instance: String,
    /// PROCESSING records: one whose owner is dead and has no order, one whose order exists.
    pub stuck_dead: String,
    pub stuck_with_order: String,
    pub stuck_order_no: String,
    /// When the two stuck records were created (epoch ms; five minutes before the write).
    pub stuck_created_at: i64,
    /// The partition and offsets of the three copies of the payment message.
    pub partition: i32,
    pub offsets: Vec<i64>,
}

pub const USER: i64 = 42;
pub const SKU: i64 = 7;
pub const AMOUNT: i64 = 1999;
pub const POINTS: i64 = 20;

fn ph(dialect: Dialect, n: usize) -> String {
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

enum V {
    I(i64),
    S(String),
    /// NULL text
    N,
    /// NULL integer
    NI,
}

async fn insert(w: &World, table: &str, cols: &[&str], vals: Vec<V>) {
    let sql = format!(
        "INSERT INTO {table} ({}) VALUES ({})",
        cols.join(", "),
        ph(w.dialect, cols.len())
    );
    let mut q = sqlx::query(&sql);
    for v in vals {
        q = match v {
            V::I(i) => q.bind(i),
            V::S(s) => q.bind(s),
            V::N => q.bind(Option::<String>::None),
            V::NI => q.bind(Option::<i64>::None),
        };
    }
    q.execute(&w.db.pool)
        .await
        .unwrap_or_else(|e| panic!("{}: insert into {table}: {e}", w.dialect));
}

/// An order number that `kafka.partitioner` puts in partition 0, where the incident's payment
/// messages are produced: they are placed as a producer that partitions by key places them, so
/// the trace's partition shortcut holds (with any other order number the trace rightly warns
/// that the shortcut did not hold, and reads every partition).
fn order_no_in_partition_zero(config: &Config) -> String {
    loop {
        let order_no = OrderNo::generate().to_string();
        if config
            .kafka
            .partitioner
            .partition_of(order_no.as_bytes(), 3)
            == Some(0)
        {
            return order_no;
        }
    }
}

/// The request hash of the incident's records (any fixed hex string).
const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const IDEM_COLS: [&str; 15] = [
    "request_id",
    "biz_type",
    "request_hash",
    "status",
    "response_code",
    "response_body",
    "order_no",
    "owner",
    "fence",
    "lease_until",
    "replay_count",
    "created_at",
    "updated_at",
    "expire_at",
    "version",
];
const ORDER_COLS: [&str; 12] = [
    "req_id",
    "order_no",
    "user_id",
    "sku_id",
    "quantity",
    "amount",
    "status",
    "version",
    "fence",
    "payment_event_id",
    "created_at",
    "updated_at",
];

impl Incident {
    /// One order during a sale: the request retried twice (replayed), the lock contended, the
    /// payment event delivered three times (two dedup hits), every sink written once; plus two
    /// stuck records and the Redis state the layers leave behind.
    pub async fn write(w: &World) -> Incident {
        let minute = (now_ms() - 10 * 60_000).div_euclid(60_000) * 60_000;
        let t0 = minute + 10_000;
        let mut i = Incident {
            order_no: order_no_in_partition_zero(&w.config),
            request_id: RequestId::generate("APP", "ORDER").to_string(),
            event_id: new_event_id(),
            pay_no: format!("PAY{}", &common::unique_suffix()[..8]),
            t0,
            live_instance: "api-live-0a1b2c".into(),
            dead_instance: "api-dead-3d4e5f".into(),
            stuck_dead: RequestId::generate("APP", "ORDER").to_string(),
            stuck_with_order: RequestId::generate("WEB", "ORDER").to_string(),
            stuck_order_no: OrderNo::generate().to_string(),
            stuck_created_at: 0,
            partition: 0,
            offsets: Vec::new(),
        };
        i.write_order_rows(w).await;
        i.produce_payment_copies(w).await;
        i.write_consumer_rows(w).await;
        // The consumer group has committed past the first copy only: lag 2 on that partition.
        commit_offset(
            &w.config,
            &w.config.kafka.payment_topic,
            i.partition,
            i.offsets[0] + 1,
        );
        i.write_stuck_records(w).await;
        i.write_redis_state(w).await;
        i.emit_trace_events(w);
        i
    }

    /// The order's rows: its record (SUCCEEDED, replayed twice), the order (PAID), its stock
    /// movement, payment and outbox row.
    async fn write_order_rows(&self, w: &World) {
        use V::*;
        insert(
            w,
            "idempotency_record",
            &IDEM_COLS,
            vec![
                S(self.request_id.clone()),
                S("ORDER".into()),
                S(HASH.into()),
                S("SUCCEEDED".into()),
                I(201),
                S("{\"orderNo\":\"…\"}".into()),
                S(self.order_no.clone()),
                S(self.live_instance.clone()),
                I(3),
                I(self.t0 + 30_000),
                I(2),
                I(self.t0),
                I(self.t0 + 40),
                I(self.t0 + 7 * 86_400_000),
                I(1),
            ],
        )
        .await;
        insert(
            w,
            "order_record",
            &ORDER_COLS,
            vec![
                S(self.request_id.clone()),
                S(self.order_no.clone()),
                I(USER),
                I(SKU),
                I(1),
                I(AMOUNT),
                S("PAID".into()),
                I(1),
                I(3),
                S(self.event_id.clone()),
                I(self.t0 + 10),
                I(self.t0 + 3_000),
            ],
        )
        .await;
        insert(
            w,
            "stock_movement",
            &["order_no", "req_id", "sku_id", "delta", "created_at"],
            vec![
                S(self.order_no.clone()),
                S(self.request_id.clone()),
                I(SKU),
                I(-1),
                I(self.t0 + 11),
            ],
        )
        .await;
        insert(
            w,
            "payment_flow",
            &[
                "pay_no",
                "order_no",
                "amount",
                "status",
                "event_id",
                "created_at",
            ],
            vec![
                S(self.pay_no.clone()),
                S(self.order_no.clone()),
                I(AMOUNT),
                S("SUCCEEDED".into()),
                S(self.event_id.clone()),
                I(self.t0 + 1_000),
            ],
        )
        .await;
        let hdrs = serde_json::json!({ "eventId": self.event_id, "requestId": self.request_id, "orderNo": self.order_no }).to_string();
        insert(
            w,
            "outbox",
            &[
                "event_id",
                "topic",
                "msg_key",
                "headers",
                "payload",
                "status",
                "created_at",
                "sent_at",
            ],
            vec![
                S(self.event_id.clone()),
                S(w.config.kafka.payment_topic.clone()),
                S(self.order_no.clone()),
                S(hdrs),
                S("{}".into()),
                S("SENT".into()),
                I(self.t0 + 1_001),
                I(self.t0 + 1_050),
            ],
        )
        .await;
    }

    /// The same payment event three times (the relay retried, the broker redelivered), in
    /// partition 0; their offsets kept.
    async fn produce_payment_copies(&mut self, w: &World) {
        let payment = PaymentSucceeded {
            event_id: self.event_id.clone(),
            order_no: self.order_no.clone(),
            request_id: self.request_id.clone(),
            pay_no: self.pay_no.clone(),
            user_id: USER,
            amount: AMOUNT,
            paid_at: self.t0 + 1_000,
        };
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &w.config.kafka.bootstrap_servers)
            .create()
            .unwrap();
        let body = serde_json::to_string(&payment).unwrap();
        for n in 0..3 {
            let h = OwnedHeaders::new()
                .insert(Header {
                    key: headers::EVENT_ID,
                    value: Some(&self.event_id),
                })
                .insert(Header {
                    key: headers::REQUEST_ID,
                    value: Some(&self.request_id),
                })
                .insert(Header {
                    key: headers::ORDER_NO,
                    value: Some(&self.order_no),
                });
            let rec = FutureRecord::to(&w.config.kafka.payment_topic)
                .key(&self.order_no)
                .payload(&body)
                .headers(h)
                .partition(0)
                .timestamp(self.t0 + 2_000 + n * 100);
            let d = producer
                .send(rec, Duration::from_secs(10))
                .await
                .unwrap_or_else(|(e, _)| panic!("produce payment: {e}"));
            let (p, o) = (d.partition, d.offset);
            self.partition = p;
            self.offsets.push(o);
        }
    }

    /// The consumer's decisions: applied once, then two dedup hits; one sink row each.
    async fn write_consumer_rows(&self, w: &World) {
        use V::*;
        insert(
            w,
            "processed_event",
            &[
                "consumer_group",
                "event_id",
                "order_no",
                "topic",
                "kafka_partition",
                "kafka_offset",
                "outcome",
                "processed_at",
                "expire_at",
            ],
            vec![
                S(w.config.kafka.consumer_group.clone()),
                S(self.event_id.clone()),
                S(self.order_no.clone()),
                S(w.config.kafka.payment_topic.clone()),
                I(self.partition as i64),
                I(self.offsets[0]),
                S("applied".into()),
                I(self.t0 + 3_000),
                I(self.t0 + 7 * 86_400_000),
            ],
        )
        .await;
        insert(
            w,
            "points_ledger",
            &[
                "source_event_no",
                "order_no",
                "user_id",
                "points",
                "created_at",
            ],
            vec![
                S(self.event_id.clone()),
                S(self.order_no.clone()),
                I(USER),
                I(POINTS),
                I(self.t0 + 3_001),
            ],
        )
        .await;
        insert(
            w,
            "notification",
            &[
                "event_id",
                "order_no",
                "user_id",
                "channel",
                "body",
                "created_at",
            ],
            vec![
                S(self.event_id.clone()),
                S(self.order_no.clone()),
                I(USER),
                S("sms".into()),
                S("Your order is paid".into()),
                I(self.t0 + 3_002),
            ],
        )
        .await;
    }

    /// Stuck: PROCESSING for 5 minutes, owner dead, no order; and one whose order exists.
    async fn write_stuck_records(&mut self, w: &World) {
        use V::*;
        let created = now_ms() - 5 * 60_000;
        self.stuck_created_at = created;
        insert(
            w,
            "idempotency_record",
            &IDEM_COLS,
            vec![
                S(self.stuck_dead.clone()),
                S("ORDER".into()),
                S(HASH.into()),
                S("PROCESSING".into()),
                NI,
                N,
                N,
                S(self.dead_instance.clone()),
                I(4),
                I(created + 30_000),
                I(0),
                I(created),
                I(created),
                I(created + 7 * 86_400_000),
                I(0),
            ],
        )
        .await;
        insert(
            w,
            "idempotency_record",
            &IDEM_COLS,
            vec![
                S(self.stuck_with_order.clone()),
                S("ORDER".into()),
                S(HASH.into()),
                S("PROCESSING".into()),
                NI,
                N,
                N,
                S(self.live_instance.clone()),
                I(5),
                I(created + 60_000),
                I(1),
                I(created + 1),
                I(created + 1),
                I(created + 7 * 86_400_000),
                I(0),
            ],
        )
        .await;
        insert(
            w,
            "order_record",
            &ORDER_COLS,
            vec![
                S(self.stuck_with_order.clone()),
                S(self.stuck_order_no.clone()),
                I(USER),
                I(SKU),
                I(1),
                I(AMOUNT),
                S("CREATED".into()),
                I(0),
                I(5),
                N,
                I(created + 2),
                I(created + 2),
            ],
        )
        .await;
    }

    /// Redis: the live instance's heartbeat, its lock on the order, the fence counter, the
    /// fast-path key; a lock of the dead instance with no TTL.
    async fn write_redis_state(&self, w: &World) {
        let created = self.stuck_created_at;
        let mut r = w.redis.conn().await;
        let holder = LockHolder {
            instance: self.live_instance.clone(),
            host: "api-host".into(),
            pid: 4242,
            acquired_at: self.t0 + 5,
            ttl_ms: 30_000,
            fence: 3,
            nonce: "n-live".into(),
        };
        let dead = LockHolder {
            instance: self.dead_instance.clone(),
            host: "old-host".into(),
            pid: 999,
            acquired_at: created,
            ttl_ms: 30_000,
            fence: 4,
            nonce: "n-dead".into(),
        };
        let _: () = redis::pipe()
            .cmd("SET")
            .arg(keys::instance(&self.live_instance))
            .arg("alive")
            .arg("PX")
            .arg(600_000)
            .ignore()
            .cmd("SET")
            .arg(keys::order_lock(&self.order_no))
            .arg(holder.to_value())
            .arg("PX")
            .arg(600_000)
            .ignore()
            .cmd("SET")
            .arg(keys::fence(&keys::order_lock(&self.order_no)))
            .arg(3)
            .ignore()
            .cmd("SET")
            .arg(keys::idempotency_fast_path(&self.request_id))
            .arg("{\"status\":\"SUCCEEDED\",\"code\":201}")
            .arg("PX")
            .arg(600_000)
            .ignore()
            .cmd("SET")
            .arg(keys::request_lock(&self.stuck_dead))
            .arg(dead.to_value())
            .ignore()
            .cmd("SET")
            .arg(keys::fence(&keys::request_lock(&self.stuck_dead)))
            .arg(4)
            .ignore()
            .query_async(&mut r)
            .await
            .unwrap();
    }

    /// Trace events through the real emitter, stamped with the incident's times.
    fn emit_trace_events(&self, w: &World) {
        let t0 = self.t0;
        let tracer = Tracer::from_config(
            &w.config,
            &Instance {
                id: self.live_instance.clone(),
                host: "api-host".into(),
                pid: 4242,
            },
        )
        .unwrap();
        let at = |ms: i64, e: TraceEvent| {
            let mut e = e;
            e.ts = format_ms(ms);
            e
        };
        let (o, r_, e) = (
            self.order_no.clone(),
            self.request_id.clone(),
            self.event_id.clone(),
        );
        tracer.emit(at(
            t0,
            TraceEvent::new(Layer::Api, Outcome::Claimed)
                .request_id(&r_)
                .detail("first request"),
        ));
        tracer.emit(at(
            t0 + 5,
            TraceEvent::new(Layer::Lock, Outcome::LockAcquired)
                .order_no(&o)
                .request_id(&r_)
                .detail("fence 3"),
        ));
        tracer.emit(at(
            t0 + 6,
            TraceEvent::new(Layer::Lock, Outcome::LockContended)
                .order_no(&o)
                .request_id(&r_)
                .detail("held by api-live-0a1b2c"),
        ));
        tracer.emit(at(
            t0 + 10,
            TraceEvent::new(Layer::Db, Outcome::OrderCreated)
                .order_no(&o)
                .request_id(&r_),
        ));
        tracer.emit(at(
            t0 + 40,
            TraceEvent::new(Layer::Api, Outcome::Finalized)
                .order_no(&o)
                .request_id(&r_)
                .detail("SUCCEEDED 201"),
        ));
        tracer.emit(at(
            t0 + 500,
            TraceEvent::new(Layer::Api, Outcome::Replayed)
                .order_no(&o)
                .request_id(&r_)
                .detail("retry 1: 201 replayed"),
        ));
        tracer.emit(at(
            t0 + 900,
            TraceEvent::new(Layer::Api, Outcome::Replayed)
                .order_no(&o)
                .request_id(&r_)
                .detail("retry 2: 201 replayed"),
        ));
        tracer.emit(at(
            t0 + 3_000,
            TraceEvent::new(Layer::Stream, Outcome::SinkApplied)
                .order_no(&o)
                .request_id(&r_)
                .event_id(&e)
                .detail("order PAID, points, notification"),
        ));
        tracer.emit(at(
            t0 + 3_100,
            TraceEvent::new(Layer::Stream, Outcome::DedupHit)
                .order_no(&o)
                .event_id(&e)
                .detail("copy 2"),
        ));
        tracer.emit(at(
            t0 + 3_200,
            TraceEvent::new(Layer::Stream, Outcome::DedupHit)
                .order_no(&o)
                .event_id(&e)
                .detail("copy 3"),
        ));
        tracer.flush(Duration::from_secs(10));
        assert_eq!(
            tracer.stats().delivered,
            10,
            "trace events delivered: {:?}",
            tracer.stats()
        );
    }
}

impl Incident {
    /// A duplicate that got through: a second points row for the incident's order, from another
    /// event (points are unique per event, so no constraint stops it — the leak query does).
    pub async fn leak_points(&self, w: &World) -> String {
        let other_event = new_event_id();
        insert(
            w,
            "points_ledger",
            &[
                "source_event_no",
                "order_no",
                "user_id",
                "points",
                "created_at",
            ],
            vec![
                V::S(other_event.clone()),
                V::S(self.order_no.clone()),
                V::I(USER),
                V::I(POINTS),
                V::I(self.t0 + 4_000),
            ],
        )
        .await;
        other_event
    }
}

/// What the real consumer does after processing: commit the next offset for its group.
pub fn commit_offset(config: &Config, topic: &str, partition: i32, next: i64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", &config.kafka.consumer_group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(next))
        .unwrap();
    c.commit(&tpl, CommitMode::Sync)
        .expect("commit the consumer group's offset");
}

// ---------------------------------------------------------------------------------------------
// Driving and drawing the app (shared by the console test files)
// ---------------------------------------------------------------------------------------------

pub fn press(app: &mut App, code: KeyCode) {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
}

pub fn type_str(app: &mut App, s: &str) {
    for c in s.chars() {
        press(app, KeyCode::Char(c));
    }
}

/// Apply updates until `cond` holds (bounded).
/// The read of the trace target's windows has answered (its status line says what it cost):
/// a snapshot taken before would show it under way, or not yet asked.
pub fn trace_read_done(a: &App) -> bool {
    matches!(&a.stores.trace_read, Some((ids, Some(_))) if *ids == a.resolved_ids())
}

pub async fn pump_until(
    app: &mut App,
    rx: &mut mpsc::Receiver<Update>,
    what: &str,
    cond: impl Fn(&App) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while !cond(app) {
        if Instant::now() > deadline {
            let sources: Vec<String> = app
                .timeline()
                .map(|t| {
                    t.entries
                        .iter()
                        .map(|e| format!("{} {}", e.layer, e.source))
                        .collect()
                })
                .unwrap_or_default();
            let health: Vec<String> = app
                .stores
                .backends
                .iter()
                .map(|(b, s)| format!("{}: {:?}", b.name(), s.health))
                .collect();
            let overview: Vec<String> = app.findings().into_iter().map(|f| f.text).collect();
            panic!(
                "timed out waiting for: {what}\nmessage: {:?}\nbackends: {health:#?}\ntimeline: {sources:#?}\ntrace events read: {}\noverview: {overview:#?}",
                app.ui.message, app.stores.trace_log.events_seen
            );
        }
        if let Ok(Some(u)) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
            app.apply(u);
        }
    }
    app.refresh_views();
}

/// Draw the app and return the screen as text.
pub fn screen(app: &mut App, width: u16, height: u16) -> String {
    app.ui.size = (width, height);
    app.refresh_views();
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    t.draw(|f| ui::draw(f, app)).unwrap();
    let buf = t.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Volatile text replaced, so a snapshot says the same thing on every run.
pub fn redactions() -> Vec<(&'static str, &'static str)> {
    vec![
        // The trace's status line: its read is under way or done (and its counts) by the time
        // of the snapshot; that a read is said at all is what the snapshot keeps.
        (
            r"╰ (?:reading the topics' windows of this trace…|read: )[^╯]*╯",
            "╰[trace read]╯",
        ),
        (r"[A-Z]+:ORDER:\d{8}:[0-9a-f-]*…?", "[request_id]"),
        (r"\b\d{17}[0-9a-f]{0,12}…?", "[order_no]"),
        (
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            "[uuid]",
        ),
        (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]*…?", "[uuid]"),
        // A UUID cut by its column right after its second group.
        (r"\b[0-9a-f]{8}-[0-9a-f]{1,4}\b", "[uuid]"),
        (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\.\d{3}Z?", "[datetime]"),
        (r"\b\d\d:\d\d:\d\d\.\d{3}\b", "[time]"),
        (r"\b1\d{12}\b", "[ms]"),
        // A duration and its padding: "9m59s " and "10m00s" are the same cell.
        (
            r"(\b\d+m\d\ds\b|\b\d+h\d\dm\b|\b\d+d\d\dh\b|\b\d+(\.\d)?s\b|\b\d+ms\b) *",
            "[dur] ",
        ),
        // Owner liveness at the end of a truncated cell: a one-character-longer duration
        // before it leaves "owner ali" instead of "owner aliv".
        (r"· owner a[a-z]* *", "· owner [liveness] "),
        (r"PAY[0-9a-f]{8}", "[pay_no]"),
        (r"\.t[0-9a-f]{6,}", ".t[suffix]"),
        (r"igt-group-[0-9a-f]+", "[group]"),
        (r"igt_[0-9a-f]+", "igt_[db]"),
        (r"127\.0\.0\.1:\d{4,5}", "127.0.0.1:[port]"),
        (r" +[▁▂▃▄▅▆▇█][ ▁▂▃▄▅▆▇█]*", " [spark]"),
        // A timeline cell cut right after "· PTTL": how much of the PTTL fits depends on how long
        // the "since" duration before it is.
        (r"· PTTL[^│·]*│", "· PTTL [cut]│"),
    ]
}

#[allow(unused_macros)]
macro_rules! snapshot {
    ($name:expr, $text:expr) => {
        insta::with_settings!({ filters => redactions(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, $text);
        });
    };
}
#[allow(unused_imports)]
pub(crate) use snapshot;

// ---------------------------------------------------------------------------------------------
// Reading the drawn cells the snapshots redact
// ---------------------------------------------------------------------------------------------

/// A duration as the console draws it (`console::format::age`): `350ms`, `4.2s`, `4m12s`,
/// `2h03m`, `3d04h`; `None` for anything else.
pub fn parse_age(s: &str) -> Option<i64> {
    let s = s.trim();
    let num = |t: &str| t.parse::<i64>().ok();
    if let Some(ms) = s.strip_suffix("ms") {
        return num(ms);
    }
    for (big, small, big_ms, small_ms) in [
        ('m', 's', 60_000, 1_000),
        ('h', 'm', 3_600_000, 60_000),
        ('d', 'h', 86_400_000, 3_600_000),
    ] {
        if let Some((a, b)) = s.strip_suffix(small).and_then(|t| t.split_once(big)) {
            if b.len() == 2 {
                return Some(num(a)? * big_ms + num(b)? * small_ms);
            }
        }
    }
    let secs = s.strip_suffix('s')?;
    let (whole, tenth) = secs.split_once('.')?;
    Some(num(whole)? * 1_000 + num(tenth)? * 100)
}

/// The duration drawn right after `label` in `text` (e.g. "PTTL " → the PTTL).
#[track_caller]
pub fn age_after(text: &str, label: &str) -> i64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("`{label}` not drawn in: {text}"));
    let word = text[at + label.len()..]
        .split_whitespace()
        .next()
        .unwrap_or_default();
    parse_age(word).unwrap_or_else(|| panic!("`{label}{word}` is not a duration: {text}"))
}

/// `drawn` (a duration cut to the second or coarser) is `expected_ms` within `slack_ms`: the
/// clock moved between the fixture's write, the view's "now" and this check.
#[track_caller]
pub fn assert_about(what: &str, drawn: i64, expected_ms: i64, slack_ms: i64) {
    assert!(
        (drawn - expected_ms).abs() <= slack_ms,
        "{what}: drawn {drawn} ms, expected {expected_ms} ms ± {slack_ms}"
    );
}

/// The cell under `header` in the first table row drawn with `row` in it: the table's columns
/// (`console::columns`) are laid out under their headers, so the cell is the text from the
/// header's position to the next shown column's (hidden columns have no header).
#[track_caller]
pub fn cell(
    screen: &str,
    columns: &[idemguard::console::columns::Column],
    row: &str,
    header: &str,
) -> String {
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let text = |l: &Vec<char>| l.iter().collect::<String>();
    let r = lines
        .iter()
        .position(|l| text(l).contains(row))
        .unwrap_or_else(|| panic!("no row with `{row}` drawn:\n{screen}"));
    let h = (0..r)
        .rev()
        .find(|i| text(&lines[*i]).contains(columns[0].header) && text(&lines[*i]).contains(header))
        .unwrap_or_else(|| panic!("no header `{header}` above `{row}`:\n{screen}"));
    let head = &lines[h];
    // Each shown header's char position, left to right.
    let mut starts: Vec<(usize, &str)> = Vec::new();
    let mut from = 0;
    for c in columns {
        let hc: Vec<char> = c.header.chars().collect();
        if let Some(p) = (from..head.len().saturating_sub(hc.len() - 1)).find(|p| {
            head[*p..*p + hc.len()] == hc[..]
                && (*p == 0 || head[*p - 1] == ' ' || head[*p - 1] == '│')
        }) {
            starts.push((p, c.header));
            from = p + hc.len();
        }
    }
    let i = starts
        .iter()
        .position(|(_, n)| *n == header)
        .unwrap_or_else(|| panic!("column `{header}` not shown:\n{}", text(head)));
    let line = &lines[r];
    let end = starts
        .get(i + 1)
        .map_or(line.len().saturating_sub(1), |(p, _)| *p)
        .min(line.len());
    let start = starts[i].0.min(end);
    line[start..end]
        .iter()
        .collect::<String>()
        .trim()
        .to_string()
}

/// The text inside the bordered block whose title contains `title`, lines joined by a space.
#[track_caller]
pub fn block(screen: &str, title: &str) -> String {
    let lines: Vec<&str> = screen.lines().collect();
    let top = lines
        .iter()
        .position(|l| l.starts_with('╭') && l.contains(title))
        .unwrap_or_else(|| panic!("no block `{title}` drawn:\n{screen}"));
    lines[top + 1..]
        .iter()
        .take_while(|l| !l.starts_with('╰'))
        .map(|l| l.trim_start_matches('│').trim_end_matches('│').trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The header's refresh period: the configured one, as the console writes it.
#[track_caller]
pub fn assert_refresh_drawn(screen: &str, refresh: Duration) {
    let want = format!("refresh {}", humantime::format_duration(refresh));
    let head = screen.lines().next().unwrap_or_default();
    assert!(head.trim_end().ends_with(&want), "`{want}` in: {head}");
}
