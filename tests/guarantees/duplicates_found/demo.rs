//! `idemguard demo --no-tui`, the real binary on the real stack: it reaches a state with a stuck
//! record (owner dead) and a lock whose owner is dead within 60 s, and stops cleanly, leaving no
//! process behind. The review's picture of the order clicked five times — `idemguard report
//! --format html` — is then looked at in headless Chromium (the README's screenshot is this
//! test's `target/tmp/demo_report/demo-report.png`).

use crate::common;
use crate::support::chromium;
use crate::support::report_page;

use std::time::Duration;

use common::*;
use idemguard::config::{Config, Dialect};
use idemguard::console::report::{self, ReportScope};
use idemguard::contracts::TraceTarget;

#[tokio::test]
async fn the_demo_reaches_its_incidents_and_leaves_nothing_running() {
    let config = fresh_database_config(Dialect::Postgres).await;
    let topics = fresh_topics(
        &config,
        &[
            "payment.succeeded",
            "idemguard.trace",
            "payment.succeeded.dlq",
        ],
    )
    .await;
    let group = format!("igt-demo-{}", unique_suffix());
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            "demo",
            "--no-tui",
        ])
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_KAFKA__PAYMENT_TOPIC", &topics[0])
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &topics[1])
        .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &topics[2])
        .env("IDEMGUARD_KAFKA__CONSUMER_GROUP", &group)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the demo finished within 120 s")
        .unwrap();
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the demo prints where to look, as JSON");

    // The order clicked five times exists once; the stuck record is PROCESSING with no order.
    let db = idemguard::db::Database::connect(&config).await.unwrap();
    let clicked = state["clicked_request_id"].as_str().unwrap();
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{clicked}'")).await,
        1
    );
    let stuck = state["stuck_request_id"].as_str().unwrap();
    assert_eq!(
        count(
            &db,
            &format!("idempotency_record WHERE request_id = '{stuck}' AND status = 'PROCESSING'")
        )
        .await,
        1
    );
    assert_eq!(
        count(&db, &format!("order_record WHERE req_id = '{stuck}'")).await,
        0
    );
    // The dead holder's lock is still there (long TTL, no watchdog, holder SIGKILLed).
    let redis = redis::Client::open(config.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let key = state["dead_lock_key"].as_str().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(exists, "{key} is gone");
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();

    // Nothing the demo started is still running.
    for pid in state["pids"].as_array().unwrap() {
        let pid = pid.as_u64().unwrap();
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "process {pid} started by the demo is still running");
    }

    let mut config = config;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.kafka.dlq_topic = topics[2].clone();
    config.kafka.consumer_group = group;
    the_late_event_waits_in_the_dlq_and_a_redrive_applies_it_once(&config, &db, &state).await;
    let clicked = state["clicked_five_times"].as_str().unwrap();
    the_clicked_orders_report_shows_who_stopped_each_copy(&config, clicked).await;
}

/// The demo's payment event that arrived before its order is in the DLQ, its reason "unknown
/// order", and — its order created since — `would apply`; `redrive --dlq P:O` publishes it and a
/// consumer applies it once (the order PAID by it, one points row); a second redrive is refused.
async fn the_late_event_waits_in_the_dlq_and_a_redrive_applies_it_once(
    config: &Config,
    db: &idemguard::db::Database,
    state: &serde_json::Value,
) {
    use idemguard::console::read::dlq::Verdict;
    let (order, event) = (
        state["late_event_order"].as_str().unwrap(),
        state["late_event_id"].as_str().unwrap(),
    );
    let now = idemguard::contracts::now_ms();
    let window = idemguard::console::read::window::TimeWindow {
        from_ms: now - 3_600_000,
        to_ms: now + 1,
    };
    let listed = idemguard::console::cli::headless::dlq(config, window).await;
    let late: Vec<_> = listed
        .data
        .messages
        .iter()
        .filter(|m| m.event_id.as_deref() == Some(event))
        .collect();
    assert_eq!(late.len(), 1, "{:?}", listed.data.messages);
    let m = late[0];
    assert!(m.reason.contains("unknown order"), "{m:?}");
    assert_eq!(m.order_no.as_deref(), Some(order));
    assert_eq!(m.verdict, Verdict::WouldApply, "{m:?}");

    let redrive = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
                "redrive",
                "--dlq",
                &format!("{}:{}", m.partition, m.offset),
                "--allow-actions",
            ])
            .env("IDEMGUARD_DATABASE__URL", &config.database.url)
            .env(
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
                &config.kafka.payment_topic,
            )
            .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &config.kafka.dlq_topic)
            .env(
                "IDEMGUARD_KAFKA__CONSUMER_GROUP",
                &config.kafka.consumer_group,
            )
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .output()
            .unwrap()
    };
    let out = redrive();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A group of its own, read from the topic's start: a new member of the demo's group may wait
    // out the session of a demo consumer that never left it before it is given partitions (a run
    // under load saw nothing applied within 60 s). Every earlier event is a dedup hit.
    let mut consumer = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            "consume",
        ])
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env(
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            &config.kafka.payment_topic,
        )
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &config.kafka.trace_topic)
        .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &config.kafka.dlq_topic)
        .env(
            "IDEMGUARD_KAFKA__CONSUMER_GROUP",
            format!("{}-redriven", config.kafka.consumer_group),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let paid = format!("order_record WHERE order_no = '{order}' AND status = 'PAID' AND payment_event_id = '{event}'");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let points = format!("points_ledger WHERE source_event_no = '{event}'");
    while count(db, &paid).await == 0 || count(db, &points).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the redriven event was not applied within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(count(db, &points).await, 1, "applied once");
    let again = redrive();
    assert_eq!(again.status.code(), Some(4), "a second redrive is refused");
    let _ = std::process::Command::new("kill")
        .args(["-INT", &consumer.id().unwrap().to_string()])
        .status();
    let _ = tokio::time::timeout(Duration::from_secs(15), consumer.wait()).await;
}

/// `report --id ORDER --format html --out FILE` of the clicked order, rendered: the page is
/// quiet (no console message, no request), every row is a mark on its lane, and the clicks the
/// API bounced are stop marks on the API lane; nothing got through.
async fn the_clicked_orders_report_shows_who_stopped_each_copy(config: &Config, order: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo_report");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("demo-report.html");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            "report",
            "--id",
            order,
            "--format",
            "html",
            "--out",
        ])
        .arg(&page)
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env(
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            &config.kafka.payment_topic,
        )
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &config.kafka.trace_topic)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = report::build(config, &ReportScope::Id(TraceTarget::classify(order)))
        .await
        .unwrap();
    let shown = chromium::render(&page, 1060, 1010, &dir.join("demo-report.png"));
    assert!(shown.console.is_empty(), "{:?}", shown.console);
    assert!(shown.page_requests.is_empty(), "{:?}", shown.page_requests);
    let stopped = report_page::assert_report_page(&shown.dom, &r, false);
    let on = |lane: &str| stopped[0].iter().find(|(l, _)| l == lane).unwrap().1;
    assert!(
        on("api") >= 4,
        "the clicks that found the first one in flight or finished: {stopped:?}"
    );
    assert_eq!(
        stopped[0].iter().map(|(_, n)| n).sum::<usize>(),
        r.duplicates_stopped(),
        "every duplicate stopped is a stop mark"
    );
}
