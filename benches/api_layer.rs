//! Benchmark of the API layer (issue 5), in one run against the loopback stack:
//! - unique orders per second through `POST /orders` with every layer on (Idempotency-Key
//!   record, fast path, request lock, database layer, trace) vs the bare insert of the
//!   database-layer benchmark, same database, 16 concurrent clients — target ≥ 0.5;
//! - requests per second and p99 latency of replays of finished keys — target ≥ 20,000/s with
//!   p99 < 5 ms.
//!
//!   scripts/stack up && cargo bench --bench api_layer
//!
//! IDEMGUARD_BENCH_SECS (default 5) per measurement, IDEMGUARD_BENCH_ROUNDS (default 3).
//! The HTTP clients run in the same process as the service: on two cores they take CPU from
//! it, which the figures include.

#[path = "support/stats.rs"]
mod stats;
use stats::median;
#[path = "support/bare_insert.rs"]
mod bare_insert;
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemguard::api::server;
use idemguard::config::Dialect;
use idemguard::contracts::{Instance, OrderNo, RequestId};
use idemguard::db::orders::{NewOrder, Orders};
use idemguard::db::Database;
use idemguard::trace::Tracer;

const CLIENTS: usize = 16;
const REPLAY_CLIENTS: usize = 50;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `clients` loops of `op` for `secs`; returns (operations/s, sorted latencies in µs).
async fn run_for<F, Fut>(clients: usize, secs: u64, op: F) -> (f64, Vec<u64>)
where
    F: Fn(usize, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (stop, done, latencies, op) =
                (stop.clone(), done.clone(), latencies.clone(), op.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    op(c, i).await;
                    mine.push(t.elapsed().as_micros() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let rate = done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    let mut l = Arc::try_unwrap(latencies).unwrap().into_inner().unwrap();
    l.sort_unstable();
    (rate, l)
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

async fn bench_dialect(dialect: Dialect, secs: u64, rounds: usize) {
    let (mut config, db) = common::migrated_database(dialect).await;
    let topics = common::fresh_topics(&config, &["bench.payment", "bench.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.database.max_connections = CLIENTS as u32;
    let service = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", service.addr);
    let orders = Orders::new(db.clone(), Tracer::log_only(&Instance::current()));
    for sku in 1..=CLIENTS as i64 {
        orders.set_stock(sku, 1_000_000_000).await.unwrap();
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()
        .unwrap();
    println!("\n{dialect}: {CLIENTS} clients for orders, {REPLAY_CLIENTS} for replays, {secs} s per measurement, {rounds} rounds");

    let create = {
        let (http, base) = (http.clone(), base.clone());
        move |client: usize, _i: u64| {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let body = serde_json::json!({"userId": client, "skuId": client + 1, "quantity": 1, "amount": 1999});
                let r = http
                    .post(format!("{base}/orders"))
                    .header(
                        "Idempotency-Key",
                        RequestId::generate("BENCH", "ORDER").as_str(),
                    )
                    .json(&body)
                    .send()
                    .await
                    .expect("POST /orders");
                assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
            }
        }
    };
    let bare = {
        let db: Database = db.clone();
        move |client: usize, _i: u64| {
            let db = db.clone();
            async move {
                let order = NewOrder {
                    request_id: RequestId::generate("BENCH", "ORDER"),
                    order_no: OrderNo::generate(),
                    user_id: client as i64,
                    sku_id: client as i64 + 1,
                    quantity: 1,
                    amount: 1999,
                    fence: None,
                };
                bare_insert::insert_one(&db, &order).await;
            }
        }
    };
    // Warm-up.
    run_for(CLIENTS, 1, create.clone()).await;
    run_for(CLIENTS, 1, bare.clone()).await;

    let (mut api_rates, mut bare_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut api_lat = Vec::new();
    for round in 1..=rounds {
        let (b, _) = run_for(CLIENTS, secs, bare.clone()).await;
        let (a, lat) = run_for(CLIENTS, secs, create.clone()).await;
        println!(
            "  round {round}: POST /orders {a:>7.0}/s (p50 {:.1} ms, p99 {:.1} ms) | bare insert {b:>7.0}/s | ratio {:.2}",
            pct(&lat, 0.5),
            pct(&lat, 0.99),
            a / b
        );
        api_rates.push(a);
        bare_rates.push(b);
        ratios.push(a / b);
        api_lat = lat;
    }

    // Replays: 200 finished keys, replayed at random by 50 clients.
    let mut keys = Vec::new();
    for i in 0..200 {
        let k = RequestId::generate("BENCH", "ORDER").to_string();
        let body = serde_json::json!({"userId": i, "skuId": 1, "quantity": 1, "amount": 1999});
        let r = http
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", &k)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        keys.push((k, body));
    }
    let keys = Arc::new(keys);
    let replay = {
        let (http, base, keys) = (http.clone(), base.clone(), keys.clone());
        move |client: usize, i: u64| {
            let (http, base, keys) = (http.clone(), base.clone(), keys.clone());
            async move {
                let (k, body) = &keys[(client * 7919 + i as usize) % keys.len()];
                let r = http
                    .post(format!("{base}/orders"))
                    .header("Idempotency-Key", k)
                    .json(body)
                    .send()
                    .await
                    .expect("replay");
                assert_eq!(r.status(), 201);
                assert!(r.headers().contains_key("idempotent-replayed"));
                let _ = r.bytes().await;
            }
        }
    };
    run_for(REPLAY_CLIENTS, 1, replay.clone()).await;
    let (mut replay_rates, mut replay_p99) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (r, lat) = run_for(REPLAY_CLIENTS, secs, replay.clone()).await;
        println!(
            "  round {round}: replays {r:>7.0}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms",
            pct(&lat, 0.5),
            pct(&lat, 0.99),
            pct(&lat, 1.0)
        );
        replay_rates.push(r);
        replay_p99.push(pct(&lat, 0.99));
    }
    let ratio = median(&ratios);
    let (rr, rp) = (median(&replay_rates), median(&replay_p99));
    println!(
        "{dialect}: POST /orders median {:.0}/s vs bare insert {:.0}/s: ratio {ratio:.2} (target >= 0.5: {}); p99 {:.1} ms",
        median(&api_rates),
        median(&bare_rates),
        if ratio >= 0.5 { "met" } else { "NOT met" },
        pct(&api_lat, 0.99)
    );
    println!(
        "{dialect}: replays median {rr:.0}/s, p99 {rp:.2} ms (target >= 20000/s and p99 < 5 ms: {})",
        if rr >= 20_000.0 && rp < 5.0 { "met" } else { "NOT met" }
    );
    service.shutdown.cancel();
    let _ = service.done.await;
}

fn main() {
    let secs = env_u64("IDEMGUARD_BENCH_SECS", 5).clamp(1, 60);
    let rounds = env_u64("IDEMGUARD_BENCH_ROUNDS", 3).clamp(1, 15) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        for dialect in common::DIALECTS {
            bench_dialect(dialect, secs, rounds).await;
        }
    });
}
