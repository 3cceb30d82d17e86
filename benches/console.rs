//! The console's benchmark: trace lookup p99 over a large order database, a full lock
//! scan of 100,000 keys and the latency it causes to another client, the frame render time of a
//! 10,000-row table, and resident memory with every store at its bound.
//!
//!     cargo bench --bench console
//!
//! The data set is built by this file (idempotently; `IDEMGUARD_BENCH_REBUILD=1` forces it):
//! - PostgreSQL database `idemguard_bench` on the local stack: N orders (default 1,000,000,
//!   `IDEMGUARD_BENCH_ORDERS`), each with its idempotency record, order row, stock movement,
//!   payment flow, points and notification row, and 3·N processed events — generated on the
//!   server by chunked `INSERT … SELECT … FROM generate_series` (200,000 rows per statement);
//! - a redis-server of the bench's own on a free loopback port, with 100,000 `lock:order:*` keys
//!   (`IDEMGUARD_BENCH_LOCKS`), their `fence:*` counters and 50 of 100 owners' heartbeats,
//!   written by pipelines of 1,000 commands.
//!
//! Every loop is bounded and every target is on loopback.

#[path = "support/stats.rs"]
mod stats;
use stats::{knob, median, percentile};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use idemguard::config::{Config, ConfigSource, LockMode};
use idemguard::console::read::locks;
use idemguard::console::read::records::{self, StuckRecord, TraceIds};
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Update;
use idemguard::console::tui::keymap::View;
use idemguard::console::tui::ui;
use idemguard::contracts::{format_ms, keys, now_ms, Layer, LockHolder, Outcome, TraceEvent};
use idemguard::db::{migrate, Database};
use idemguard::lock::{LockInspector, LockScan, LockView, NodeScan};
use rand::Rng;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

const ROUNDS: usize = 3;
const LOOKUPS_PER_ROUND: usize = 1000;
const FRAMES_PER_ROUND: usize = 200;
const CHUNK: i64 = 200_000;

fn local_config() -> Config {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    Config::load(&ConfigSource {
        file: Some(file),
        env: vec![],
    })
    .expect("config/local.toml loads")
}

struct Row {
    what: String,
    target: String,
    measured: String,
    ratio: String,
}

fn row(what: &str, target_ms: f64, measured_ms: f64, unit: &str) -> Row {
    Row {
        what: what.into(),
        target: format!("< {target_ms} {unit}"),
        measured: format!("{measured_ms:.2} {unit}"),
        ratio: format!("{:.3}", measured_ms / target_ms),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let orders = knob::<usize>("IDEMGUARD_BENCH_ORDERS", 1_000_000) as i64;
    let lock_count = knob::<usize>("IDEMGUARD_BENCH_LOCKS", 100_000);
    let mut results: Vec<Row> = Vec::new();
    // IDEMGUARD_BENCH_ONLY=lookup,scan,memory,render runs only those parts (default: all).
    let only = std::env::var("IDEMGUARD_BENCH_ONLY").unwrap_or_default();
    let want = |part: &str| only.is_empty() || only.split(',').any(|p| p.trim() == part);
    println!("idemguard console benchmark — {orders} orders, {} processed events, {lock_count} lock keys", orders * 3);

    // ---- the database ------------------------------------------------------------------------
    let mut config = local_config();
    let admin = Database::connect_url(&config, "postgres://root@127.0.0.1:5432/postgres")
        .await
        .expect("PostgreSQL of the stack (scripts/stack up)");
    let exists: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = 'idemguard_bench'")
            .fetch_optional(&admin.pool)
            .await
            .unwrap();
    let rebuild = std::env::var("IDEMGUARD_BENCH_REBUILD").is_ok_and(|v| v == "1");
    if exists.is_some() && rebuild {
        sqlx::query("DROP DATABASE idemguard_bench")
            .execute(&admin.pool)
            .await
            .unwrap();
    }
    if exists.is_none() || rebuild {
        sqlx::query("CREATE DATABASE idemguard_bench")
            .execute(&admin.pool)
            .await
            .unwrap();
    }
    admin.pool.close().await;
    config.database.url = "postgres://root@127.0.0.1:5432/idemguard_bench".into();
    config.database.max_connections = 4;
    let db = Database::connect(&config).await.unwrap();
    migrate::migrate(&db).await.unwrap();
    let have: i64 = sqlx::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM order_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    if have != orders {
        build_database(&db, orders).await;
    } else {
        println!("data set: {orders} orders already in idemguard_bench (IDEMGUARD_BENCH_REBUILD=1 rebuilds it)");
    }

    // ---- the lock keys -----------------------------------------------------------------------
    let redis = OwnRedis::start();
    let t = Instant::now();
    fill_locks(&redis.url(), lock_count).await;
    println!(
        "data set: {lock_count} lock keys (+ fence counters) written in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];

    // ---- trace lookup ------------------------------------------------------------------------
    let inspector = LockInspector::from_config(&config).unwrap();
    if want("lookup") {
        let mut p99s = Vec::new();
        let mut p50s = Vec::new();
        let mut rng = rand::rng();
        for round in 0..ROUNDS {
            let mut lat = Vec::with_capacity(LOOKUPS_PER_ROUND);
            for n in 0..LOOKUPS_PER_ROUND {
                let i: i64 = rng.random_range(1..=orders);
                // The three kinds of ID an operator types, in turn.
                let ids = match n % 3 {
                    0 => TraceIds {
                        order_no: Some(order_no(i)),
                        ..Default::default()
                    },
                    1 => TraceIds {
                        request_id: Some(request_id(i)),
                        ..Default::default()
                    },
                    _ => TraceIds {
                        event_id: Some(format!("evt-{i}-1")),
                        ..Default::default()
                    },
                };
                let t = Instant::now();
                let rows = records::trace_rows(&db, &ids).await.unwrap();
                let keys = locks::trace_keys(&inspector, &[], &rows.ids, None)
                    .await
                    .unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(rows.orders.len(), 1, "lookup {n} ({ids:?}) found its order");
                assert_eq!(rows.processed.len(), 3);
                let _ = keys;
            }
            lat.sort_by(|a, b| a.total_cmp(b));
            println!(
                "trace lookup round {round}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                lat[lat.len() - 1]
            );
            p50s.push(percentile(&lat, 0.5));
            p99s.push(percentile(&lat, 0.99));
        }
        results.push(row(
            "trace lookup p50 (database + redis)",
            50.0,
            median(&p50s),
            "ms",
        ));
        results.push(row(
            "trace lookup p99 (database + redis)",
            50.0,
            median(&p99s),
            "ms",
        ));
    }

    // ---- full lock scan and the latency it causes another client -----------------------------
    let mut scan: Option<LockScan> = None;
    if want("scan") {
        let mut baseline_max = Vec::new();
        let mut scan_times = Vec::new();
        let mut during_max = Vec::new();
        let mut during_p99 = Vec::new();
        let mut slow_total = 0usize;
        // The server's own view: every command (of any client) slower than 1 ms goes to the slowlog,
        // every event-loop stall of 1 ms or more to the latency monitor.
        let mut admin = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(1000)
            .query_async(&mut admin)
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("latency-monitor-threshold")
            .arg(1)
            .query_async(&mut admin)
            .await
            .unwrap();
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut admin)
            .await
            .unwrap();
        let _: () = redis::cmd("LATENCY")
            .arg("RESET")
            .query_async(&mut admin)
            .await
            .unwrap();
        for round in 0..ROUNDS {
            let base = probe_latency(redis.url(), Duration::from_millis(1000), None).await;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let probe = tokio::spawn(probe_latency(
                redis.url(),
                Duration::from_secs(60),
                Some(stop.clone()),
            ));
            tokio::time::sleep(Duration::from_millis(100)).await;
            let t = Instant::now();
            let s = inspector.scan(locks::LOCK_LIST_LIMIT).await;
            let took = t.elapsed().as_secs_f64() * 1000.0;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let during = probe.await.unwrap();
            assert_eq!(s.locks.len(), lock_count, "every lock found: {:?}", s.nodes);
            let slow = during.iter().filter(|l| **l > 5.0).count();
            slow_total += slow;
            println!(
                "lock scan round {round}: {} keys in {took:.0} ms; another client's GET: baseline max {:.2} ms; during the scan p99 {:.2} ms, max {:.2} ms, {} of {} over 5 ms",
                s.locks.len(),
                base.last().copied().unwrap_or(0.0),
                percentile(&during, 0.99),
                during.last().copied().unwrap_or(0.0),
                slow,
                during.len()
            );
            baseline_max.push(base.last().copied().unwrap_or(0.0));
            scan_times.push(took);
            during_max.push(during.last().copied().unwrap_or(0.0));
            during_p99.push(percentile(&during, 0.99));
            scan = Some(s);
        }
        let slow: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(1000)
            .query_async(&mut admin)
            .await
            .unwrap();
        let slowest_us = slow
            .iter()
            .filter_map(|e| {
                if let redis::Value::Array(f) = e {
                    f.get(2).and_then(|d| {
                        if let redis::Value::Int(n) = d {
                            Some(*n)
                        } else {
                            None
                        }
                    })
                } else {
                    None
                }
            })
            .max()
            .unwrap_or(0);
        let latest: Vec<Vec<redis::Value>> = redis::cmd("LATENCY")
            .arg("LATEST")
            .query_async(&mut admin)
            .await
            .unwrap_or_default();
        let stall_ms = latest
            .iter()
            .filter_map(|e| {
                if let Some(redis::Value::Int(n)) = e.get(3) {
                    Some(*n)
                } else {
                    None
                }
            })
            .max()
            .unwrap_or(0);
        println!("redis server during the scans: {} command(s) slower than 1 ms (slowest {slowest_us} us); event-loop stalls >= 1 ms: max {stall_ms} ms", slow.len());
        let mut by_command: std::collections::BTreeMap<String, (usize, i64)> = Default::default();
        for e in &slow {
            if let redis::Value::Array(f) = e {
                let us = if let Some(redis::Value::Int(n)) = f.get(2) {
                    *n
                } else {
                    0
                };
                let name = match f.get(3) {
                    Some(redis::Value::Array(args)) => args
                        .first()
                        .and_then(|a| {
                            if let redis::Value::BulkString(b) = a {
                                Some(String::from_utf8_lossy(b).to_uppercase())
                            } else {
                                None
                            }
                        })
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                let entry = by_command.entry(name).or_default();
                entry.0 += 1;
                entry.1 = entry.1.max(us);
            }
        }
        println!("  slow commands by name (count, slowest us): {by_command:?}");
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "  machine load average during the bench: {}",
            loadavg.trim()
        );
        results.push(Row {
            what: "server side: commands of any client slower than 1 ms during the scans (SLOWLOG)"
                .into(),
            target: "0 over 5 ms".into(),
            measured: format!(
                "{} (slowest {:.2} ms)",
                slow.len(),
                slowest_us as f64 / 1000.0
            ),
            ratio: format!("{:.3}", slowest_us as f64 / 5000.0),
        });
        results.push(Row {
            what: "server side: longest event-loop stall during the scans (LATENCY LATEST, 1 ms resolution)".into(),
            target: "< 5 ms".into(),
            measured: if stall_ms == 0 { "none of 1 ms or more".into() } else { format!("{stall_ms} ms") },
            ratio: format!("{:.3}", stall_ms as f64 / 5.0),
        });
        results.push(Row {
            what: format!("full lock scan ({lock_count} keys, SCAN + pipelined GET/PTTL/fence)"),
            target: "(no target)".into(),
            measured: format!("{:.0} ms", median(&scan_times)),
            ratio: "-".into(),
        });
        results.push(row(
            "another client's GET round trip during the scan, p99 (client side, same 2 cores)",
            5.0,
            median(&during_p99),
            "ms",
        ));
        results.push(row(
            "another client's GET round trip during the scan, max (client side)",
            5.0,
            median(&during_max),
            "ms",
        ));
        results.push(Row {
            what: "  (same client, no scan running: max)".into(),
            target: "-".into(),
            measured: format!("{:.2} ms", median(&baseline_max)),
            ratio: "-".into(),
        });
        results.push(Row {
            what: "  GETs over 5 ms during all scans".into(),
            target: "0".into(),
            measured: slow_total.to_string(),
            ratio: "-".into(),
        });
    }

    // ---- the real console's resident memory, 100,000 locks on screen ---------------------------
    if want("memory") {
        match real_console_rss(&config, lock_count, None) {
            Ok((rss, hwm)) => {
                results.push(row(
                    &format!(
                        "resident memory of `idemguard console` showing {lock_count} locks (VmRSS)"
                    ),
                    150.0,
                    rss,
                    "MB",
                ));
                results.push(Row {
                    what: "  its peak (VmHWM)".into(),
                    target: "-".into(),
                    measured: format!("{hwm:.0} MB"),
                    ratio: "-".into(),
                });
            }
            Err(e) => println!("the real console could not be measured: {e}"),
        }
        // The same console with both topic stores at their bounds too: its own trace and payment
        // topics hold more messages than the console keeps.
        let t = Instant::now();
        let full = fill_topics(&config).await;
        println!(
            "data set: {} trace events and {} payment messages produced in {:.1}s",
            full.trace_events,
            full.payment_messages,
            t.elapsed().as_secs_f64()
        );
        match real_console_rss(&config, lock_count, Some(&full)) {
            Ok((rss, hwm)) => {
                results.push(row(
                    &format!("resident memory of `idemguard console`, {lock_count} locks + every topic store at its bound (VmRSS)"),
                    150.0,
                    rss,
                    "MB",
                ));
                results.push(Row {
                    what: "  its peak (VmHWM)".into(),
                    target: "-".into(),
                    measured: format!("{hwm:.0} MB"),
                    ratio: "-".into(),
                });
            }
            Err(e) => println!("the real console with full stores could not be measured: {e}"),
        }
    }

    // ---- frame render of a 10,000-row table ---------------------------------------------------
    if want("render") {
        let mut app = App::new(&config, None);
        app.apply(Update::Locks(synthetic_scan(10_000)));
        app.act(idemguard::console::tui::keymap::UiAction::Show(View::Locks));
        let locks_p99 = render_rounds(&mut app, "locks view, 10,000 rows");
        app.act(idemguard::console::tui::keymap::UiAction::Bottom);
        let bottom_p99 = render_rounds(&mut app, "locks view, 10,000 rows, last row selected");
        app.apply(Update::Stuck(Ok(synthetic_stuck(10_000))));
        app.act(idemguard::console::tui::keymap::UiAction::Show(View::Stuck));
        let stuck_p99 = render_rounds(&mut app, "stuck view, 10,000 rows");
        results.push(row(
            "frame render p99, locks view, 10,000 rows",
            10.0,
            locks_p99.max(bottom_p99),
            "ms",
        ));
        results.push(row(
            "frame render p99, stuck view, 10,000 rows",
            10.0,
            stuck_p99,
            "ms",
        ));

        // The trace view with the trace log at its bound (100,000 events) and a target to match.
        let now = now_ms();
        let events: Vec<TraceEvent> = (0..100_000)
            .map(|i| {
                let mut e = TraceEvent::new(
                    Layer::Api,
                    if i % 10 == 0 {
                        Outcome::Replayed
                    } else {
                        Outcome::Claimed
                    },
                )
                .order_no(order_no(i % 5_000 + 1))
                .request_id(request_id(i % 5_000 + 1));
                e.ts = format_ms(now - (100_000 - i) * 30);
                e
            })
            .collect();
        for chunk in events.chunks(500) {
            app.apply(Update::TraceEvents(chunk.to_vec()));
        }
        drop(events);
        app.run_command(&format!("trace {}", order_no(17)));
        let trace_p99 = render_rounds(&mut app, "trace view, 100,000 events in the log");
        results.push(row(
            "frame render p99, trace view, 100,000 events in the log",
            10.0,
            trace_p99,
            "ms",
        ));
        app.run_command("rates");
        let rates_p99 = render_rounds(&mut app, "rates view, 100,000 events in the log");
        results.push(row(
            "frame render p99, rates view, 100,000 events in the log",
            10.0,
            rates_p99,
            "ms",
        ));

        // The Locks view on the real 100,000-lock scan.
        if let Some(s) = scan.take() {
            app.apply(Update::Locks(s));
            app.run_command("locks");
            let p99 = render_rounds(&mut app, "locks view, the real 100,000-lock scan");
            results.push(row(
                "frame render p99, locks view, the real scan of every lock",
                10.0,
                p99,
                "ms",
            ));
        }
    }

    println!("\n| what | target | measured (median of {ROUNDS} rounds) | ratio to target |");
    println!("|---|---|---|---|");
    for r in &results {
        println!(
            "| {} | {} | {} | {} |",
            r.what, r.target, r.measured, r.ratio
        );
    }
    db.pool.close().await;
    drop(redis);
}

fn order_no(i: i64) -> String {
    format!("B{i:028}")
}

fn request_id(i: i64) -> String {
    format!("APP:ORDER:20261129:bench-{i:010}")
}

async fn build_database(db: &Database, orders: i64) {
    let started = Instant::now();
    for table in [
        "processed_event",
        "notification",
        "points_ledger",
        "payment_flow",
        "stock_movement",
        "order_record",
        "idempotency_record",
    ] {
        sqlx::query(&format!("TRUNCATE {table}"))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let t0: i64 = now_ms() - 30 * 86_400_000;
    let statements = [
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, response_code, order_no, owner, fence, lease_until, replay_count, created_at, updated_at, expire_at, version)
         SELECT 'APP:ORDER:20261129:bench-' || lpad(i::text, 10, '0'), 'ORDER', md5(i::text) || md5(i::text), 'SUCCEEDED', 201,
                'B' || lpad(i::text, 28, '0'), 'bench-instance-' || (i % 100), 1, $1 + i, 0, $1 + i, $1 + i, $1 + i + 604800000, 1
         FROM generate_series($2::bigint, $3::bigint) AS i",
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, version, fence, payment_event_id, created_at, updated_at)
         SELECT 'APP:ORDER:20261129:bench-' || lpad(i::text, 10, '0'), 'B' || lpad(i::text, 28, '0'), i % 100000, i % 1000, 1, 1999, 'PAID', 1, 1,
                'evt-' || i || '-0', $1 + i, $1 + i
         FROM generate_series($2::bigint, $3::bigint) AS i",
        "INSERT INTO stock_movement (order_no, req_id, sku_id, delta, created_at)
         SELECT 'B' || lpad(i::text, 28, '0'), 'APP:ORDER:20261129:bench-' || lpad(i::text, 10, '0'), i % 1000, -1, $1 + i
         FROM generate_series($2::bigint, $3::bigint) AS i",
        "INSERT INTO payment_flow (pay_no, order_no, amount, status, event_id, created_at)
         SELECT 'PAY' || i, 'B' || lpad(i::text, 28, '0'), 1999, 'SUCCEEDED', 'evt-' || i || '-0', $1 + i
         FROM generate_series($2::bigint, $3::bigint) AS i",
        "INSERT INTO processed_event (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at)
         SELECT 'idemguard-payments', 'evt-' || i || '-' || k, 'B' || lpad(i::text, 28, '0'), 'payment.succeeded', (i % 3)::int, i * 3 + k, 'applied', $1 + i, $1 + i + 604800000
         FROM generate_series($2::bigint, $3::bigint) AS i, generate_series(0, 2) AS k",
        "INSERT INTO points_ledger (source_event_no, order_no, user_id, points, created_at)
         SELECT 'evt-' || i || '-0', 'B' || lpad(i::text, 28, '0'), i % 100000, 20, $1 + i
         FROM generate_series($2::bigint, $3::bigint) AS i",
        "INSERT INTO notification (event_id, order_no, user_id, channel, body, created_at)
         SELECT 'evt-' || i || '-0', 'B' || lpad(i::text, 28, '0'), i % 100000, 'sms', 'Your order is paid', $1 + i
         FROM generate_series($2::bigint, $3::bigint) AS i",
    ];
    for sql in statements {
        let t = Instant::now();
        let mut lo = 1;
        while lo <= orders {
            let hi = (lo + CHUNK - 1).min(orders);
            sqlx::query(sql)
                .bind(t0)
                .bind(lo)
                .bind(hi)
                .execute(&db.pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            lo = hi + 1;
        }
        println!(
            "data set: {} in {:.1}s",
            sql.split_whitespace().nth(2).unwrap_or("?"),
            t.elapsed().as_secs_f64()
        );
    }
    sqlx::query("ANALYZE").execute(&db.pool).await.unwrap();
    println!(
        "data set: {orders} orders built in {:.0}s",
        started.elapsed().as_secs_f64()
    );
}

/// A redis-server of the bench's own on a free loopback port, killed on drop.
struct OwnRedis {
    port: u16,
    child: std::process::Child,
}

impl OwnRedis {
    fn start() -> OwnRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/stack up installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        OwnRedis { port, child }
    }
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn fill_locks(url: &str, n: usize) {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let now = now_ms();
    for start in (0..n).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 1000).min(n) {
            let key = keys::order_lock(&order_no(i as i64 + 1));
            let h = LockHolder {
                instance: format!("bench-instance-{}", i % 100),
                host: "bench-host".into(),
                pid: 1000 + (i % 100) as u32,
                acquired_at: now,
                ttl_ms: 3_600_000,
                fence: i as i64,
                nonce: format!("n{i}"),
            };
            pipe.cmd("SET")
                .arg(&key)
                .arg(h.to_value())
                .arg("PX")
                .arg(3_600_000)
                .ignore();
            pipe.cmd("SET").arg(keys::fence(&key)).arg(i).ignore();
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
    }
    let mut pipe = redis::pipe();
    for k in 0..50 {
        pipe.cmd("SET")
            .arg(keys::instance(&format!("bench-instance-{k}")))
            .arg("alive")
            .arg("PX")
            .arg(3_600_000)
            .ignore();
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
}

/// Another client: a blocking connection on its own OS thread, a GET every millisecond; returns
/// each round trip in ms, sorted. Stops after `limit` or when `stop` is set.
async fn probe_latency(
    url: String,
    limit: Duration,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> Vec<f64> {
    tokio::task::spawn_blocking(move || {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut c = client.get_connection().unwrap();
        let started = Instant::now();
        let mut lat = Vec::new();
        while started.elapsed() < limit
            && !stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
        {
            let t = Instant::now();
            let _: Option<String> = redis::cmd("GET").arg("probe").query(&mut c).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
            std::thread::sleep(Duration::from_millis(1));
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        lat
    })
    .await
    .unwrap()
}

/// Starts the release binary's `idemguard console` in tmux against the bench's database and
/// Redis, waits until it lists every lock, and reads its resident memory (max over 3 s).
/// Topics of the bench's own, filled past the console's bounds.
struct FullTopics {
    trace_topic: String,
    payment_topic: String,
    trace_events: usize,
    payment_messages: usize,
}

/// Creates two topics (3 partitions) and produces more trace events and payment messages than
/// the console keeps ([`store::TRACE_EVENTS_KEPT`], [`store::PAYMENT_MESSAGES_KEPT`]), shaped like
/// the real ones (the service's trace events, the relay's payment events with their headers).
async fn fill_topics(config: &Config) -> FullTopics {
    use idemguard::console::read::store;
    use idemguard::contracts::{headers, PaymentSucceeded};
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::ClientConfig;

    let servers = &config.kafka.bootstrap_servers;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .expect("kafka admin client");
    let suffix = format!("{}-{}", std::process::id(), now_ms());
    let full = FullTopics {
        trace_topic: format!("igbench.trace.{suffix}"),
        payment_topic: format!("igbench.payment.{suffix}"),
        trace_events: store::TRACE_EVENTS_KEPT + store::TRACE_EVENTS_KEPT / 10,
        payment_messages: store::PAYMENT_MESSAGES_KEPT + store::PAYMENT_MESSAGES_KEPT / 10,
    };
    let topics = [
        NewTopic::new(&full.trace_topic, 3, TopicReplication::Fixed(1)),
        NewTopic::new(&full.payment_topic, 3, TopicReplication::Fixed(1)),
    ];
    for r in admin
        .create_topics(
            &topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("the broker of the stack (scripts/stack up)")
    {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "5000")
        .set("queue.buffering.max.messages", "400000")
        .create()
        .expect("kafka producer");
    let send = |record: BaseRecord<'_, str, [u8]>| {
        let mut record = record;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match producer.send(record) {
                Ok(()) => return,
                Err((e, back)) => {
                    assert!(
                        Instant::now() < deadline,
                        "producing to the bench topics: {e}"
                    );
                    record = back;
                    producer.poll(Duration::from_millis(50));
                }
            }
        }
    };
    let now = now_ms();
    let outcomes = [
        (Layer::Api, Outcome::Claimed),
        (Layer::Lock, Outcome::LockAcquired),
        (Layer::Db, Outcome::OrderCreated),
        (Layer::Api, Outcome::Finalized),
        (Layer::Api, Outcome::Replayed),
        (Layer::Api, Outcome::InFlightRejected),
        (Layer::Lock, Outcome::LockReleased),
        (Layer::Stream, Outcome::DedupHit),
    ];
    for i in 0..full.trace_events as i64 {
        let order = i % 20_000 + 1;
        let (layer, outcome) = outcomes[i as usize % outcomes.len()];
        let mut e = TraceEvent::new(layer, outcome)
            .order_no(order_no(order))
            .request_id(request_id(order));
        e.ts = format_ms(now - (full.trace_events as i64 - i) * 20);
        e.instance = format!("vm-bench-{:06x}", i % 8);
        e.detail = format!(
            "{}: key=lock:req:{} fence={}",
            outcome.as_str(),
            request_id(order),
            i % 7 + 1
        );
        e.latency_us = (i % 5_000) as u64;
        if outcome == Outcome::DedupHit {
            e.event_id = Some(format!("0193a1c2-7f3e-7c1a-9d2b-{order:012}"));
        }
        let payload = serde_json::to_vec(&e).unwrap();
        let key = order_no(order);
        send(
            BaseRecord::to(&full.trace_topic)
                .key(key.as_str())
                .payload(payload.as_slice()),
        );
        if i % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    for i in 0..full.payment_messages as i64 {
        let event = PaymentSucceeded {
            event_id: format!("0193a1c2-7f3e-7c1a-9d2b-{i:012}"),
            order_no: order_no(i + 1),
            request_id: request_id(i + 1),
            pay_no: format!("PAY2026112900{i:010}"),
            user_id: i % 50_000,
            amount: 1999,
            paid_at: now,
        };
        let payload = serde_json::to_vec(&event).unwrap();
        let h = OwnedHeaders::new()
            .insert(Header {
                key: headers::EVENT_ID,
                value: Some(event.event_id.as_str()),
            })
            .insert(Header {
                key: headers::REQUEST_ID,
                value: Some(event.request_id.as_str()),
            })
            .insert(Header {
                key: headers::ORDER_NO,
                value: Some(event.order_no.as_str()),
            });
        send(
            BaseRecord::to(&full.payment_topic)
                .key(event.order_no.as_str())
                .payload(payload.as_slice())
                .headers(h),
        );
        if i % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("the bench topics take every message");
    full
}

fn real_console_rss(
    config: &Config,
    lock_count: usize,
    full: Option<&FullTopics>,
) -> Result<(f64, f64), String> {
    let session = format!("igbench{}", std::process::id());
    let topics = match full {
        Some(f) => format!(
            "IDEMGUARD_KAFKA__TRACE_TOPIC='{}' IDEMGUARD_KAFKA__PAYMENT_TOPIC='{}'",
            f.trace_topic, f.payment_topic
        ),
        None => String::new(),
    };
    let script = format!(
        "export IDEMGUARD_CONFIG={dir}/config/local.toml IDEMGUARD_DATABASE__URL='{db}' IDEMGUARD_REDIS__URL='{redis}' IDEMGUARD_REDIS__REDLOCK_NODES='' {topics}; exec {bin} console",
        dir = env!("CARGO_MANIFEST_DIR"),
        db = config.database.url,
        redis = config.redis.url,
        bin = env!("CARGO_BIN_EXE_idemguard"),
    );
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(args)
            .output()
            .map_err(|e| format!("tmux: {e}"))
    };
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "200",
        "-y",
        "50",
        "bash",
        "-c",
        &script,
    ])?;
    let pid: u32 = String::from_utf8_lossy(
        &tmux(&["list-panes", "-t", &session, "-F", "#{pane_pid}"])?.stdout,
    )
    .trim()
    .parse()
    .map_err(|e| format!("pane pid: {e}"))?;
    tmux(&["send-keys", "-t", &session, "2"])?;
    let want = format!("{lock_count} locks");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let screen =
            String::from_utf8_lossy(&tmux(&["capture-pane", "-t", &session, "-p"])?.stdout)
                .into_owned();
        if screen.contains(&want) {
            break;
        }
        if Instant::now() > deadline {
            let _ = tmux(&["kill-session", "-t", &session]);
            return Err(format!(
                "the console did not list {want} within 60 s:\n{screen}"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(f) = full {
        // The Rates view counts what the readers took in: wait for both topics read to the end.
        tmux(&["send-keys", "-t", &session, "3"])?;
        let want = [
            format!("{} trace events read", f.trace_events),
            format!("{} payment messages read", f.payment_messages),
        ];
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let screen =
                String::from_utf8_lossy(&tmux(&["capture-pane", "-t", &session, "-p"])?.stdout)
                    .into_owned();
            if want.iter().all(|w| screen.contains(w.as_str())) {
                break;
            }
            if Instant::now() > deadline {
                let _ = tmux(&["kill-session", "-t", &session]);
                return Err(format!(
                    "the console did not read {want:?} within 120 s:\n{screen}"
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        // Back to the 100,000 locks, so the frame holds the biggest table too.
        tmux(&["send-keys", "-t", &session, "2"])?;
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut rss: f64 = 0.0;
    let mut hwm: f64 = 0.0;
    // 10 s: several refreshes of every view, so the churn of repeated lock scans is in the figure.
    for _ in 0..50 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
                .unwrap_or(0.0)
                / 1024.0
        };
        rss = rss.max(field("VmRSS:"));
        hwm = hwm.max(field("VmHWM:"));
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = tmux(&["send-keys", "-t", &session, "q"]);
    std::thread::sleep(Duration::from_millis(500));
    let _ = tmux(&["kill-session", "-t", &session]);
    println!("idemguard console (pid {pid}) showing {want}: VmRSS {rss:.0} MB, VmHWM {hwm:.0} MB");
    Ok((rss, hwm))
}

fn render_rounds(app: &mut App, what: &str) -> f64 {
    let mut terminal = Terminal::new(TestBackend::new(200, 50)).unwrap();
    let mut p99s = Vec::new();
    for round in 0..ROUNDS {
        let mut lat = Vec::with_capacity(FRAMES_PER_ROUND);
        for _ in 0..FRAMES_PER_ROUND {
            let t = Instant::now();
            app.refresh_views();
            terminal.draw(|f| ui::draw(f, app)).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        println!(
            "render {what} round {round}: p50 {:.3} ms, p99 {:.3} ms",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        p99s.push(percentile(&lat, 0.99));
    }
    median(&p99s)
}

fn synthetic_scan(n: usize) -> LockScan {
    let now = now_ms();
    let live: BTreeSet<String> = (0..100).step_by(2).map(|i| format!("api-{i}")).collect();
    let locks = (0..n)
        .map(|i| {
            let h = LockHolder {
                instance: format!("api-{}", i % 100),
                host: "h".into(),
                pid: 1,
                acquired_at: now - 1000,
                ttl_ms: 30_000,
                fence: i as i64,
                nonce: "n".into(),
            };
            let node = LockView::held_on("127.0.0.1:6379", h.to_value(), 29_000);
            let mut view = LockView::new(
                keys::order_lock(&order_no(i as i64)),
                LockMode::Single,
                vec![node],
                Some(i as i64),
                now,
            );
            view.judge_owner(Some(&live));
            view
        })
        .collect();
    LockScan {
        locks,
        nodes: vec![NodeScan {
            node: "127.0.0.1:6379".into(),
            role: "main",
            ok: true,
            error: None,
            keys: n,
            scan_ms: 1.0,
        }],
        live_instances: Some(live),
        scan_ms: 1.0,
        read_at_ms: now,
        truncated: false,
    }
}

fn synthetic_stuck(n: usize) -> Vec<StuckRecord> {
    let now = now_ms();
    (0..n)
        .map(|i| StuckRecord {
            request_id: request_id(i as i64),
            order_no: None,
            owner: format!("api-{}", i % 100),
            owner_alive: None,
            fence: Some(i as i64),
            created_at: now - 120_000 - i as i64,
            updated_at: Some(now - 120_000),
            lease_until: Some(now - 90_000),
            replay_count: Some(0),
            version: Some(0),
            order_exists: i % 3 == 0,
            order_status: (i % 3 == 0).then(|| "CREATED".to_string()),
            found_order_no: (i % 3 == 0).then(|| order_no(i as i64)),
            foreign: false,
        })
        .collect()
}
