//! A trace on a large trace topic: `idemguard trace` of orders spread through seven
//! days of history, read in windows (this issue) against the whole-topic read it replaces (the
//! baseline, measured in the same run).
//!
//!     cargo bench --bench trace_scale
//!     IDEMGUARD_BENCH_TRACE_EVENTS=20000000 IDEMGUARD_BENCH_PAYMENTS=5000000 \
//!       IDEMGUARD_BENCH_ORDERS=1000000 cargo bench --bench trace_scale     # the issue's sizes
//!
//! The bench builds its own data on the local stack and removes it at the end: two topics of
//! its own (3 partitions), Kafka timestamps spread evenly over the seven days before now —
//! `IDEMGUARD_BENCH_TRACE_EVENTS` trace events (default 500,000), `IDEMGUARD_BENCH_PAYMENTS`
//! payment messages (default a tenth of the events) — and a PostgreSQL database of its own with
//! `IDEMGUARD_BENCH_ORDERS` filler orders (default 0) plus the `IDEMGUARD_BENCH_TRACES` traced
//! orders (default 20), spread through the history. The baseline (both topics from their
//! beginning) runs for the first `IDEMGUARD_BENCH_BASELINE_TRACES` (default 3): each costs up to
//! its 30 s deadline per topic.
//!
//! The in-memory broker (tansu) holds every message: the filling stops early, and says so, when
//! tansu's resident memory passes `IDEMGUARD_BENCH_TANSU_MAX_MB` (default 6,000) or the machine's
//! available memory falls under `IDEMGUARD_BENCH_MIN_AVAILABLE_MB` (default 6,000): the broker is
//! shared. `IDEMGUARD_BENCH_KEEP=1` keeps the data and prints the `idemguard trace` command that
//! reads it.

use std::time::{Duration, Instant};

use idemguard::config::{Config, ConfigSource};
use idemguard::console::cli::headless;
use idemguard::console::read::bounded::{self, Keep};
use idemguard::console::read::catch_up::StartAt;
use idemguard::console::read::records::{self, TraceIds};
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

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A line of a `/proc` status-like file, in MB (`kB` values).
fn proc_mb(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Resident memory of the tansu broker, MB (the first process named `tansu`).
fn tansu_rss_mb() -> Option<u64> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == "tansu" {
            return proc_mb(&format!("{}/status", dir.display()), "VmRSS:");
        }
    }
    None
}

fn available_mb() -> u64 {
    proc_mb("/proc/meminfo", "MemAvailable:").unwrap_or(0)
}

/// Why the filling must stop now, if it must (see the module docs).
fn memory_stop() -> Option<String> {
    let (tansu, avail) = (tansu_rss_mb().unwrap_or(0), available_mb());
    let max_tansu = env_usize("IDEMGUARD_BENCH_TANSU_MAX_MB", 6_000) as u64;
    let min_avail = env_usize("IDEMGUARD_BENCH_MIN_AVAILABLE_MB", 6_000) as u64;
    (tansu >= max_tansu || avail <= min_avail).then(|| {
        format!(
            "tansu RSS {tansu} MB (limit {max_tansu}), available {avail} MB (floor {min_avail})"
        )
    })
}

fn local_config() -> Config {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    Config::load(&ConfigSource {
        file: Some(file),
        env: vec![],
    })
    .expect("config/local.toml loads")
}

/// What [`fill`] produced, and why it stopped early if it did.
struct Filled {
    events: usize,
    payments: usize,
    stopped: Option<String>,
}

type Order = (String, String, String, i64);

fn producer(config: &Config) -> BaseProducer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("linger.ms", "50")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .set("log_level", "3")
        .create()
        .expect("producer")
}

fn send(producer: &BaseProducer, topic: &str, key: &str, payload: &[u8], ts: i64, h: OwnedHeaders) {
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
}

/// The Kafka side of one traced order: its claim and dedup-hit events, its payment message.
fn send_order(producer: &BaseProducer, config: &Config, k: usize, (o, r, e, t): &Order) {
    let claim = TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(r);
    let hit = TraceEvent::new(Layer::Stream, Outcome::DedupHit)
        .order_no(o)
        .event_id(e);
    for (mut ev, at) in [(claim, *t), (hit, t + 1_900)] {
        ev.ts = format_ms(at);
        let key = ev.key().unwrap().to_string();
        let body = serde_json::to_vec(&ev).unwrap();
        send(
            producer,
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
        pay_no: format!("P{k}"),
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
    send(
        producer,
        &config.kafka.payment_topic,
        o,
        &body,
        t + 1_500,
        h,
    );
}

/// Produces the topics' history in time order: `events` filler trace events, `payments` filler
/// payment messages, and the Kafka side of each traced order at its time. Stops filling early
/// when [`memory_stop`] says so (the traced orders are produced all the same).
fn fill(config: &Config, events: usize, payments: usize, orders: &[Order], now: i64) -> Filled {
    let producer = producer(config);
    let start = now - 7 * DAY_MS;
    let every = (events / payments.max(1)).max(1);
    let mut out = Filled {
        events: 0,
        payments: 0,
        stopped: None,
    };
    let mut next_order = 0;
    for i in 0..events {
        let ts = start + 7 * DAY_MS * i as i64 / events as i64;
        while next_order < orders.len() && orders[next_order].3 <= ts {
            send_order(&producer, config, next_order, &orders[next_order]);
            next_order += 1;
        }
        if i % 200_000 == 0 {
            if let Some(why) = memory_stop() {
                out.stopped = Some(format!("after {i} events: {why}"));
                break;
            }
        }
        let mut e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .order_no(format!("F{i:019}"))
            .request_id(format!("APP:ORDER:20261129:filler-{i}"));
        e.ts = format_ms(ts);
        let body = serde_json::to_vec(&e).unwrap();
        let key = e.order_no.as_deref().unwrap();
        send(
            &producer,
            &config.kafka.trace_topic,
            key,
            &body,
            ts,
            OwnedHeaders::new(),
        );
        out.events += 1;
        if i % every == 0 && out.payments < payments {
            let order = format!("G{i:019}");
            send(
                &producer,
                &config.kafka.payment_topic,
                &order,
                b"{}",
                ts,
                OwnedHeaders::new(),
            );
            out.payments += 1;
        }
    }
    for (k, o) in orders.iter().enumerate().skip(next_order) {
        send_order(&producer, config, k, o);
    }
    producer.flush(Duration::from_secs(300)).expect("flush");
    out
}

/// `n` filler orders (and their idempotency records) spread over the seven days, in one
/// statement each: the database a trace looks its IDs up in holds a production's orders.
async fn filler_orders(db: &Database, n: usize, now: i64) {
    if n == 0 {
        return;
    }
    let start = now - 7 * DAY_MS;
    let step = 7 * DAY_MS / n as i64;
    let idem = format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, order_no, owner, \
         lease_until, created_at, updated_at, expire_at) SELECT 'APP:ORDER:filler-' || g, 'ORDER', 'h', \
         'SUCCEEDED', 'H' || lpad(g::text, 19, '0'), 'api-1', {start} + g * {step}, {start} + g * {step}, \
         {start} + g * {step} + 2000, {start} + g * {step} + 2000 FROM generate_series(1, {n}) g"
    );
    let order = format!(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, \
         payment_event_id, created_at, updated_at) SELECT 'APP:ORDER:filler-' || g, 'H' || lpad(g::text, 19, '0'), \
         g % 1000, 7, 1, 1999, 'PAID', 'filler-event-' || g, {start} + g * {step}, {start} + g * {step} + 2000 \
         FROM generate_series(1, {n}) g"
    );
    for sql in [idem, order, "ANALYZE".to_string()] {
        sqlx::query(&sql)
            .execute(&db.pool)
            .await
            .expect("insert the filler orders");
    }
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
/// names the order (before `bounded::read_topics_for` read windows). Its time, or why it failed (the
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

/// Where one trace's time went, ms: per topic (payment, trace) the reader's setup, the offset
/// lookup (with its probes), the wait for the payment topic's IDs (topics read at the same
/// time, marked `‖`) and the scan of the windows; then the rest of `total` (connecting to the
/// database, its rows, Redis, assembling), Redis as its status measured it. Topics read at the
/// same time overlap: the longest of them counts, not their sum.
fn phases(
    r: &headless::Document<idemguard::console::read::timeline::Timeline>,
    total: Duration,
) -> String {
    let mut out = String::new();
    let (mut sum, mut longest) = (0, 0);
    let concurrent = r.data.read_cost.as_ref().is_some_and(|c| c.concurrent);
    for t in r.data.read_cost.iter().flat_map(|c| &c.topics) {
        let name = if t.topic.starts_with("payment") {
            "pay"
        } else {
            "trace"
        };
        let tm = t.times;
        let (s, l, w, n) = (tm.setup_ms, tm.lookup_ms, tm.wait_ms, tm.scan_ms);
        sum += s + l + w + n;
        longest = longest.max(s + l + w + n);
        let wait = if w > 0 {
            format!("+w{w}")
        } else {
            String::new()
        };
        let sep = if concurrent { "‖ " } else { "· " };
        out.push_str(&format!(
            "{name} {s}+{l}({}p){wait}+{n} {sep}",
            t.offset_probes
        ));
    }
    let topics = if concurrent { longest } else { sum };
    let redis = r.backends.iter().find(|b| b.name == "redis");
    let rest = (total.as_millis() as u64).saturating_sub(topics);
    out.push_str(&format!(
        "rest {rest} (redis {:.0})",
        redis.map_or(0.0, |b| b.latency_ms)
    ));
    out
}

/// The `p`th percentile (nearest rank) of `sorted`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The real console on the bench's topics in a detached tmux pane: how long until its first
/// frame, and its largest resident memory over `watch` (the live readers catch up with the
/// last hour meanwhile).
fn console_figures(config: &Config, watch: Duration) -> Result<(Duration, u64), String> {
    let session = format!("igb{}", uuid::Uuid::new_v4().simple());
    let log = std::env::temp_dir().join(format!("{session}.log"));
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(args)
            .output()
            .map_err(|e| format!("tmux: {e}"))
    };
    let mut env: Vec<String> = bench_env(config)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.push(format!("IDEMGUARD_CONSOLE__LOG_FILE={}", log.display()));
    let mut args = vec!["new-session", "-d", "-s", &session, "-x", "160", "-y", "45"];
    for e in &env {
        args.extend(["-e", e.as_str()]);
    }
    let started = Instant::now();
    args.extend([env!("CARGO_BIN_EXE_idemguard"), "console"]);
    tmux(&args)?;
    let first_frame = loop {
        let screen = tmux(&["capture-pane", "-t", &session, "-p"])?;
        if String::from_utf8_lossy(&screen.stdout).contains("idemguard console") {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(30) {
            tmux(&["kill-session", "-t", &session])?;
            return Err("no first frame within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = tmux(&["display", "-p", "-t", &session, "#{pane_pid}"])?;
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
    let mut peak = 0;
    let until = Instant::now() + watch;
    while Instant::now() < until {
        peak = peak.max(proc_mb(&format!("/proc/{pid}/status"), "VmRSS:").unwrap_or(0));
        std::thread::sleep(Duration::from_millis(200));
    }
    tmux(&["kill-session", "-t", &session])?;
    let _ = std::fs::remove_file(&log);
    Ok((first_frame, peak))
}

/// The environment that points the real binary at the bench's data: its config, database and
/// topics.
fn bench_env(config: &Config) -> [(&'static str, String); 4] {
    [
        (
            "IDEMGUARD_CONFIG",
            format!("{}/config/local.toml", env!("CARGO_MANIFEST_DIR")),
        ),
        ("IDEMGUARD_DATABASE__URL", config.database.url.clone()),
        (
            "IDEMGUARD_KAFKA__TRACE_TOPIC",
            config.kafka.trace_topic.clone(),
        ),
        (
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            config.kafka.payment_topic.clone(),
        ),
    ]
}

/// Each order traced by the real CLI, one fresh `idemguard trace --json` process for each — what
/// an operator runs: nothing learned by an earlier trace, every connection made anew, the
/// process's start and the database connection included. Wall times, in the orders' order.
fn cli_traces(config: &Config, orders: &[Order]) -> Result<Vec<Duration>, String> {
    let mut out = Vec::with_capacity(orders.len());
    for (order_no, ..) in orders {
        let started = Instant::now();
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args(["trace", order_no, "--json"])
            .envs(bench_env(config))
            .output()
            .map_err(|e| format!("idemguard trace: {e}"))?;
        out.push(started.elapsed());
        if !run.status.success() {
            return Err(format!("idemguard trace {order_no}: {}", run.status));
        }
    }
    Ok(out)
}

#[tokio::main]
async fn main() {
    let events = env_usize("IDEMGUARD_BENCH_TRACE_EVENTS", 500_000);
    let payments = env_usize("IDEMGUARD_BENCH_PAYMENTS", events / 10);
    let filler = env_usize("IDEMGUARD_BENCH_ORDERS", 0);
    let traces = env_usize("IDEMGUARD_BENCH_TRACES", 20).max(1);
    let baselines = env_usize("IDEMGUARD_BENCH_BASELINE_TRACES", 3);
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
    let started = Instant::now();
    filler_orders(&db, filler, now).await;
    println!(
        "database: {filler} filler orders written in {:.1?}",
        started.elapsed()
    );
    let orders: Vec<Order> = (0..traces)
        .map(|k| {
            let t = now - 7 * DAY_MS + 7 * DAY_MS * (2 * k as i64 + 1) / (2 * traces as i64);
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
    let tansu_before = tansu_rss_mb().unwrap_or(0);
    let filled = Instant::now();
    let c = config.clone();
    let o = orders.clone();
    let f = tokio::task::spawn_blocking(move || fill(&c, events, payments, &o, now))
        .await
        .unwrap();
    println!(
        "trace topic: {} events, payment topic: {} messages, over 7 days; produced in {:.1?}; \
         tansu RSS {tansu_before} → {} MB, available memory {} MB",
        f.events,
        f.payments,
        filled.elapsed(),
        tansu_rss_mb().unwrap_or(0),
        available_mb()
    );
    if let Some(why) = &f.stopped {
        println!("filling stopped early {why}");
    }
    let (trace_total, payment_total) = (f.events + 2 * traces, f.payments + traces);

    println!("\n| order (position in history) | windowed trace | where its time went | trace topic scanned | payment topic scanned | baseline (whole topics) | speed-up |");
    println!("|---|---|---|---|---|---|---|");
    let mut times = Vec::new();
    let mut worst = (0u64, 0u64);
    let mut first_probes = 0;
    for (k, (order_no, ..)) in orders.iter().enumerate() {
        let target = TraceTarget::classify(order_no);
        let started = Instant::now();
        let r = headless::trace(&config, &target).await;
        let after = started.elapsed();
        assert!(r.ok && r.data.found, "{}", r.failures());
        times.push(after);
        let cost = r.data.read_cost.clone().expect("cost");
        first_probes += cost.topics.iter().map(|t| t.offset_probes).sum::<u64>();
        let scanned = |topic: &str| {
            cost.topics
                .iter()
                .filter(|t| t.topic == topic)
                .map(|t| t.messages_scanned)
                .sum::<u64>()
        };
        let (st, sp) = (
            scanned(&config.kafka.trace_topic),
            scanned(&config.kafka.payment_topic),
        );
        worst = (worst.0.max(st), worst.1.max(sp));
        let (before, ratio) = if k < baselines {
            match baseline(&config, &db, &target).await {
                Ok(b) => (
                    format!("{b:.2?}"),
                    format!("{:.0}×", b.as_secs_f64() / after.as_secs_f64()),
                ),
                Err(e) => (format!("failed: {e}"), "—".to_string()),
            }
        } else {
            ("not run".to_string(), "—".to_string())
        };
        let pct = |n: u64, of: usize| 100.0 * n as f64 / of.max(1) as f64;
        println!(
            "| {}/{} | {after:.2?} | {} | {st} ({:.4} %) | {sp} ({:.4} %) | {before} | {ratio} |",
            2 * k + 1,
            2 * traces,
            phases(&r, after),
            pct(st, trace_total),
            pct(sp, payment_total),
        );
    }
    times.sort();
    println!("{:.1} probes a trace", first_probes as f64 / traces as f64);
    println!(
        "\n{traces} traces: p50 {:.2?}, p99 {:.2?}; most scanned: trace topic {} of {trace_total} \
         ({:.4} %), payment topic {} of {payment_total} ({:.4} %)",
        percentile(&times, 50.0),
        percentile(&times, 99.0),
        worst.0,
        100.0 * worst.0 as f64 / trace_total as f64,
        worst.1,
        100.0 * worst.1 as f64 / payment_total.max(1) as f64,
    );
    // The same orders again: the process's index of offsets by time now holds what the first
    // pass probed and scanned (a console tracing an order twice, or a neighbour of one).
    let (mut again, mut probes) = (Vec::new(), 0);
    for (order_no, ..) in &orders {
        let started = Instant::now();
        let r = headless::trace(&config, &TraceTarget::classify(order_no)).await;
        again.push(started.elapsed());
        assert!(r.ok && r.data.found, "{}", r.failures());
        let cost = r.data.read_cost.expect("cost");
        probes += cost.topics.iter().map(|t| t.offset_probes).sum::<u64>();
    }
    again.sort();
    println!(
        "the same {traces} traces again: p50 {:.2?}, p99 {:.2?}, {:.1} probes a trace",
        percentile(&again, 50.0),
        percentile(&again, 99.0),
        probes as f64 / traces as f64
    );
    let cli = tokio::task::spawn_blocking({
        let (c, o) = (config.clone(), orders.clone());
        move || cli_traces(&c, &o)
    });
    match cli.await.unwrap() {
        Ok(mut walls) => {
            let first = walls[0];
            walls.sort();
            println!(
                "the same {traces} traces by the CLI, a fresh `idemguard trace --json` process each: \
                 p50 {:.2?}, p99 {:.2?} (the first {first:.2?})",
                percentile(&walls, 50.0),
                percentile(&walls, 99.0),
            );
        }
        Err(e) => println!("CLI traces: {e}"),
    }
    let watch = Duration::from_secs(env_usize("IDEMGUARD_BENCH_CONSOLE_SECS", 20) as u64);
    match tokio::task::spawn_blocking({
        let c = config.clone();
        move || console_figures(&c, watch)
    })
    .await
    .unwrap()
    {
        Ok((frame, rss)) => println!(
            "console on these topics: first frame after {frame:.2?}, peak RSS {rss} MB over {watch:?}"
        ),
        Err(e) => println!("console: {e}"),
    }

    if keep_data {
        println!(
            "\nkept: IDEMGUARD_DATABASE__URL={} IDEMGUARD_KAFKA__TRACE_TOPIC={} IDEMGUARD_KAFKA__PAYMENT_TOPIC={} target/release/idemguard trace {}",
            config.database.url, config.kafka.trace_topic, config.kafka.payment_topic, orders[traces / 2].0
        );
        return;
    }
    db.pool.close().await;
    let _ = sqlx::query(&format!("DROP DATABASE {db_name}"))
        .execute(&server.pool)
        .await;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    // No trace's reader may still be closing when its topics go.
    idemguard::console::read::topics::readers_closed(Duration::from_secs(10));
    let _ = admin.delete_topics(&names, &opts).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "topics deleted; tansu RSS now {} MB",
        tansu_rss_mb().unwrap_or(0)
    );
}
