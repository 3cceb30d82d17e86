//! A trace of one order on large topics, on Apache Kafka: `idemguard trace` of orders spread
//! through seven days of history, paid ones and ones never paid, at each size of
//! `IDEMGUARD_BENCH_SIZES` (default 1,000,000): that many payment events and as many trace
//! events, in topics of their own, filled, traced and deleted one size after the other.
//!
//!     cargo bench --bench trace_scale
//!     IDEMGUARD_BENCH_SIZES=1000000,20000000,50000000 cargo bench --bench trace_scale
//!
//! Each size gets two topics (3 partitions, kept for ever: the history is seven days old), Kafka
//! timestamps spread evenly over the seven days before now, produced as the services' producers
//! do (lz4 batches; payment messages as the outbox relay sends them, keyed by orderNo with their
//! `eventId`/`orderNo` headers), and a PostgreSQL database of its own with
//! `IDEMGUARD_BENCH_ORDERS` filler orders (default 0) plus `IDEMGUARD_BENCH_TRACES` paid and as
//! many unpaid traced orders (default 20 each), spread through the history. An unpaid order has
//! its claim on the trace topic and its rows (record finished, order CREATED), nothing more.
//! The whole-topic read a trace's windows replaced runs for the first
//! `IDEMGUARD_BENCH_BASELINE_TRACES` (default 0: past a few million events it only says that
//! its 30 s deadline passed).
//!
//! Per size and kind: p50/p99 of the in-process trace (its database connection included), the
//! round trips it sent the broker and the messages it read (scanned and probed); then the same
//! orders by the real CLI, one process each. The broker keeps the messages on disk: filling stops
//! early, and says so, when the bench's topics pass `IDEMGUARD_BENCH_KAFKA_MAX_GB` (default 12)
//! or the disk's free space falls under `IDEMGUARD_BENCH_MIN_FREE_GB` (default 15).
//! `IDEMGUARD_BENCH_KEEP=1` keeps the last size's data and prints how to trace it again;
//! `IDEMGUARD_BENCH_REUSE=<suffix>` traces a kept size's data (one size) without filling.

#[path = "support/proc_cpu.rs"]
mod proc_cpu;

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
const GB: u64 = 1 << 30;

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

/// Resident memory of Apache Kafka's broker, MB.
fn broker_rss_mb() -> Option<u64> {
    let pid = proc_cpu::kafka_broker_pid()?;
    proc_mb(&format!("/proc/{pid}/status"), "VmRSS:")
}

/// The broker's log directory: the stack's (`scripts/stack`).
fn kafka_data_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".stack/kafka/data")
}

/// Bytes on disk of `topics` (every partition's directory under the broker's log directory).
fn topics_bytes(topics: &[String]) -> u64 {
    let Ok(dirs) = std::fs::read_dir(kafka_data_dir()) else {
        return 0;
    };
    let ours = |name: &str| {
        topics
            .iter()
            .any(|t| name.rsplit_once('-').is_some_and(|(topic, _)| topic == t))
    };
    dirs.flatten()
        .filter(|d| ours(&d.file_name().to_string_lossy()))
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Free bytes of the file system the broker writes to.
fn free_bytes() -> u64 {
    let path = std::ffi::CString::new(kafka_data_dir().to_string_lossy().as_bytes()).unwrap();
    // SAFETY: `path` is a NUL-terminated string and `stat` a zeroed statvfs the call fills in.
    unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stat) != 0 {
            return u64::MAX;
        }
        stat.f_bavail as u64 * stat.f_frsize as u64
    }
}

/// Why the filling must stop now, if it must (see the module docs): the broker's disk is the
/// machine's.
fn disk_stop(topics: &[String]) -> Option<String> {
    let (ours, free) = (topics_bytes(topics), free_bytes());
    let max = env_usize("IDEMGUARD_BENCH_KAFKA_MAX_GB", 12) as u64 * GB;
    let floor = env_usize("IDEMGUARD_BENCH_MIN_FREE_GB", 15) as u64 * GB;
    (ours >= max || free <= floor).then(|| {
        format!(
            "the bench's topics hold {:.1} GB (limit {:.0}), {:.1} GB free on the disk (floor {:.0})",
            ours as f64 / GB as f64,
            max as f64 / GB as f64,
            free as f64 / GB as f64,
            floor as f64 / GB as f64
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

/// A traced order: its orderNo, requestId, payment eventId (`None`: never paid) and its time.
#[derive(Clone)]
struct Order {
    order_no: String,
    request_id: String,
    paid_by: Option<String>,
    at: i64,
}

/// A producer as the services configure theirs for throughput: lz4 batches.
fn producer(config: &Config) -> BaseProducer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("compression.type", "lz4")
        .set("linger.ms", "50")
        .set("batch.size", "1000000")
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

/// A payment message as the outbox relay publishes it: keyed by orderNo, its IDs in headers.
fn send_payment(producer: &BaseProducer, topic: &str, p: &PaymentSucceeded) {
    let h = OwnedHeaders::new()
        .insert(Header {
            key: headers::EVENT_ID,
            value: Some(p.event_id.as_str()),
        })
        .insert(Header {
            key: headers::ORDER_NO,
            value: Some(p.order_no.as_str()),
        });
    let body = serde_json::to_vec(p).unwrap();
    send(producer, topic, &p.order_no, &body, p.paid_at, h);
}

fn send_event(producer: &BaseProducer, topic: &str, mut ev: TraceEvent, at: i64) {
    ev.ts = format_ms(at);
    ev.instance = "api-1".to_string();
    let key = ev.key().unwrap().to_string();
    let body = serde_json::to_vec(&ev).unwrap();
    send(producer, topic, &key, &body, at, OwnedHeaders::new());
}

/// The Kafka side of one traced order: its claim; when paid, its payment message and the
/// consumer's dedup hit of a redelivered copy.
fn send_order(producer: &BaseProducer, config: &Config, k: usize, o: &Order) {
    let trace = &config.kafka.trace_topic;
    let claim = TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(&o.request_id);
    send_event(producer, trace, claim, o.at);
    let Some(e) = &o.paid_by else {
        return;
    };
    let hit = TraceEvent::new(Layer::Stream, Outcome::DedupHit)
        .order_no(&o.order_no)
        .event_id(e);
    send_event(producer, trace, hit, o.at + 1_900);
    let p = PaymentSucceeded {
        event_id: e.clone(),
        order_no: o.order_no.clone(),
        request_id: o.request_id.clone(),
        pay_no: format!("P{k}"),
        user_id: 7,
        amount: 1999,
        paid_at: o.at + 1_500,
    };
    send_payment(producer, &config.kafka.payment_topic, &p);
}

/// Produces the topics' history in time order: `events` filler trace events and as many
/// filler payment messages, and the Kafka side of each traced order at its time. Stops filling
/// early when [`disk_stop`] says so (the traced orders are produced all the same).
fn fill(config: &Config, events: usize, orders: &[Order], now: i64) -> Filled {
    let producer = producer(config);
    let topics = [
        config.kafka.trace_topic.clone(),
        config.kafka.payment_topic.clone(),
    ];
    let start = now - 7 * DAY_MS;
    let mut out = Filled {
        events: 0,
        payments: 0,
        stopped: None,
    };
    let mut next_order = 0;
    let started = Instant::now();
    for i in 0..events {
        let ts = start + 7 * DAY_MS * i as i64 / events as i64;
        while next_order < orders.len() && orders[next_order].at <= ts {
            send_order(&producer, config, next_order, &orders[next_order]);
            next_order += 1;
        }
        if i % 1_000_000 == 0 && i > 0 {
            if let Some(why) = disk_stop(&topics) {
                out.stopped = Some(format!("after {i} events: {why}"));
                break;
            }
            if i % 5_000_000 == 0 {
                let rate = i as f64 / started.elapsed().as_secs_f64();
                println!("  … {i} events and payments produced ({rate:.0} pairs/s)");
            }
        }
        let order_no = format!("F{i:019}");
        let e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .order_no(&order_no)
            .request_id(format!("APP:ORDER:20261129:filler-{i}"));
        send_event(&producer, &config.kafka.trace_topic, e, ts);
        out.events += 1;
        let p = PaymentSucceeded {
            event_id: format!("0193a1c2-7f3e-7c1a-9d2b-{i:012}"),
            order_no: format!("G{i:019}"),
            request_id: format!("APP:ORDER:20261129:filler-{i}"),
            pay_no: format!("PAY{i:016}"),
            user_id: (i % 100_000) as i64,
            amount: 1999,
            paid_at: ts,
        };
        send_payment(&producer, &config.kafka.payment_topic, &p);
        out.payments += 1;
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

/// A traced order's rows: its record finished 200 ms after the claim; its order PAID 2 s after
/// (by its event), or still CREATED, never touched again.
async fn write_rows(db: &Database, o: &Order) {
    let (r, n, t) = (&o.request_id, &o.order_no, o.at);
    let f = t + 200;
    let idem = format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, order_no, owner, \
         lease_until, created_at, updated_at, expire_at) VALUES ('{r}', 'ORDER', 'h', 'SUCCEEDED', \
         '{n}', 'api-1', {t}, {t}, {f}, {f})"
    );
    let order = match &o.paid_by {
        Some(e) => format!(
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, \
             payment_event_id, created_at, updated_at) VALUES ('{r}', '{n}', 7, 7, 1, 1999, 'PAID', '{e}', {t}, {})",
            t + 2_000
        ),
        None => format!(
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, \
             created_at, updated_at) VALUES ('{r}', '{n}', 7, 7, 1, 1999, 'CREATED', {t}, {t})"
        ),
    };
    for sql in [idem, order] {
        sqlx::query(&sql)
            .execute(&db.pool)
            .await
            .expect("insert a traced order's rows");
    }
}

/// The traced orders kept in a database by an earlier run (`IDEMGUARD_BENCH_REUSE`).
async fn orders_in(db: &Database) -> Vec<Order> {
    let rows: Vec<(String, String, Option<String>, i64)> = sqlx::query_as(
        "SELECT order_no, req_id, payment_event_id, created_at FROM order_record \
         WHERE order_no LIKE '2026112600%' ORDER BY created_at",
    )
    .fetch_all(&db.pool)
    .await
    .expect("the kept orders");
    rows.into_iter()
        .map(|(order_no, request_id, paid_by, at)| Order {
            order_no,
            request_id,
            paid_by,
            at,
        })
        .collect()
}

/// The read a trace's windows replaced: the rows, then both topics from their beginning,
/// keeping what names the order. Its time, or why it failed (the 30 s read deadline on a large
/// topic).
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
    assert!(log.events_seen > 0, "the baseline finds the order too");
    let _ = payments;
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
fn cli_traces(config: &Config, orders: &[&Order]) -> Result<Vec<Duration>, String> {
    let mut out = Vec::with_capacity(orders.len());
    for Order { order_no, .. } in orders {
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

/// One size's topics and database, made or (`IDEMGUARD_BENCH_REUSE`) found.
struct Setup {
    config: Config,
    admin: AdminClient<DefaultClientContext>,
    server: Database,
    db: Database,
    db_name: String,
    topics: [String; 2],
    orders: Vec<Order>,
    suffix: String,
}

impl Setup {
    async fn new(size: usize, reuse: Option<String>) -> Setup {
        let mut config = local_config();
        let suffix = reuse
            .clone()
            .unwrap_or_else(|| format!("{:x}", uuid::Uuid::now_v7().as_u128() & 0xffff_ffff));
        config.kafka.trace_topic = format!("idemguard.trace.bench{suffix}");
        config.kafka.payment_topic = format!("payment.succeeded.bench{suffix}");
        let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &config.kafka.bootstrap_servers)
            .create()
            .expect("admin");
        let topics = [
            config.kafka.trace_topic.clone(),
            config.kafka.payment_topic.clone(),
        ];
        let server = Database::connect_url(&config, "postgres://root@127.0.0.1:5432/postgres")
            .await
            .expect("postgres");
        let db_name = format!("igb_trace_{suffix}");
        config.database.url = format!("postgres://root@127.0.0.1:5432/{db_name}");
        let mut setup = Setup {
            db: Database::connect_url(&config, &server_url(&config))
                .await
                .expect("db"),
            config,
            admin,
            server,
            db_name,
            topics,
            orders: Vec::new(),
            suffix,
        };
        if reuse.is_some() {
            setup.db = Database::connect(&setup.config).await.expect("connect");
            setup.orders = orders_in(&setup.db).await;
            println!(
                "reusing {} and its {} traced orders",
                setup.db_name,
                setup.orders.len()
            );
        } else {
            setup.make(size).await;
        }
        setup
    }

    /// The topics, the database and its rows, the topics' history.
    async fn make(&mut self, size: usize) {
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let new: Vec<NewTopic> = self
            .topics
            .iter()
            .map(|t| NewTopic::new(t, 3, TopicReplication::Fixed(1)).set("retention.ms", "-1"))
            .collect();
        self.admin
            .create_topics(&new, &opts)
            .await
            .expect("create topics");
        sqlx::query(&format!("CREATE DATABASE {}", self.db_name))
            .execute(&self.server.pool)
            .await
            .expect("create db");
        self.db = Database::connect(&self.config).await.expect("connect");
        migrate::migrate(&self.db).await.expect("migrate");
        let now = now_ms();
        let started = Instant::now();
        let filler = env_usize("IDEMGUARD_BENCH_ORDERS", 0);
        filler_orders(&self.db, filler, now).await;
        println!(
            "database: {filler} filler orders written in {:.1?}",
            started.elapsed()
        );
        // Paid and unpaid orders alternate through the history.
        let traces = 2 * env_usize("IDEMGUARD_BENCH_TRACES", 20).max(1);
        self.orders = (0..traces)
            .map(|k| Order {
                order_no: format!("2026112600000000{k:04}"),
                request_id: format!("APP:ORDER:20261126:bench-{}-{k}", self.suffix),
                paid_by: (k % 2 == 0).then(|| uuid::Uuid::new_v4().to_string()),
                at: now - 7 * DAY_MS + 7 * DAY_MS * (2 * k as i64 + 1) / (2 * traces as i64),
            })
            .collect();
        for o in &self.orders {
            write_rows(&self.db, o).await;
        }
        let filled = Instant::now();
        let (c, o) = (self.config.clone(), self.orders.clone());
        let f = tokio::task::spawn_blocking(move || fill(&c, size, &o, now))
            .await
            .unwrap();
        println!(
            "trace topic: {} events, payment topic: {} messages, over 7 days; produced in {:.1?} \
             ({:.0} messages/s); {:.2} GB on disk (lz4); broker RSS {} MB",
            f.events,
            f.payments,
            filled.elapsed(),
            (f.events + f.payments) as f64 / filled.elapsed().as_secs_f64(),
            topics_bytes(&self.topics) as f64 / GB as f64,
            broker_rss_mb().unwrap_or(0),
        );
        if let Some(why) = &f.stopped {
            println!("filling stopped early {why}");
        }
    }

    /// The database and the topics gone, or kept (`IDEMGUARD_BENCH_KEEP=1`).
    async fn end(self, keep: bool) {
        if keep {
            let o = &self.orders[self.orders.len() / 2];
            println!(
                "\nkept: IDEMGUARD_BENCH_REUSE={} (or IDEMGUARD_DATABASE__URL={} IDEMGUARD_KAFKA__TRACE_TOPIC={} \
                 IDEMGUARD_KAFKA__PAYMENT_TOPIC={} target/release/idemguard trace {})",
                self.suffix, self.config.database.url, self.topics[0], self.topics[1], o.order_no
            );
            return;
        }
        self.db.pool.close().await;
        let _ = sqlx::query(&format!("DROP DATABASE {}", self.db_name))
            .execute(&self.server.pool)
            .await;
        let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        // No trace's reader may still be closing when its topics go.
        idemguard::console::read::topics::readers_closed(Duration::from_secs(10));
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let _ = self.admin.delete_topics(&names, &opts).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        println!(
            "topics deleted; {:.2} GB of them left on disk, broker RSS {} MB",
            topics_bytes(&self.topics) as f64 / GB as f64,
            broker_rss_mb().unwrap_or(0)
        );
    }
}

/// The server's own database, for a connection before the bench's exists.
fn server_url(_: &Config) -> String {
    "postgres://root@127.0.0.1:5432/postgres".to_string()
}

/// An unpaid order's topics read as a database that cannot show the consumer's decisions has
/// them read (a source profile with a table marked absent): forward from its last time, for
/// `console.forward_search`, blindly. The Kafka read alone: its time, round trips, messages.
async fn blind_forward(setup: &Setup, target: &TraceTarget) -> (Duration, u64, u64) {
    let ids = TraceIds::of_target(target);
    let mut rows = records::trace_rows(&setup.db, &ids).await.expect("rows");
    rows.unavailable
        .push("the consumer's decisions: not shown (as a profile without them)".into());
    let window = idemguard::console::read::window::TimeWindow::last_day(now_ms());
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let (p, l, cost) =
        bounded::read_topics_for(&setup.config, target, Some(&rows), window, &cancel).await;
    let took = started.elapsed();
    assert!(p.is_ok() && l.is_ok() && cost.forward_search.is_some());
    let probes = cost.topics.iter().map(|t| t.offset_probes).sum::<u64>();
    (
        took,
        cost.round_trips.total,
        cost.messages_scanned() + probes,
    )
}

/// What the traces of one kind of order cost.
#[derive(Default)]
struct Figures {
    times: Vec<Duration>,
    round_trips: Vec<u64>,
    messages: Vec<u64>,
}

impl Figures {
    fn line(&mut self, kind: &str) -> String {
        self.times.sort();
        let n = self.times.len().max(1) as f64;
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / n;
        let max = |v: &[u64]| v.iter().max().copied().unwrap_or(0);
        format!(
            "{kind}: {} traces, p50 {:.1?}, p99 {:.1?}; round trips a trace {:.1} (most {}); \
             messages read a trace {:.0} (most {})",
            self.times.len(),
            percentile(&self.times, 50.0),
            percentile(&self.times, 99.0),
            mean(&self.round_trips),
            max(&self.round_trips),
            mean(&self.messages),
            max(&self.messages),
        )
    }
}

/// Every traced order once, in history order: a row each, and the figures per kind.
async fn trace_all(setup: &Setup, baselines: usize) -> (Figures, Figures, Figures) {
    let config = &setup.config;
    println!("\n| order (position in history) | paid | trace | where its time went | round trips | messages scanned + probed | baseline (whole topics) |");
    println!("|---|---|---|---|---|---|---|");
    let (mut paid, mut unpaid, mut blind): (Figures, Figures, Figures) = Default::default();
    for (k, o) in setup.orders.iter().enumerate() {
        let target = TraceTarget::classify(&o.order_no);
        let started = Instant::now();
        let r = headless::trace(config, &target).await;
        let after = started.elapsed();
        assert!(r.ok && r.data.found, "{}", r.failures());
        let cost = r.data.read_cost.clone().expect("cost");
        let probes = cost.topics.iter().map(|t| t.offset_probes).sum::<u64>();
        let scanned = cost.messages_scanned();
        let before = if k < baselines {
            match baseline(config, &setup.db, &target).await {
                Ok(b) => format!("{b:.2?}"),
                Err(e) => format!("failed: {e}"),
            }
        } else {
            "not run".to_string()
        };
        println!(
            "| {}/{} | {} | {after:.2?} | {} | {} | {scanned} + {probes} | {before} |",
            2 * k + 1,
            2 * setup.orders.len(),
            if o.paid_by.is_some() { "yes" } else { "no" },
            phases(&r, after),
            cost.round_trips,
        );
        let f = if o.paid_by.is_some() {
            &mut paid
        } else {
            &mut unpaid
        };
        f.times.push(after);
        f.round_trips.push(cost.round_trips.total);
        f.messages.push(scanned + probes);
        if o.paid_by.is_none() {
            let (took, round_trips, messages) = blind_forward(setup, &target).await;
            let b: &mut Figures = &mut blind;
            b.times.push(took);
            b.round_trips.push(round_trips);
            b.messages.push(messages);
        }
    }
    (paid, unpaid, blind)
}

/// One size: filled (or reused), every order traced in process, then by the CLI; the p99s.
async fn run_size(size: usize, reuse: Option<String>, keep: bool) -> (Duration, Duration) {
    println!("\n## {size} payment events and {size} trace events");
    let setup = Setup::new(size, reuse).await;
    let baselines = env_usize("IDEMGUARD_BENCH_BASELINE_TRACES", 0);
    let (mut paid, mut unpaid, mut blind) = trace_all(&setup, baselines).await;
    println!("\n{}", paid.line("paid orders"));
    println!("{}", unpaid.line("unpaid orders"));
    println!(
        "{}",
        blind.line("unpaid orders' topics searched forward blindly (the Kafka read alone)")
    );
    let p99 = (
        percentile(&paid.times, 99.0),
        percentile(&unpaid.times, 99.0),
    );
    for (kind, paid) in [("paid", true), ("unpaid", false)] {
        let orders: Vec<Order> = setup
            .orders
            .iter()
            .filter(|o| o.paid_by.is_some() == paid)
            .cloned()
            .collect();
        let c = setup.config.clone();
        let walls =
            tokio::task::spawn_blocking(move || cli_traces(&c, &orders.iter().collect::<Vec<_>>()));
        match walls.await.unwrap() {
            Ok(mut walls) => {
                walls.sort();
                println!(
                    "the {kind} orders by the CLI, a fresh `idemguard trace --json` process each: \
                     p50 {:.1?}, p99 {:.1?}",
                    percentile(&walls, 50.0),
                    percentile(&walls, 99.0),
                );
            }
            Err(e) => println!("CLI traces: {e}"),
        }
    }
    let watch = Duration::from_secs(env_usize("IDEMGUARD_BENCH_CONSOLE_SECS", 0) as u64);
    if !watch.is_zero() {
        let c = setup.config.clone();
        match tokio::task::spawn_blocking(move || console_figures(&c, watch))
            .await
            .unwrap()
        {
            Ok((frame, rss)) => println!(
                "console on these topics: first frame after {frame:.2?}, peak RSS {rss} MB over {watch:?}"
            ),
            Err(e) => println!("console: {e}"),
        }
    }
    setup.end(keep).await;
    p99
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::var("IDEMGUARD_BENCH_SIZES")
        .unwrap_or_else(|_| "1000000".to_string())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("IDEMGUARD_BENCH_SIZES: numbers, comma-separated")
        })
        .collect();
    let keep = std::env::var("IDEMGUARD_BENCH_KEEP").is_ok_and(|v| v == "1");
    let reuse = std::env::var("IDEMGUARD_BENCH_REUSE").ok();
    let mut p99s = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let last = i + 1 == sizes.len();
        p99s.push((size, run_size(size, reuse.clone(), keep && last).await));
    }
    println!("\n| size | p99 paid | p99 unpaid |\n|---|---|---|");
    for (size, (paid, unpaid)) in &p99s {
        println!("| {size} | {paid:.1?} | {unpaid:.1?} |");
    }
    if let (Some(first), Some(last)) = (p99s.first(), p99s.last()) {
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "p99 at {} / p99 at {}: paid {:.2}, unpaid {:.2}",
            last.0,
            first.0,
            ratio(last.1 .0, first.1 .0),
            ratio(last.1 .1, first.1 .1)
        );
    }
}
