//! The real binary's console in a real terminal (tmux): its logs go to a file and a read in
//! flight never holds it.
//! - while the console owns the terminal, log lines (an action's `INFO idemguard::trace:
//!   decision …`) go to its log file, never over the screen; the help screen shows the file;
//! - `q` while the console reads a trace topic (`:trace` of an unknown ID) exits at once instead
//!   of when the read ends; a new trace or another view cancels the read too. The reads are made
//!   slow by a client property in `[kafka.client]`, over some MB.

use crate::console::fixture as console_fixture;
use crate::support::tmux;

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

/// The client property that slows the console's reads, set through `[kafka.client]` as an
/// operator would: the broker answers a fetch once it holds `fetch.min.bytes` or when
/// `fetch.wait.max.ms` has passed, and asking for more than a fetch may carry makes every fetch
/// wait that whole time (10 ms for the console's window reader).
const EVERY_FETCH_WAITS: (&str, &str) = ("fetch.min.bytes", "100000000");

/// The floor of one fetch's wait with [`EVERY_FETCH_WAITS`]: the console's window reader's
/// `fetch.wait.max.ms`. A partition of `n` messages, one a fetch, takes at least `n` of them to
/// read, quiet machine or loaded (11–12 ms each measured on 2 busy cores).
const FETCH_WAIT: Duration = Duration::from_millis(10);
/// What each message carries beyond its IDs (a long `detail`, as a service's error text can
/// be): each is a record batch of its own, more than half of the 64 KiB a fetch of the console's
/// reader may carry from a partition, so a fetch carries one.
const DETAIL_BYTES: usize = 34_000;
/// The one partition of the trace topic that holds the messages and that every traced ID maps to.
const PARTITION: i32 = 0;

/// `id` with a numbered suffix, the first whose trace partition (by `kafka.partitioner`) is
/// [`PARTITION`]: a trace of an unknown requestId reads that partition only.
fn id_in_the_partition(config: &idemguard::config::Config, id: &str) -> String {
    (0..)
        .map(|n| format!("{id}-{n}"))
        .find(|id| config.kafka.partitioner.partition_of(id.as_bytes(), 3) == Some(PARTITION))
        .unwrap()
}

/// `n` trace events of some other request into [`PARTITION`], each a record batch of its own,
/// keyed as the tracer keys them (so the read's partition shortcut holds).
async fn fill(config: &idemguard::config::Config, topic: &str, n: usize) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("batch.num.messages", "1")
        .create()
        .unwrap();
    let someone_else = id_in_the_partition(config, "APP:ORDER:20261129:someone-else");
    let payload = format!(
        r#"{{"layer":"api","outcome":"claimed","request_id":"{someone_else}","detail":"{}"}}"#,
        "x".repeat(DETAIL_BYTES)
    );
    let sends = (0..n).map(|_| {
        let record = FutureRecord::to(topic)
            .partition(PARTITION)
            .key(&someone_else)
            .payload(&payload);
        producer.send(record, Duration::from_secs(30))
    });
    for sent in futures::future::join_all(sends).await {
        sent.map_err(|(e, _)| e).unwrap();
    }
}

/// `[kafka.client]` with [`EVERY_FETCH_WAITS`], as the console's environment gives it.
fn slow_fetches_env() -> (&'static str, String) {
    let (name, value) = EVERY_FETCH_WAITS;
    (
        "IDEMGUARD_KAFKA__CLIENT",
        format!(r#"{{ "{name}" = "{value}" }}"#),
    )
}

/// A world whose trace topic holds `messages` (some MB) that take seconds to read, its readers
/// slowed by [`EVERY_FETCH_WAITS`] (at the broker's full speed it took two million messages, a
/// GB and more); and how long that takes, timed on the read a trace of an unknown ID starts
/// (the console's, cancelled below).
async fn world_with_a_slow_trace_topic(dialect: Dialect, messages: usize) -> (World, Duration) {
    let mut w = world(dialect, 0).await;
    let (name, value) = EVERY_FETCH_WAITS;
    w.config.kafka.client.insert(name.into(), value.into());
    fill(&w.config, &w.config.kafka.trace_topic, messages).await;
    let id = id_in_the_partition(&w.config, "APP:ORDER:20261129:sizing-unknown");
    let window = TimeWindow::last_day(now_ms());
    let never = CancellationToken::new();
    let started = Instant::now();
    let (_, log, cost) =
        bounded::read_topics_for(&w.config, &TraceTarget::classify(&id), None, window, &never)
            .await;
    let full_read = started.elapsed();
    log.unwrap();
    assert_eq!(
        cost.messages_scanned() as usize,
        messages,
        "{dialect}: the read scans the ID's partition whole: {cost:?}"
    );
    assert!(
        cost.round_trips.fetch as usize > messages,
        "{dialect}: a fetch carries one message: {cost:?}"
    );
    assert!(
        full_read >= FETCH_WAIT * messages as u32,
        "{dialect}: a full read took only {full_read:?}: the fetches did not wait"
    );
    (w, full_read)
}

async fn quitting_cancels_a_topic_read(dialect: Dialect) {
    // The read `q` must not wait for really takes seconds: over 2.4 s.
    let (w, full_read) = world_with_a_slow_trace_topic(dialect, 240).await;

    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("console.log").display().to_string();
    let t = open_console(
        &w,
        &[
            ("IDEMGUARD_CONSOLE__LOG_FILE", log_file),
            slow_fetches_env(),
        ],
    );
    t.wait_for("the console", Duration::from_secs(20), |s| {
        s.contains("idemguard console") && s.contains("database ok")
    });
    let id = id_in_the_partition(&w.config, "APP:ORDER:20261129:nobody-knows-me");
    let traced = Instant::now();
    t.keys(&[&format!(":trace {id}"), "Enter"]);
    t.wait_for(
        "the read of the topic under way",
        Duration::from_secs(10),
        |s| {
            s.contains(&id) && s.contains(" messages scanned") && !s.contains(" 0 messages scanned")
        },
    );
    let asked = Instant::now();
    let left = full_read.saturating_sub(asked - traced);
    assert!(
        left > Duration::from_millis(1500),
        "{dialect}: the read had only {left:?} left of {full_read:?} when q was pressed; the \
         test needs a slower one"
    );
    t.quit_console(Duration::from_secs(30));
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "{dialect}: q took {took:?} (the read had {left:?} left)"
    );
}

per_dialect!(quitting_cancels_a_topic_read => quitting_cancels_a_topic_read_postgres, quitting_cancels_a_topic_read_mysql);

fn command(app: &mut App, line: &str) {
    press(app, KeyCode::Char(':'));
    type_str(app, line);
    press(app, KeyCode::Enter);
}

fn in_ms(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// Applies updates to `app` until `deadline`; the requestIds whose history read (the whole trace
/// topic) came back.
async fn histories_until(
    app: &mut App,
    rx: &mut mpsc::Receiver<Update>,
    deadline: Instant,
) -> Vec<String> {
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
    // Each read outlasts the 700 ms before the next step: over 1.1 s.
    let (w, full_read) = world_with_a_slow_trace_topic(dialect, 110).await;
    let mut b = Backends::spawn(&w.config);
    let mut app = App::new(&w.config, Some(b.focus.clone()));
    let [first, second, third] = ["first", "second", "third"]
        .map(|n| id_in_the_partition(&w.config, &format!("APP:ORDER:20261129:{n}-unknown")));
    // By then a read not cancelled has answered: its length and half again, and a second.
    let answered_by = |asked: Instant| asked + full_read * 3 / 2 + Duration::from_secs(1);
    let updates = &mut b.updates;

    command(&mut app, &format!("trace {first}"));
    assert_eq!(
        histories_until(&mut app, updates, in_ms(700)).await,
        Vec::<String>::new()
    );
    command(&mut app, &format!("trace {second}"));
    let seen = histories_until(&mut app, updates, answered_by(Instant::now())).await;
    assert_eq!(
        seen,
        vec![second],
        "{dialect}: only the trace on screen is answered"
    );
    // Its answer is kept: another view and back does not read the whole topic again.
    press(&mut app, KeyCode::Char('3'));
    histories_until(&mut app, updates, in_ms(300)).await;
    press(&mut app, KeyCode::Char('2'));
    let seen = histories_until(&mut app, updates, answered_by(Instant::now())).await;
    assert_eq!(
        seen,
        Vec::<String>::new(),
        "{dialect}: the answered trace was read again"
    );

    command(&mut app, &format!("trace {third}"));
    let third_asked = Instant::now();
    assert_eq!(
        histories_until(&mut app, updates, in_ms(700)).await,
        Vec::<String>::new()
    );
    press(&mut app, KeyCode::Char('3')); // the Locks view
    let seen = histories_until(&mut app, updates, answered_by(third_asked)).await;
    assert_eq!(
        seen,
        Vec::<String>::new(),
        "{dialect}: the read for a trace no longer on screen was cancelled"
    );
    b.shutdown().await;
}

per_dialect!(leaving_a_trace_cancels_its_topic_read => leaving_a_trace_cancels_its_topic_read_postgres, leaving_a_trace_cancels_its_topic_read_mysql);
