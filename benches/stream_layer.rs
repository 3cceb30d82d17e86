//! Benchmark of line 3: events/second through the deduplicating consumer against a
//! bare rdkafka consumer doing the same durable work with none of the logic
//! (`support/bare_consumer.rs`: per batch one transaction — the order update and one multi-row
//! insert per sink table that skips conflicts — then the offset commit), same broker, same
//! database, same run; on unique events and on a topic where half the messages are duplicates.
//! The levers are measured one by one against today's behaviour (batch 100, sinks
//! one after another, synchronous offset commit): concurrent sinks, asynchronous offset commit,
//! batches of 100 / 500 / 1,000, and the adaptive batch (100 idle, up to 1,000 behind).
//!
//! Which resource saturates, measured: every run also prints where the machine's CPU went in its
//! window (`support/proc_cpu.rs`, from `/proc`): CPU µs per event and cores used by this process
//! (the consumer under test, librdkafka's threads included), the database server (PostgreSQL:
//! the postmaster's helpers and the backends of the bench's own database; MariaDB: the whole
//! `mariadbd`, other clients' work included), the broker (Apache Kafka), the rest of the machine
//! ("others") and its idle cores; the report gives the medians for the bare consumer and for
//! today's and the default consumer.
//!
//!   scripts/stack up && cargo bench --bench stream_layer
//!
//! Metrics on against off: the consumers run with their metrics recorded (as with
//! `metrics.listen` set), and the default runs a second time with them off
//! (`metrics::set_recording(false)`), before or after the first by round; the report gives both
//! medians and their ratio. `IDEMGUARD_BENCH_ONLY_DEFAULT=1` runs only these two (unique
//! events); `IDEMGUARD_BENCH_METRICS=on|off` only one of them (for an instruction count under
//! callgrind, BENCHMARKS.md).
//!
//! Sizes: IDEMGUARD_BENCH_EVENTS (default 20000) events per round, IDEMGUARD_BENCH_ROUNDS
//! (default 3) rounds, medians reported. Every run of a round reads the same topics from the
//! start with its own group, on the same database reset in between (orders back to CREATED,
//! sink tables emptied). Every loop is bounded; everything runs against the loopback stack.

#[path = "support/stats.rs"]
mod stats;
use stats::{knob, median};
#[path = "support/proc_cpu.rs"]
mod proc_cpu;
use proc_cpu::{Group, Usage, Watch};
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

/// Events per second through the deduplicating consumer until `n` messages are handled, and the
/// CPU each process group used meanwhile.
async fn dedup_consume(
    config: &Config,
    db: &Database,
    n: usize,
    watch: &Watch,
) -> (f64, Arc<ConsumeStats>, Usage) {
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
    let cpu_from = proc_cpu::sample(watch);
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
    let cpu = proc_cpu::usage_counting_new(&cpu_from, &proc_cpu::sample(watch));
    stop.cancel();
    handle.await.unwrap().unwrap();
    (rate, stats, cpu)
}

/// The process groups a consumer run uses, as this bench names them (this process is the
/// consumer under test; the database server is named in [`db_name`]).
const CPU_GROUPS: [Group; 3] = [Group::Service, Group::Database, Group::Kafka];

fn group_name(dialect: Dialect, g: Group) -> &'static str {
    match g {
        Group::Service => "consumer",
        Group::Database => db_name(dialect),
        Group::Kafka => "kafka",
        other => other.name(),
    }
}

fn db_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "postgres",
        Dialect::Mysql => "mariadbd",
    }
}

/// Where the CPU went in a run (or the medians of several): per group µs per event and cores,
/// then the rest of the machine and its idle cores.
struct CpuFigures {
    groups: Vec<(Group, f64, f64)>,
    others: f64,
    idle: f64,
}

impl CpuFigures {
    fn of_run(u: &Usage, rate: f64) -> CpuFigures {
        CpuFigures {
            groups: CPU_GROUPS
                .iter()
                .map(|g| (*g, u.of(*g) / rate.max(1e-9) * 1e6, u.of(*g)))
                .collect(),
            others: u.others,
            idle: u.idle,
        }
    }

    /// Adds this run's figures to the series under `key`.
    fn record(&self, series: &mut Series, key: &str) {
        let mut put = |k: String, v: f64| series.entry(k).or_default().push(v);
        for (g, us, cores) in &self.groups {
            put(format!("{key}|cpu_us|{}", g.name()), *us);
            put(format!("{key}|cores|{}", g.name()), *cores);
        }
        put(format!("{key}|cores|others"), self.others);
        put(format!("{key}|cores|idle"), self.idle);
    }

    /// The medians of the runs recorded under `key`.
    fn medians(series: &Series, key: &str) -> CpuFigures {
        let m = |k: String| series.get(&k).map_or(0.0, |v| median(v));
        CpuFigures {
            groups: CPU_GROUPS
                .iter()
                .map(|g| {
                    (
                        *g,
                        m(format!("{key}|cpu_us|{}", g.name())),
                        m(format!("{key}|cores|{}", g.name())),
                    )
                })
                .collect(),
            others: m(format!("{key}|cores|others")),
            idle: m(format!("{key}|cores|idle")),
        }
    }

    /// "consumer 310 µs/ev (0.62 cores), postgres 402 µs/ev (0.81 cores), kafka 48 µs/ev (0.10
    /// cores); others 0.31, idle 0.16 of 2 cores; busiest: postgres".
    fn line(&self, dialect: Dialect) -> String {
        let parts: Vec<String> = self
            .groups
            .iter()
            .map(|(g, us, cores)| {
                format!(
                    "{} {us:.0} µs/ev ({cores:.2} cores)",
                    group_name(dialect, *g)
                )
            })
            .collect();
        let busiest = self
            .groups
            .iter()
            .max_by(|a, b| a.2.total_cmp(&b.2))
            .map_or("none", |(g, _, _)| group_name(dialect, *g));
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!(
            "{}; others {:.2}, idle {:.2} of {ncpu} cores; busiest: {busiest}",
            parts.join(", "),
            self.others,
            self.idle
        )
    }
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
        name: "adaptive 100..1000, both levers (default)",
        batch: 100,
        batch_max: 1000,
        concurrent: true,
        async_commit: true,
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

/// One variant's run: events per second, mean batch time (ms), largest batch, CPU used.
struct VariantRun {
    rate: f64,
    mean_ms: f64,
    largest: u64,
    cpu: Usage,
}

async fn run_variant(
    config: &Config,
    db: &Database,
    v: &Variant,
    topic: &str,
    n: usize,
    watch: &Watch,
) -> VariantRun {
    let (rate, st, cpu) = dedup_consume(&configure(config, v, topic), db, n, watch).await;
    let batches = ConsumeStats::get(&st.batches).max(1);
    VariantRun {
        rate,
        mean_ms: ConsumeStats::get(&st.busy_micros) as f64 / batches as f64 / 1000.0,
        largest: ConsumeStats::get(&st.largest_batch),
        cpu,
    }
}

/// Medians of one dialect over the rounds, by series name.
type Series = std::collections::BTreeMap<String, Vec<f64>>;

async fn round(dialect: Dialect, n: usize, r: usize, series: &mut Series) {
    let (config, db) = common::migrated_database(dialect).await;
    let watch = Watch {
        client_pid: 0, // no load generator: the producer has finished before the runs
        database_name: proc_cpu::database_name(&config.database.url),
    };
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
    let put = |s: &mut Series, k: String, v: f64| s.entry(k).or_default().push(v);
    for (t, label) in [(&topics[0], "unique"), (&topics[1], "50% dup")] {
        for batch in [100, 1000] {
            if only_default() {
                continue;
            }
            reset(&db).await;
            let (b, cpu) = bare_consumer::bare_consume(&config, &db, t, n, batch, &watch).await;
            let key = format!("{label}|bare {batch}");
            put(series, key.clone(), b);
            let cpu = CpuFigures::of_run(&cpu, b);
            println!(
                "  {dialect} round {r} {label}: bare consumer, batch {batch:>4}: {b:>8.0} ev/s\n    cpu: {}",
                cpu.line(dialect)
            );
            cpu.record(series, &key);
        }
        let runs = VARIANTS.iter().enumerate().flat_map(|(i, v)| {
            // The default also with its metrics off, before or after the run with them on
            // (alternating by round).
            let sides: &[bool] = match (i == DEFAULT, r % 2) {
                (false, _) => &[true],
                (true, 0) => &[false, true],
                (true, _) => &[true, false],
            };
            sides.iter().map(move |on| (i, v, *on))
        });
        for (i, v, metrics) in runs {
            let skipped = (label != "unique" && i != 0 && i != DEFAULT)
                || (only_default() && (i != DEFAULT || label != "unique"))
                || metrics_sides().is_some_and(|only| only != metrics);
            if skipped {
                continue;
            }
            idemguard::metrics::set_recording(metrics);
            let run = run_variant(&config, &db, v, t, n, &watch).await;
            idemguard::metrics::set_recording(true);
            let key = if metrics {
                format!("{label}|{i}")
            } else {
                format!("{label}|off")
            };
            let name = if metrics {
                v.name
            } else {
                "the default, metrics off"
            };
            put(series, key.clone(), run.rate);
            put(series, format!("{key}|ms"), run.mean_ms);
            let cpu = CpuFigures::of_run(&run.cpu, run.rate);
            println!(
                "  {dialect} round {r} {label}: {:<48} {:>8.0} ev/s, mean batch {:>6.1} ms, largest {}\n    cpu: {}",
                name,
                run.rate,
                run.mean_ms,
                run.largest,
                cpu.line(dialect)
            );
            cpu.record(series, &key);
        }
        if let (Some(on), Some(off)) = (
            series
                .get(&format!("{label}|{DEFAULT}"))
                .and_then(|v| v.last()),
            series.get(&format!("{label}|off")).and_then(|v| v.last()),
        ) {
            let ratio = on / off;
            println!("  {dialect} round {r} {label}: metrics on / off {ratio:.3}");
            put(series, format!("{label}|on/off"), ratio);
        }
    }
    db.pool.close().await;
}

/// `IDEMGUARD_BENCH_ONLY_DEFAULT=1`: the default consumer alone, metrics on and off (for an
/// instruction count under callgrind, where the other runs would take too long).
fn only_default() -> bool {
    std::env::var("IDEMGUARD_BENCH_ONLY_DEFAULT").is_ok_and(|v| v == "1")
}

/// `IDEMGUARD_BENCH_METRICS=off`: the default consumer with its metrics off only (`on`: on
/// only); unset: both, compared.
fn metrics_sides() -> Option<bool> {
    match std::env::var("IDEMGUARD_BENCH_METRICS").as_deref() {
        Ok("on") => Some(true),
        Ok("off") => Some(false),
        _ => None,
    }
}

fn report_metrics(dialect: Dialect, s: &Series) {
    for label in ["unique", "50% dup"] {
        let (Some(on), Some(off)) = (
            s.get(&format!("{label}|{DEFAULT}")),
            s.get(&format!("{label}|off")),
        ) else {
            continue;
        };
        let ratios = s.get(&format!("{label}|on/off")).map_or(0.0, |v| median(v));
        println!(
            "{dialect} {label}: the default, metrics on {:.0} ev/s, off {:.0} ev/s (medians): on / off {:.3}; median of the rounds' ratios {ratios:.3}",
            median(on),
            median(off),
            median(on) / median(off)
        );
    }
}

fn report(dialect: Dialect, s: &Series) {
    report_metrics(dialect, s);
    if only_default() {
        return;
    }
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
        println!("{dialect} {label}: CPU per event and cores used (medians), machine idle:");
        for (key, name) in [
            (
                format!("{label}|bare 100"),
                "bare consumer, batch 100".to_string(),
            ),
            (
                format!("{label}|bare 1000"),
                "bare consumer, batch 1000".to_string(),
            ),
            (format!("{label}|0"), VARIANTS[0].name.to_string()),
            (
                format!("{label}|{DEFAULT}"),
                VARIANTS[DEFAULT].name.to_string(),
            ),
        ] {
            println!(
                "  {name:<48} {}",
                CpuFigures::medians(s, &key).line(dialect)
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
    // As with `metrics.listen` set; the default also runs with them off.
    idemguard::metrics::set_recording(true);
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
