//! A trace on a large trace topic (issue 18), first cut: `idemguard trace` of orders spread
//! through seven days of history, read in windows (this issue) against the whole-topic read it
//! replaces (the baseline, measured in the same run).
//!
//!     cargo bench --bench trace_scale
//!
//! The bench builds its own data on the local stack and removes it at the end: two topics of
//! its own (3 partitions) — the trace topic with `IDEMGUARD_BENCH_TRACE_EVENTS` events (default
//! 500,000) and the payment topic with a tenth as many messages, Kafka timestamps spread evenly
//! over the seven days before now — and a PostgreSQL database of its own holding the traced
//! orders' rows. `IDEMGUARD_BENCH_KEEP=1` keeps them and prints the `idemguard trace` command
//! that reads them.
//!
//! The full benchmark of the issue (20,000,000 events, 1,000,000 orders, p50/p99 of 20 traces)
//! is not this file yet.

use std::time::{Duration, Instant};

use idemguard::config::{Config, ConfigSource};
use idemguard::console::cli::headless;
use idemguard::console::read::bounded::{self, Keep};
use idemguard::console::read::records::{self, TraceIds};
use idemguard::console::read::topics::StartAt;
use idemguard::contracts::{
    format_ms, headers, now_ms, Layer, Outcome, PaymentSucceeded, TraceEvent, TraceTarget,
};
use idemguard::db::{migrate, Database};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tokio_util::sync::CancellationToken;

const DAY_MS: i64 = 24 * 3600 * 1000;
const TRACED_ORDERS: usize = 5;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn local_config() -> Config {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    Config::load(&ConfigSource {
        file: Some(file),
        env: vec![],
    })
    .expect("config/local.toml loads")
}

/// Produces the topics' history in time order: `events` filler trace events, a tenth as many
/// payment messages, and the Kafka side of each traced order at its time.
fn fill(config: &Config, events: usize, orders: &[(String, String, String, i64)], now: i64) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("linger.ms", "50")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .set("log_level", "3")
        .create()
        .expect("producer");
    let start = now - 7 * DAY_MS;
    let payments = events / 10;
    let send = |topic: &str, key: &str, payload: &[u8], ts: i64, h: OwnedHeaders| {
        let mut record = BaseRecord::<str, [u8]>::to(topic)
            .key(key)
            .payload(payload)
            .timestamp(ts)
            .headers(h);
        loop {
            match producer.send(record) {
                Ok(()) => return,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    };
    let mut next_order = 0;
    for i in 0..events {
        let ts = start + 7 * DAY_MS * i as i64 / events as i64;
        while next_order < orders.len() && orders[next_order].3 <= ts {
            let (o, r, e, t) = &orders[next_order];
            let claim = TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(r);
            let hit = TraceEvent::new(Layer::Stream, Outcome::DedupHit)
                .order_no(o)
                .event_id(e);
            for (ev, at) in [(claim, *t), (hit, t + 1_900)] {
                let mut ev = ev;
                ev.ts = format_ms(at);
                let key = ev.key().unwrap().to_string();
                let body = serde_json::to_vec(&ev).unwrap();
                send(
                    &config.kafka.trace_topic,
                    &key,
                    &body,
                    at,
                    OwnedHeaders::new(),
                );
            }
            let p = PaymentSucceeded {
                event_id: e.clone(),
                order_no: o.clone(),
                request_id: r.clone(),
                pay_no: format!("P{next_order}"),
                user_id: 7,
                amount: 1999,
                paid_at: t + 1_500,
            };
            let h = OwnedHeaders::new()
                .insert(Header {
                    key: headers::EVENT_ID,
                    value: Some(e.as_str()),
                })
                .insert(Header {
                    key: headers::ORDER_NO,
                    value: Some(o.as_str()),
                });
            let body = serde_json::to_vec(&p).unwrap();
            send(&config.kafka.payment_topic, o, &body, t + 1_500, h);
            next_order += 1;
        }
        let e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .order_no(format!("F{i:019}"))
            .request_id(format!("APP:ORDER:20261129:filler-{i}"));
        let mut e = e;
        e.ts = format_ms(ts);
        let body = serde_json::to_vec(&e).unwrap();
        send(
            &config.kafka.trace_topic,
            e.order_no.as_deref().unwrap(),
            &body,
            ts,
            OwnedHeaders::new(),
        );
        if i % 10 == 0 && i / 10 < payments {
            let order = format!("G{i:019}");
            send(
                &config.kafka.payment_topic,
                &order,
                b"{}",
                ts,
                OwnedHeaders::new(),
            );
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
}

async fn write_rows(db: &Database, (o, r, e, t): &(String, String, String, i64)) {
    let f = t + 2_000;
    let idem = format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, order_no, owner, \
         lease_until, created_at, updated_at, expire_at) VALUES ('{r}', 'ORDER', 'h', 'SUCCEEDED', \
         '{o}', 'api-1', {t}, {t}, {f}, {f})"
    );
    let order = format!(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, \
         payment_event_id, created_at, updated_at) VALUES ('{r}', '{o}', 7, 7, 1, 1999, 'PAID', '{e}', {t}, {f})"
    );
    for sql in [idem, order] {
        sqlx::query(&sql)
            .execute(&db.pool)
            .await
            .expect("insert a traced order's rows");
    }
}

/// The read this issue replaced: the rows, then both topics from their beginning, keeping what
/// names the order (`bounded::read_topics_for` before issue 18). Its time, or why it failed (the
/// 30 s read deadline on a large topic).
async fn baseline(
    config: &Config,
    db: &Database,
    target: &TraceTarget,
) -> Result<Duration, String> {
    let started = Instant::now();
    let rows = records::trace_rows(db, &TraceIds::of_target(target))
        .await
        .expect("rows");
    let keep = Keep::of(target, Some(&rows));
    let (payments, keep) = bounded::read_payments_keeping(config, keep, &Default::default())
        .await
        .map_err(|e| format!("{e:#}"))?;
    let log = bounded::read_trace_log_keeping(
        config,
        StartAt::Beginning,
        &keep,
        &CancellationToken::new(),
    )
    .await
    .map_err(|e| format!("{e:#}"))?;
    assert!(
        log.events_seen > 0 && payments.messages_seen > 0,
        "the baseline finds the order too"
    );
    Ok(started.elapsed())
}

#[tokio::main]
async fn main() {
    let events = env_usize("IDEMGUARD_BENCH_TRACE_EVENTS", 500_000);
    let keep_data = std::env::var("IDEMGUARD_BENCH_KEEP").is_ok_and(|v| v == "1");
    let mut config = local_config();
    let suffix = format!("{:x}", uuid::Uuid::now_v7().as_u128() & 0xffff_ffff);
    config.kafka.trace_topic = format!("idemguard.trace.bench{suffix}");
    config.kafka.payment_topic = format!("payment.succeeded.bench{suffix}");
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .create()
        .expect("admin");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let topics = [
        config.kafka.trace_topic.clone(),
        config.kafka.payment_topic.clone(),
    ];
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, 3, TopicReplication::Fixed(1)))
        .collect();
    admin
        .create_topics(&new, &opts)
        .await
        .expect("create topics");
    let server = Database::connect_url(&config, "postgres://root@127.0.0.1:5432/postgres")
        .await
        .expect("postgres");
    let db_name = format!("igb_trace_{suffix}");
    sqlx::query(&format!("CREATE DATABASE {db_name}"))
        .execute(&server.pool)
        .await
        .expect("create db");
    config.database.url = format!("postgres://root@127.0.0.1:5432/{db_name}");
    let db = Database::connect(&config).await.expect("connect");
    migrate::migrate(&db).await.expect("migrate");

    let now = now_ms();
    let orders: Vec<(String, String, String, i64)> = (0..TRACED_ORDERS)
        .map(|k| {
            let t = now - 7 * DAY_MS + 7 * DAY_MS * (2 * k as i64 + 1) / (2 * TRACED_ORDERS as i64);
            (
                format!("2026112600000000{k:04}"),
                format!("APP:ORDER:20261126:bench-{suffix}-{k}"),
                uuid::Uuid::new_v4().to_string(),
                t,
            )
        })
        .collect();
    for o in &orders {
        write_rows(&db, o).await;
    }
    let filled = Instant::now();
    let c = config.clone();
    let o = orders.clone();
    tokio::task::spawn_blocking(move || fill(&c, events, &o, now))
        .await
        .unwrap();
    println!(
        "trace topic: {events} events, payment topic: {} messages, over 7 days; produced in {:.1?}",
        events / 10,
        filled.elapsed()
    );

    println!("\n| order (position in history) | windowed trace | messages scanned | baseline (whole topics) | messages in the topics | speed-up |");
    println!("|---|---|---|---|---|---|");
    for (k, (order_no, ..)) in orders.iter().enumerate() {
        let target = TraceTarget::classify(order_no);
        let started = Instant::now();
        let r = headless::trace(&config, &target).await;
        let after = started.elapsed();
        assert!(r.ok && r.data.found, "{}", r.failures());
        let cost = r.data.read_cost.clone().expect("cost");
        let (before, ratio) = match baseline(&config, &db, &target).await {
            Ok(b) => (
                format!("{b:.2?}"),
                format!("{:.0}×", b.as_secs_f64() / after.as_secs_f64()),
            ),
            Err(e) => (format!("failed: {e}"), "—".to_string()),
        };
        println!(
            "| {}/{} | {:.2?} | {} | {before} | {} | {ratio} |",
            2 * k + 1,
            2 * TRACED_ORDERS,
            after,
            cost.messages_scanned(),
            events + events / 10,
        );
    }

    if keep_data {
        println!(
            "\nkept: IDEMGUARD_DATABASE__URL={} IDEMGUARD_KAFKA__TRACE_TOPIC={} IDEMGUARD_KAFKA__PAYMENT_TOPIC={} target/release/idemguard trace {}",
            config.database.url, config.kafka.trace_topic, config.kafka.payment_topic, orders[TRACED_ORDERS / 2].0
        );
        return;
    }
    db.pool.close().await;
    let _ = sqlx::query(&format!("DROP DATABASE {db_name}"))
        .execute(&server.pool)
        .await;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let _ = admin.delete_topics(&names, &opts).await;
}
