//! Benchmark of line 3 (issue 19): events/second through the deduplicating consumer against a
//! bare rdkafka consumer doing the same durable work with none of the logic
//! (`support/bare_consumer.rs`: per batch one transaction — the order update and one multi-row
//! insert per sink table that skips conflicts — then the offset commit), same broker, same
//! database, same run; on unique events and on a topic where half the messages are duplicates.
//! The levers of issue 19 are measured one by one against today's behaviour (batch 100, sinks
//! one after another, synchronous offset commit): concurrent sinks, asynchronous offset commit,
//! batches of 100 / 500 / 1,000, and the adaptive batch (100 idle, up to 1,000 behind).
//!
//!   scripts/stack up && cargo bench --bench stream_layer
//!
//! Sizes: IDEMGUARD_BENCH_EVENTS (default 20000) events per round, IDEMGUARD_BENCH_ROUNDS
//! (default 3) rounds, medians reported. Every run of a round reads the same topics from the
//! start with its own group, on the same database reset in between (orders back to CREATED,
//! sink tables emptied). Every loop is bounded; everything runs against the loopback stack.

#[path = "support/stats.rs"]
mod stats;
use stats::{knob, median};
#[path = "support/bare_consumer.rs"]
mod bare_consumer;
#[path = "../tests/common/mod.rs"]
mod common;

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

/// CREATED orders, inserted with multi-row statements (bench setup only).
async fn seed_orders(db: &Database, n: usize) -> Vec<(String, String)> {
    let orders: Vec<(String, String)> = (0..n)
        .map(|_| {
            (
                OrderNo::generate().to_string(),
                format!("APP:ORDER:20261129:{}", uuid::Uuid::now_v7()),
            )
        })
        .collect();
    for chunk in orders.chunks(1000) {
        let values: Vec<String> = chunk
            .iter()
            .map(|(o, r)| format!("('{r}', '{o}', 1, 1, 1, 1999, 'CREATED', 0, 0)"))
            .collect();
        let sql = format!(
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES {}",
            values.join(",")
        );
        sqlx::Executor::execute(&db.pool, sql.as_str())
            .await
            .unwrap();
    }
    orders
}

async fn produce_all(config: &Config, topic: &str, events: &[PaymentSucceeded]) {
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    for chunk in events.chunks(2000) {
        let sends = chunk.iter().map(|e| {
            let p = p.clone();
            let body = serde_json::to_vec(e).unwrap();
            let topic = topic.to_string();
            let e = e.clone();
            async move {
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
                    FutureRecord::to(&topic)
                        .key(&e.order_no)
                        .payload(&body)
                        .headers(h),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
            }
        });
        futures::future::join_all(sends).await;
    }
}

/// Events per second through the deduplicating consumer until `n` messages are handled.
async fn dedup_consume(config: &Config, db: &Database, n: usize) -> (f64, Arc<ConsumeStats>) {
    reset(db).await;
    let consumer = PaymentConsumer::new(
        config,
        db.clone(),
        Tracer::log_only(&Instance::current()),
        ConsumeOptions {
            group: Some(format!("dedup-{}", common::unique_suffix())),
            ..Default::default()
        },
    )
    .unwrap();
    let stats = consumer.stats();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(consumer.run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(300);
    while ConsumeStats::get(&stats.received) == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = Instant::now();
    loop {
        let handled = ConsumeStats::get(&stats.applied)
            + ConsumeStats::get(&stats.dedup_hits)
            + ConsumeStats::get(&stats.sink_duplicates);
        if ConsumeStats::get(&stats.received) as usize >= n && handled as usize >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dedup consumer did not finish: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    stop.cancel();
    handle.await.unwrap().unwrap();
    (rate, stats)
}

/// Orders back to CREATED and the sink tables empty, so every run does the same work.
async fn reset(db: &Database) {
    for sql in [
        "UPDATE order_record SET status = 'CREATED', payment_event_id = NULL, version = 0",
        "DELETE FROM points_ledger",
        "DELETE FROM notification",
        "DELETE FROM processed_event",
    ] {
        sqlx::Executor::execute(&db.pool, sql).await.unwrap();
    }
    let tidy: &[&str] = match db.dialect() {
        Dialect::Postgres => &[
            "VACUUM ANALYZE order_record",
            "VACUUM ANALYZE points_ledger",
            "VACUUM ANALYZE notification",
            "VACUUM ANALYZE processed_event",
        ],
        Dialect::Mysql => &[],
    };
    for sql in tidy {
        sqlx::Executor::execute(&db.pool, *sql).await.unwrap();
    }
}

/// One configuration of the deduplicating consumer.
struct Variant {
    name: &'static str,
    batch: usize,
    batch_max: usize,
    concurrent: bool,
    async_commit: bool,
}

const TODAY: Variant = Variant {
    name: "today: batch 100, sinks sequential, sync commit",
    batch: 100,
    batch_max: 100,
    concurrent: false,
    async_commit: false,
};
const VARIANTS: [Variant; 7] = [
    TODAY,
    Variant {
        name: "batch 100 + concurrent sinks",
        batch: 100,
        batch_max: 100,
        concurrent: true,
        async_commit: false,
    },
    Variant {
        name: "batch 100 + async offset commit",
        batch: 100,
        batch_max: 100,
        concurrent: false,
        async_commit: true,
    },
    Variant {
        name: "batch 100, both levers",
        batch: 100,
        batch_max: 100,
        concurrent: true,
        async_commit: true,
    },
    Variant {
        name: "batch 500, both levers",
        batch: 500,
        batch_max: 500,
        concurrent: true,
        async_commit: true,
    },
    Variant {
        name: "batch 1000, both levers",
        batch: 1000,
        batch_max: 1000,
        concurrent: true,
        async_commit: true,
    },
    Variant {
        name: "adaptive 100..1000, concurrent (default)",
        batch: 100,
        batch_max: 1000,
        concurrent: true,
        async_commit: false,
    },
];
const DEFAULT: usize = 6;

fn configure(config: &Config, v: &Variant, topic: &str) -> Config {
    let mut c = config.clone();
    c.kafka.payment_topic = topic.to_string();
    c.consumer.batch_size = v.batch;
    c.consumer.batch_size_max = v.batch_max;
    c.consumer.concurrent_sinks = v.concurrent;
    c.consumer.async_offset_commit = v.async_commit;
    c
}

/// Events per second of one variant, and its mean batch time (ms) and largest batch.
async fn run_variant(
    config: &Config,
    db: &Database,
    v: &Variant,
    topic: &str,
    n: usize,
) -> (f64, f64, u64) {
    let (rate, st) = dedup_consume(&configure(config, v, topic), db, n).await;
    let batches = ConsumeStats::get(&st.batches).max(1);
    let mean_ms = ConsumeStats::get(&st.busy_micros) as f64 / batches as f64 / 1000.0;
    (rate, mean_ms, ConsumeStats::get(&st.largest_batch))
}

/// Medians of one dialect over the rounds, by series name.
type Series = std::collections::BTreeMap<String, Vec<f64>>;

async fn round(dialect: Dialect, n: usize, r: usize, series: &mut Series) {
    let (config, db) = common::migrated_database(dialect).await;
    let orders = seed_orders(&db, n).await;
    let events: Vec<PaymentSucceeded> = orders
        .iter()
        .map(|(o, r)| PaymentSucceeded {
            event_id: new_event_id(),
            order_no: o.clone(),
            request_id: r.clone(),
            pay_no: format!("PAY-{o}"),
            user_id: 1,
            amount: 1999,
            paid_at: 0,
        })
        .collect();
    // Topic 1: n distinct events. Topic 2: n messages, the first n/2 events twice.
    let topics = common::fresh_topics(&config, &["bench.unique", "bench.half"]).await;
    produce_all(&config, &topics[0], &events).await;
    let mut halfset: Vec<PaymentSucceeded> = events[..n / 2].to_vec();
    halfset.extend(events[..n / 2].iter().cloned());
    produce_all(&config, &topics[1], &halfset).await;
    let mut put = |k: String, v: f64| series.entry(k).or_default().push(v);
    for (t, label) in [(&topics[0], "unique"), (&topics[1], "50% dup")] {
        for batch in [100, 1000] {
            reset(&db).await;
            let b = bare_consumer::bare_consume(&config, &db, t, n, batch).await;
            println!(
                "  {dialect} round {r} {label}: bare consumer, batch {batch:>4}: {b:>8.0} ev/s"
            );
            put(format!("{label}|bare {batch}"), b);
        }
        for (i, v) in VARIANTS.iter().enumerate() {
            if label != "unique" && i != 0 && i != DEFAULT {
                continue;
            }
            let (rate, ms, largest) = run_variant(&config, &db, v, t, n).await;
            println!("  {dialect} round {r} {label}: {:<48} {rate:>8.0} ev/s, mean batch {ms:>6.1} ms, largest {largest}", v.name);
            put(format!("{label}|{i}"), rate);
            put(format!("{label}|{i}|ms"), ms);
        }
    }
    db.pool.close().await;
}

fn report(dialect: Dialect, s: &Series) {
    let m = |k: &str| median(&s[k]);
    for label in ["unique", "50% dup"] {
        let (b100, b1000) = (
            m(&format!("{label}|bare 100")),
            m(&format!("{label}|bare 1000")),
        );
        let today = m(&format!("{label}|0"));
        println!("{dialect} {label}: bare consumer {b100:.0} ev/s at batch 100, {b1000:.0} ev/s at batch 1000");
        for (i, v) in VARIANTS.iter().enumerate() {
            let Some(rate) = s.get(&format!("{label}|{i}")).map(|v| median(v)) else {
                continue;
            };
            let bare = if v.batch_max >= 1000 { b1000 } else { b100 };
            println!(
                "{dialect} {label}: {:<48} {rate:>8.0} ev/s  x{:.2} today  {:.3} of bare (batch {})  mean batch {:.1} ms",
                v.name,
                rate / today,
                rate / bare,
                if v.batch_max >= 1000 { 1000 } else { 100 },
                m(&format!("{label}|{i}|ms"))
            );
        }
    }
    println!("{dialect}: targets: default >= 0.8 of the bare consumer; >= 4x today on postgres");
}

#[tokio::main]
async fn main() {
    let n = knob::<usize>("IDEMGUARD_BENCH_EVENTS", 20_000);
    let rounds = knob::<usize>("IDEMGUARD_BENCH_ROUNDS", 3);
    let only = std::env::var("IDEMGUARD_BENCH_DIALECT").unwrap_or_default();
    println!(
        "stream_layer: {n} events per run, {rounds} rounds, medians; trace events to the log only"
    );
    for dialect in [Dialect::Postgres, Dialect::Mysql] {
        if !only.is_empty() && only != format!("{dialect:?}").to_lowercase() {
            continue;
        }
        let mut series = Series::new();
        for r in 1..=rounds {
            round(dialect, n, r, &mut series).await;
        }
        report(dialect, &series);
    }
}
