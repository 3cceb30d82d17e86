//! Benchmark of the API layer, against baselines doing the same durable work
//! on the same HTTP server, client and database, in one run on the loopback stack:
//!
//! - new orders through idemguard's `POST /orders` (every layer on: key validation, request
//!   hash, Redis fast path, `idempotency_record` claim, `lock:req:{requestId}` with its fence,
//!   the create routine, finalize, the fast-path answer, trace events) vs baseline (a): a
//!   handler running the same three statements — claim insert, create routine, finalize
//!   update, from queries/ — with no idempotency logic (`support/api_baseline.rs`); 16
//!   keep-alive connections. Target ≥ 0.8.
//! - replays of 200 finished keys vs baseline (b): a handler answering from one Redis `GET`;
//!   50 keep-alive connections. Target ≥ 0.8.
//!
//! Each comparison also measures idemguard with `trace.enabled = false` (a second service on
//! the same database): the trace events' share of the difference; and idemguard with its
//! metrics off (the same service, `metrics::set_recording(false)` while that side runs; on for
//! the others, as with `metrics.listen` set): what the metrics cost. Target ≥ 0.98 of off.
//!
//! Both dialects. The load generator is this binary re-executed as a child process
//! (`support/load_client.rs`), so the service is measured, not the client; each measurement
//! also prints where the machine's CPU went (`support/proc_cpu.rs`: the service, the client,
//! the database server, redis-server, the Kafka broker, other work on the machine) and how many
//! Redis commands each request cost (`INFO commandstats`, which counts every client of the
//! shared Redis).
//!
//!   scripts/stack up && cargo bench --bench api_layer
//!
//! IDEMGUARD_BENCH_SECS (default 5) per measurement, IDEMGUARD_BENCH_ROUNDS (default 3); the
//! sides take turns going first from round to round. "service" CPU is this process: the three
//! servers live in it, and only the one under load does work (plus idemguard's heartbeat,
//! outbox relay and replay-count flusher, a few statements a second).

#[path = "support/api_baseline.rs"]
mod api_baseline;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/load_client.rs"]
mod load_client;
#[path = "support/proc_cpu.rs"]
mod proc_cpu;
#[path = "support/stats.rs"]
mod stats;

use std::collections::HashMap;
use std::time::Duration;

use idemguard::api::server;
use idemguard::config::Dialect;
use idemguard::contracts::{Instance, RequestId};
use idemguard::db::orders::Orders;
use idemguard::trace::{TraceCounts, Tracer};
use load_client::{Load, LoadResult};
use proc_cpu::{Usage, GROUPS};
use stats::{knob, median};

const ORDER_CONNECTIONS: usize = 16;
const REPLAY_CONNECTIONS: usize = 50;
const REPLAY_KEYS: usize = 200;
const SKUS: i64 = 16;
const TARGET: f64 = 0.8;

/// One side's measurements over the rounds.
#[derive(Default)]
struct Side {
    rates: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    redis_per_req: Vec<f64>,
    /// CPU µs per request, per group.
    cpu_us: Vec<Vec<f64>>,
    usage: Vec<Usage>,
}

impl Side {
    fn add(&mut self, r: &LoadResult, u: Usage, redis_per_req: f64) {
        self.rates.push(r.ops_per_s);
        self.p50.push(r.p50_ms);
        self.p99.push(r.p99_ms);
        self.redis_per_req.push(redis_per_req);
        self.cpu_us.push(
            GROUPS
                .iter()
                .map(|g| u.of(*g) / r.ops_per_s.max(1e-9) * 1e6)
                .collect(),
        );
        self.usage.push(u);
    }

    /// "service 612 client 240 db 380 redis 31 kafka 12" (median CPU µs per request).
    fn cpu_per_request(&self) -> String {
        GROUPS
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let v: Vec<f64> = self.cpu_us.iter().map(|c| c[i]).collect();
                format!("{} {:.0}", g.name(), median(&v))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Median cores used per group, plus others and idle.
    fn cores(&self) -> String {
        let mut s: Vec<String> = GROUPS
            .iter()
            .map(|g| {
                let v: Vec<f64> = self.usage.iter().map(|u| u.of(*g)).collect();
                format!("{} {:.2}", g.name(), median(&v))
            })
            .collect();
        let others: Vec<f64> = self.usage.iter().map(|u| u.others).collect();
        let idle: Vec<f64> = self.usage.iter().map(|u| u.idle).collect();
        s.push(format!("others {:.2}", median(&others)));
        s.push(format!("idle {:.2}", median(&idle)));
        s.join(" ")
    }
}

/// `calls=` per command of `INFO commandstats` (commands run inside a Lua script count too).
async fn redis_calls(redis: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// Redis commands per request between two `INFO commandstats`, all of them and the main ones
/// ("evalsha 3.00 set 1.00 …"); the second INFO itself is not counted.
fn per_request(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    sent: f64,
) -> (f64, String) {
    let mut per: Vec<(String, f64)> = after
        .iter()
        .map(|(name, n)| {
            let mut d = n.saturating_sub(before.get(name).copied().unwrap_or(0));
            if name == "info" {
                d = d.saturating_sub(1);
            }
            (name.clone(), d as f64 / sent)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect();
    per.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total = per.iter().map(|(_, v)| v).sum();
    let main: Vec<String> = per
        .iter()
        .filter(|(_, v)| *v >= 0.05)
        .map(|(n, v)| format!("{n} {v:.2}"))
        .collect();
    (total, main.join(" "))
}

/// One measurement: the child's result, the CPU split, and Redis commands per request (the
/// warm-up requests, one per connection, included in both counts).
async fn measure(
    load: &Load,
    db_name: &str,
    redis: &mut redis::aio::MultiplexedConnection,
) -> (LoadResult, Usage, (f64, String)) {
    let before = redis_calls(redis).await;
    let (r, u) = load_client::drive(load, db_name).await;
    let after = redis_calls(redis).await;
    assert_eq!(
        r.errors, 0,
        "{} wrong answers; the first: {:?}",
        r.errors, r.first_error
    );
    let sent = (r.requests + load.connections as u64) as f64;
    (r, u, per_request(&before, &after, sent))
}

/// The sides of a comparison: the baseline, idemguard, idemguard with `trace.enabled = false`
/// (the trace events' share of the difference), and idemguard with its metrics off.
const SIDES: [&str; 4] = ["baseline ", "idemguard", "no trace ", "no metric"];
/// The side that runs with metrics off.
const METRICS_OFF: usize = 3;
/// Metrics on against off, new orders and replays.
const METRICS_TARGET: f64 = 0.98;

/// The three sides for `rounds` rounds, the first side of a round rotating; returns each
/// side's measurements and the median ratios of idemguard and of idemguard without trace
/// events to the baseline.
async fn compare(
    what: &str,
    rounds: usize,
    loads: [&Load; 4],
    db_name: &str,
    redis: &mut redis::aio::MultiplexedConnection,
) -> ([Side; 4], f64, f64, f64) {
    let mut sides: [Side; 4] = Default::default();
    let (mut ratios, mut quiet_ratios, mut metric_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        for k in 0..4 {
            let i = (round - 1 + k) % 4;
            idemguard::metrics::set_recording(i != METRICS_OFF);
            let (r, u, (calls, which)) = measure(loads[i], db_name, redis).await;
            println!(
                "  {what} round {round} {}: {:>7.0}/s p50 {:>5.1} ms p99 {:>5.1} ms | cores: {}",
                SIDES[i],
                r.ops_per_s,
                r.p50_ms,
                r.p99_ms,
                u.line()
            );
            println!("    redis {calls:.2} commands/request: {which}");
            sides[i].add(&r, u, calls);
        }
        let rate = |i: usize| sides[i].rates[round - 1];
        let (ratio, quiet) = (rate(1) / rate(0), rate(2) / rate(0));
        let metrics = rate(1) / rate(METRICS_OFF);
        println!("  {what} round {round} ratio {ratio:.2} (no trace {quiet:.2}); metrics on / off {metrics:.3}");
        ratios.push(ratio);
        quiet_ratios.push(quiet);
        metric_ratios.push(metrics);
    }
    (
        sides,
        median(&ratios),
        median(&quiet_ratios),
        median(&metric_ratios),
    )
}

fn summary(dialect: Dialect, what: &str, sides: &[Side; 4], ratios: (f64, f64, f64)) {
    let (ratio, quiet, metrics) = ratios;
    let [base, ours, _, _] = sides;
    println!(
        "{dialect}: {what}: idemguard median {:.0}/s (p50 {:.1} ms, p99 {:.1} ms) vs baseline {:.0}/s (p50 {:.1} ms, p99 {:.1} ms): ratio {ratio:.2} (target >= {TARGET}: {}); with trace.enabled = false {quiet:.2}",
        median(&ours.rates),
        median(&ours.p50),
        median(&ours.p99),
        median(&base.rates),
        median(&base.p50),
        median(&base.p99),
        if ratio >= TARGET { "met" } else { "NOT met" }
    );
    println!(
        "{dialect}: {what}: metrics on / off {metrics:.3} (target >= {METRICS_TARGET}: {})",
        if metrics >= METRICS_TARGET {
            "met"
        } else {
            "NOT met"
        }
    );
    for (name, side) in SIDES.iter().zip(sides) {
        println!(
            "  {name}: redis {:.2} cmd/req; CPU µs per request: {}; cores: {}",
            median(&side.redis_per_req),
            side.cpu_per_request(),
            side.cores()
        );
    }
}

/// Finishes `REPLAY_KEYS` orders through idemguard and stores each answer for baseline (b)
/// under `prefix`; returns the keys.
async fn finished_keys(
    base: &str,
    prefix: &str,
    redis: &mut redis::aio::MultiplexedConnection,
) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut keys = Vec::new();
    for _ in 0..REPLAY_KEYS {
        let key = RequestId::generate("BENCH", "ORDER").to_string();
        let r = http
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", &key)
            .json(&load_client::replay_body())
            .send()
            .await
            .expect("POST /orders");
        assert_eq!(r.status(), 201);
        let answer = r.text().await.expect("the answer");
        redis::cmd("SET")
            .arg(format!("{prefix}{key}"))
            .arg(answer)
            .arg("PX")
            .arg(3_600_000)
            .query_async::<()>(redis)
            .await
            .expect("SET the baseline's answer");
        keys.push(key);
    }
    keys
}

async fn bench_dialect(dialect: Dialect, secs: u64, rounds: usize) {
    let (mut config, db) = common::migrated_database(dialect).await;
    let topics = common::fresh_topics(&config, &["bench.payment", "bench.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.database.max_connections = ORDER_CONNECTIONS as u32;
    // The shared Redis keeps the answers of this run's orders for 10 minutes, not a day.
    config.idempotency.fast_path_ttl = Duration::from_secs(600);
    let service = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let mut untraced = config.clone();
    untraced.trace.enabled = false;
    let quiet = server::start(untraced, "127.0.0.1:0")
        .await
        .expect("service without trace events starts");
    let prefix = format!("bench:api:{}:", common::unique_suffix());
    let baseline = api_baseline::start(&config, &prefix).await;
    let orders = Orders::new(db.clone(), Tracer::log_only(&Instance::current()));
    for sku in 1..=SKUS {
        orders.set_stock(sku, 1_000_000_000).await.unwrap();
    }
    let mut redis = redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    let db_name = proc_cpu::database_name(&config.database.url);
    let (ours_url, quiet_url, base_url) = (
        format!("http://{}", service.addr),
        format!("http://{}", quiet.addr),
        format!("http://{}", baseline.addr),
    );
    println!(
        "\n{dialect}: {ORDER_CONNECTIONS} connections for new orders, {REPLAY_CONNECTIONS} for replays, {secs} s per measurement, {rounds} rounds; load {}",
        load_average()
    );
    let new_order = |url: String| Load {
        url,
        connections: ORDER_CONNECTIONS,
        secs: secs as f64,
        replay_share: 0.0,
        replay_keys: vec![],
        skus: SKUS,
        expect_status: 201,
        expect_replay_header: false,
    };
    let loads = [
        new_order(format!("{base_url}/orders")),
        new_order(format!("{ours_url}/orders")),
        new_order(format!("{quiet_url}/orders")),
        new_order(format!("{ours_url}/orders")),
    ];
    let (sides, ratio, no_trace, metrics) = compare(
        "new orders",
        rounds,
        [&loads[0], &loads[1], &loads[2], &loads[3]],
        &db_name,
        &mut redis,
    )
    .await;
    summary(dialect, "new orders", &sides, (ratio, no_trace, metrics));

    let keys = finished_keys(&ours_url, &prefix, &mut redis).await;
    let replay = |url: String, header: bool| Load {
        url,
        connections: REPLAY_CONNECTIONS,
        secs: secs as f64,
        replay_share: 1.0,
        replay_keys: keys.clone(),
        skus: SKUS,
        expect_status: 201,
        expect_replay_header: header,
    };
    let loads = [
        replay(format!("{base_url}/replays"), false),
        replay(format!("{ours_url}/orders"), true),
        replay(format!("{quiet_url}/orders"), true),
        replay(format!("{ours_url}/orders"), true),
    ];
    let (sides, ratio, no_trace, metrics) = compare(
        "replays",
        rounds,
        [&loads[0], &loads[1], &loads[2], &loads[3]],
        &db_name,
        &mut redis,
    )
    .await;
    summary(dialect, "replays", &sides, (ratio, no_trace, metrics));
    let (rate, p99) = (median(&sides[1].rates), median(&sides[1].p99));
    println!(
        "{dialect}: replays, the absolute target >= 20000/s with p99 < 5 ms: {} ({rate:.0}/s, p99 {p99:.1} ms); load {}",
        if rate >= 20_000.0 && p99 < 5.0 { "met" } else { "NOT met" },
        load_average()
    );

    let stored: Vec<String> = keys.iter().map(|k| format!("{prefix}{k}")).collect();
    let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&stored).query_async(&mut redis).await;
    baseline.shutdown.cancel();
    let _ = baseline.done.await;
    let mut servers = [service, quiet];
    for s in &mut servers {
        s.shutdown.cancel();
        let _ = (&mut s.done).await;
    }
    // The shutdown's flush returns once every delivery report has been served.
    all_traced(dialect, servers[0].trace_counts());
}

/// The traced side's events, once its shutdown has flushed them: every one delivered, or its
/// figures measured less than the service's work (a full producer queue drops events rather
/// than wait).
fn all_traced(dialect: Dialect, counts: TraceCounts) {
    println!(
        "{dialect}: trace events of idemguard's side: {} emitted, {} delivered, {} dropped",
        counts.emitted, counts.delivered, counts.dropped
    );
    assert!(
        counts.dropped == 0 && counts.delivered == counts.emitted,
        "{dialect}: the traced side did not deliver every trace event ({counts:?}): its figures are not the service's work"
    );
}

/// The 1/5/15-minute load average, as `uptime` shows it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    if std::env::var_os(load_client::CLIENT_ENV).is_some() {
        load_client::run_child();
        return;
    }
    let secs = knob::<u64>("IDEMGUARD_BENCH_SECS", 5).clamp(1, 60);
    let rounds = knob::<u64>("IDEMGUARD_BENCH_ROUNDS", 3).clamp(1, 15) as usize;
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
