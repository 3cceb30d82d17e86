//! The real binary's console in a real terminal (tmux): its logs go to a file and a read in
//! flight never holds it.
//! - while the console owns the terminal, log lines (an action's `INFO idemguard::trace:
//!   decision …`) go to its log file, never over the screen; the help screen shows the file;
//! - `q` while the console reads a large trace topic (`:trace` of an unknown ID) exits at
//!   once instead of when the read ends; a new trace or another view cancels the read too.

mod common;
mod console_fixture;
#[path = "support/tmux.rs"]
mod tmux;

use std::time::{Duration, Instant};

use console_fixture::{press, type_str, world, World};
use crossterm::event::KeyCode;
use idemguard::api::idempotency::{self, Claim, ClaimRequest};
use idemguard::config::Dialect;
use idemguard::console::read::bounded;
use idemguard::console::read::window::TimeWindow;
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::{Backends, Update};
use idemguard::contracts::{now_ms, RequestId, TraceTarget};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tmux::Terminal;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// `idemguard console --allow-actions` in a real terminal over `w`, with `extra` variables.
fn open_console(w: &World, extra: &[(&str, String)]) -> Terminal {
    let mut env = tmux::local_env(&w.config);
    env.extend(extra.iter().cloned());
    Terminal::console("igt", (160, 45), &env, " --allow-actions")
}

/// Text only a log line has (tracing's level and target, the decision event's fields).
fn has_log_text(screen: &str) -> bool {
    [
        "idemguard::trace",
        " INFO ",
        " WARN ",
        "decision layer=",
        "outcome=\"operator_action\"",
    ]
    .iter()
    .any(|t| screen.contains(t))
}

/// A PROCESSING record whose owner never had a heartbeat: the Stuck view lists it, `f` finalizes it.
async fn stuck_record(w: &World) -> String {
    let request_id = RequestId::generate("APP", "ORDER").to_string();
    let r = ClaimRequest {
        request_id: &request_id,
        biz_type: "ORDER",
        request_hash: "h",
        owner: "igt-dead-owner",
        fence: 1,
        lease_ms: 1,
        retention_ms: 600_000,
    };
    assert_eq!(idempotency::claim(&w.db, &r).await.unwrap(), Claim::New);
    request_id
}

async fn logs_never_reach_the_console_screen(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let request_id = stuck_record(&w).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("console.log");
    let t = open_console(
        &w,
        &[
            ("IDEMGUARD_CONSOLE__STUCK_THRESHOLD", "1s".into()),
            (
                "IDEMGUARD_CONSOLE__LOG_FILE",
                log_file.display().to_string(),
            ),
        ],
    );
    t.wait_for("the console", Duration::from_secs(20), |s| {
        s.contains("idemguard console") && s.contains("database ok")
    });

    // An action: finalize the stuck record (its decision is logged at INFO).
    t.keys(&["5"]);
    t.wait_for("the stuck record", Duration::from_secs(20), |s| {
        s.contains(&request_id)
    });
    t.keys(&["f"]);
    t.wait_for("the confirmation", Duration::from_secs(10), |s| {
        s.contains("enter runs it")
    });
    t.keys(&["Enter"]);
    // The result is said once, in the row of the actions panel.
    let done = t.wait_for("the action's result", Duration::from_secs(20), |s| {
        s.contains("Last actions") && s.contains(&format!("finalize {request_id} — "))
    });
    std::thread::sleep(Duration::from_millis(500)); // anything written late would be drawn by now
    let after = t.screen();
    assert!(
        !has_log_text(&done) && !has_log_text(&after),
        "{dialect}: a log line was drawn over the console:\n{after}"
    );

    // The help screen says where the logs went, at its end (it scrolls: G goes there).
    t.keys(&["?"]);
    t.wait_for("the help", Duration::from_secs(10), |s| s.contains("Help"));
    t.keys(&["G"]);
    let help = t.wait_for("the help's end", Duration::from_secs(10), |s| {
        s.contains("LOGS")
    });
    assert!(
        help.contains("LOGS") && help.contains(&log_file.display().to_string()),
        "{dialect}: {help}"
    );
    t.keys(&["Escape"]);
    t.wait_for("the help closed", Duration::from_secs(10), |s| {
        !s.contains("LOGS")
    });
    let exit = t.quit_console(Duration::from_secs(20));
    assert!(
        !has_log_text(&exit),
        "{dialect}: nothing logged on the terminal after the console either:\n{exit}"
    );

    let logged = std::fs::read_to_string(&log_file).unwrap();
    assert!(
        logged.lines().any(|l| l.contains("idemguard::trace")
            && l.contains("operator_action")
            && l.contains(&request_id)),
        "{dialect}: the decision is in the log file:\n{logged}"
    );
    assert!(
        !logged.contains('\x1b'),
        "{dialect}: no colour codes in a file: {logged:?}"
    );
}

per_dialect!(logs_never_reach_the_console_screen => logs_never_reach_the_console_screen_postgres, logs_never_reach_the_console_screen_mysql);

/// Messages on the trace topic, enough that reading it all takes seconds: a third of them in
/// the partition a trace of one unknown requestId reads, each of [`DETAIL_BYTES`] more. With
/// 1,200,000 the read took 1.99–2.1 s on a quiet 2-core machine, at the edge of the 2 s the
/// tests need.
const TOPIC_MESSAGES: usize = 2_000_000;
/// What each message carries beyond its IDs (a long `detail`, as a service's error text can be).
const DETAIL_BYTES: usize = 100;

async fn fill(config: &idemguard::config::Config, topic: &str, n: usize) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "5000")
        .create()
        .unwrap();
    let payload = format!(
        r#"{{"layer":"api","outcome":"claimed","request_id":"APP:ORDER:20261129:someone-else","detail":"{}"}}"#,
        "x".repeat(DETAIL_BYTES)
    );
    let payload = payload.as_bytes();
    for chunk in (0..n).collect::<Vec<_>>().chunks(5_000) {
        let sends = chunk.iter().map(|i| {
            let key = format!("k{}", i % 64);
            let producer = &producer;
            async move {
                producer
                    .send(
                        FutureRecord::to(topic).key(&key).payload(payload),
                        Duration::from_secs(30),
                    )
                    .await
                    .map_err(|(e, _)| e)
                    .unwrap()
            }
        });
        futures::future::join_all(sends).await;
    }
}

/// A world whose trace topic takes seconds to read whole; and how long that takes, timed on the
/// read a trace of an unknown ID starts (the console's, cancelled below): its last day of both
/// topics, every partition.
async fn world_with_a_large_trace_topic(dialect: Dialect) -> (World, Duration) {
    let w = world(dialect, 0).await;
    fill(&w.config, &w.config.kafka.trace_topic, TOPIC_MESSAGES).await;
    let target = TraceTarget::classify("APP:ORDER:20261129:sizing-unknown");
    let window = TimeWindow::last_day(now_ms());
    let never = CancellationToken::new();
    let started = Instant::now();
    let (_, log, cost) = bounded::read_topics_for(&w.config, &target, None, window, &never).await;
    let full_read = started.elapsed();
    log.unwrap();
    assert!(
        cost.messages_scanned() as usize >= TOPIC_MESSAGES / 5,
        "{dialect}: the read scans the ID's partition whole: {cost:?}"
    );
    assert!(
        full_read >= Duration::from_secs(2),
        "{dialect}: a full read took only {full_read:?}; the test needs a slower one"
    );
    (w, full_read)
}

async fn quitting_cancels_a_topic_read(dialect: Dialect) {
    // The read `q` must not wait for really takes seconds.
    let (w, full_read) = world_with_a_large_trace_topic(dialect).await;

    let dir = tempfile::tempdir().unwrap();
    let t = open_console(
        &w,
        &[(
            "IDEMGUARD_CONSOLE__LOG_FILE",
            dir.path().join("console.log").display().to_string(),
        )],
    );
    t.wait_for("the console", Duration::from_secs(20), |s| {
        s.contains("idemguard console") && s.contains("database ok")
    });
    t.keys(&[":trace APP:ORDER:20261129:nobody-knows-me", "Enter"]);
    t.wait_for("the trace", Duration::from_secs(10), |s| {
        s.contains("nobody-knows-me")
    });
    std::thread::sleep(Duration::from_millis(700)); // the read of the whole topic is under way
    let asked = Instant::now();
    t.quit_console(Duration::from_secs(30));
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "{dialect}: q took {took:?} (a full read of the topic takes {full_read:?})"
    );
}

per_dialect!(quitting_cancels_a_topic_read => quitting_cancels_a_topic_read_postgres, quitting_cancels_a_topic_read_mysql);

fn command(app: &mut App, line: &str) {
    press(app, KeyCode::Char(':'));
    type_str(app, line);
    press(app, KeyCode::Enter);
}

/// Applies updates to `app` for `d`; the requestIds whose history read (the whole trace topic)
/// came back.
async fn histories_within(
    app: &mut App,
    rx: &mut mpsc::Receiver<Update>,
    d: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + d;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(Some(u)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
            if let Update::TraceHistory { ids, .. } = &u {
                seen.push(ids.request_id.clone().unwrap_or_default());
            }
            app.apply(u);
        }
    }
    seen
}

/// A new trace, or another view, cancels the read of the trace topic started for the last one:
/// its answer never comes (before, every read ran to the end and answered, for nothing).
async fn leaving_a_trace_cancels_its_topic_read(dialect: Dialect) {
    let (w, full_read) = world_with_a_large_trace_topic(dialect).await;
    let mut b = Backends::spawn(&w.config);
    let mut app = App::new(&w.config, Some(b.focus.clone()));
    let [first, second, third] =
        ["first", "second", "third"].map(|n| format!("APP:ORDER:20261129:{n}-unknown"));
    let long_enough = full_read * 2 + Duration::from_secs(3);

    command(&mut app, &format!("trace {first}"));
    assert_eq!(
        histories_within(&mut app, &mut b.updates, Duration::from_millis(700)).await,
        Vec::<String>::new()
    );
    command(&mut app, &format!("trace {second}"));
    let seen = histories_within(&mut app, &mut b.updates, long_enough).await;
    assert_eq!(
        seen,
        vec![second],
        "{dialect}: only the trace on screen is answered"
    );
    // Its answer is kept: another view and back does not read the whole topic again.
    press(&mut app, KeyCode::Char('3'));
    histories_within(&mut app, &mut b.updates, Duration::from_millis(300)).await;
    press(&mut app, KeyCode::Char('2'));
    let seen = histories_within(&mut app, &mut b.updates, long_enough).await;
    assert_eq!(
        seen,
        Vec::<String>::new(),
        "{dialect}: the answered trace was read again"
    );

    command(&mut app, &format!("trace {third}"));
    histories_within(&mut app, &mut b.updates, Duration::from_millis(700)).await;
    press(&mut app, KeyCode::Char('3')); // the Locks view
    let seen = histories_within(&mut app, &mut b.updates, long_enough).await;
    assert_eq!(
        seen,
        Vec::<String>::new(),
        "{dialect}: the read for a trace no longer on screen was cancelled"
    );
    b.shutdown().await;
}

per_dialect!(leaving_a_trace_cancels_its_topic_read => leaving_a_trace_cancels_its_topic_read_postgres, leaving_a_trace_cancels_its_topic_read_mysql);
