//! Benchmark of line 3: events/second through the deduplicating consumer with all sinks, against
//! a bare consumer that only reads the same topic — same broker, same run — and the rate on a
//! topic where half the messages are duplicates.
//!
//!   scripts/stack up && cargo bench --bench stream_layer
//!
//! Sizes: IDEMGUARD_BENCH_EVENTS (default 20000) events per round, 3 rounds, medians reported.
//! Every loop is bounded; everything runs against the loopback stack.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect};
use idemguard::contracts::{headers, new_event_id, Instance, OrderNo, PaymentSucceeded};
use idemguard::db::Database;
use idemguard::stream::{ConsumeOptions, ConsumeStats, PaymentConsumer};
use idemguard::trace::Tracer;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 3;

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

/// Events per second of a bare consumer that reads `n` messages and does nothing else.
async fn bare_read(config: &Config, topic: &str, n: usize) -> f64 {
    let c: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", format!("bare-{}", common::unique_suffix()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    // The clock starts at the first message, as for the deduplicating consumer: group join
    // time is not reading time.
    let _ = tokio::time::timeout(Duration::from_secs(60), c.recv())
        .await
        .expect("first message")
        .unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    let mut read = 1;
    while read < n {
        assert!(Instant::now() < deadline, "bare read did not finish");
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(10), c.recv()).await {
            read += 1;
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Events per second through the deduplicating consumer until `n` messages are handled.
async fn dedup_consume(config: &Config, db: &Database, n: usize) -> (f64, Arc<ConsumeStats>) {
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("IDEMGUARD_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    println!("stream_layer: {n} events per round, {ROUNDS} rounds, batch size from config/local.toml defaults");
    for dialect in [Dialect::Postgres, Dialect::Mysql] {
        let (mut bare, mut unique, mut half) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=ROUNDS {
            let (mut config, db) = common::migrated_database(dialect).await;
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
            // Topic 1: n distinct events. Topic 2: n messages, half of them copies.
            let t_unique = common::fresh_topics(&config, &["bench.unique"])
                .await
                .remove(0);
            produce_all(&config, &t_unique, &events).await;
            let t_half = common::fresh_topics(&config, &["bench.half"])
                .await
                .remove(0);
            let mut halfset: Vec<PaymentSucceeded> = events[..n / 2].to_vec();
            halfset.extend(events[..n / 2].iter().cloned());
            produce_all(&config, &t_half, &halfset).await;

            let b = bare_read(&config, &t_unique, n).await;
            config.kafka.payment_topic = t_unique.clone();
            let (u, _) = dedup_consume(&config, &db, n).await;
            // The half-duplicate topic needs fresh orders: a second database.
            let (mut config2, db2) = common::migrated_database(dialect).await;
            let values: Vec<String> = halfset[..n / 2]
                .iter()
                .map(|e| {
                    format!(
                        "('{}', '{}', 1, 1, 1, 1999, 'CREATED', 0, 0)",
                        e.request_id, e.order_no
                    )
                })
                .collect();
            for chunk in values.chunks(1000) {
                let sql = format!("INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES {}", chunk.join(","));
                sqlx::Executor::execute(&db2.pool, sql.as_str())
                    .await
                    .unwrap();
            }
            config2.kafka.payment_topic = t_half.clone();
            let (h, hstats) = dedup_consume(&config2, &db2, n).await;
            let dups =
                ConsumeStats::get(&hstats.dedup_hits) + ConsumeStats::get(&hstats.sink_duplicates);
            println!(
                "  {dialect} round {round}: bare read {b:>9.0} ev/s | dedup consumer {u:>8.0} ev/s (ratio {:.3}) | 50% duplicates {h:>8.0} ev/s ({dups} duplicates stopped)",
                u / b
            );
            bare.push(b);
            unique.push(u);
            half.push(h);
            db.pool.close().await;
            db2.pool.close().await;
        }
        let (b, u, h) = (median(bare), median(unique), median(half));
        println!(
            "{dialect}: median bare read {b:.0} ev/s, dedup consumer {u:.0} ev/s, ratio {:.3} (target >= 0.5); with 50% duplicates {h:.0} ev/s (ratio {:.3})",
            u / b,
            h / b
        );
    }
}
