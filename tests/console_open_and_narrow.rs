//! The console opens on the answer an alert or a ticket gives, hands it on, and keeps it readable
//! on a narrow terminal — the real binary in tmux against fresh services:
//! - `console --trace ORDER` shows the order's timeline without a key typed; `--view dlq` opens
//!   on the DLQ; an unknown view exits non-zero naming the views (and the nearest one);
//! - `y` says on the status line what it copied: the traced ID, the selected DLQ message, or —
//!   in a view without an ID — the command that opens the console on it;
//! - every alert's runbook that names the console names a view or a trace it opens;
//! - at 80×24, 100×30 and 200×50 the DLQ and Trace views keep the columns that identify a row and
//!   answer the view's question, the tabs keep their names and the footer its help and quit keys.

mod common;
mod console_fixture;
#[path = "support/tmux.rs"]
mod tmux;

use std::time::Duration;

use console_fixture::{world, Incident, World};
use idemguard::config::Dialect;
use idemguard::console::tui::keymap::View;
use idemguard::contracts::headers;

const WITHIN: Duration = Duration::from_secs(30);

/// The console's environment for `w`, its DLQ topic included.
fn console_env(w: &World) -> Vec<(&'static str, String)> {
    let mut env = tmux::local_env(&w.config);
    env.push((
        "IDEMGUARD_KAFKA__DLQ_TOPIC",
        w.config.kafka.dlq_topic.clone(),
    ));
    env
}

/// A fresh DLQ topic for `w`.
async fn fresh_dlq(w: &mut World) {
    let topics = common::fresh_topics(&w.config, &["payment.succeeded.dlq"]).await;
    w.config.kafka.dlq_topic = topics[0].clone();
}

/// A message in `w`'s DLQ as the consumer writes one: ID headers, reason, source position.
async fn dead_letter(w: &World, order_no: &str, event_id: &str, reason: &str) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;
    let dlq_id = format!("dlq-{}", common::unique_suffix());
    let all = [
        (headers::EVENT_ID, event_id),
        (headers::ORDER_NO, order_no),
        ("dlq.id", &dlq_id),
        ("dlq.reason", reason),
        ("dlq.source.topic", &w.config.kafka.payment_topic),
        ("dlq.source.partition", "0"),
        ("dlq.source.offset", "0"),
    ];
    let mut h = OwnedHeaders::new();
    for (key, value) in all {
        h = h.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    let body = format!(r#"{{"event_id":"{event_id}","order_no":"{order_no}"}}"#);
    let record = FutureRecord::to(&w.config.kafka.dlq_topic)
        .key(order_no)
        .payload(&body)
        .headers(h);
    common::consumer::producer(&w.config)
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

/// `idemguard console ARGS` in a `size` terminal on `w`.
fn console(w: &World, size: (u16, u16), args: &str) -> tmux::Terminal {
    tmux::Terminal::console("igo", size, &console_env(w), args)
}

/// The status line (the last line of the screen).
fn status_line(screen: &str) -> &str {
    screen.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("")
}

// ---------------------------------------------------------------------------------------------
// Opening on the answer
// ---------------------------------------------------------------------------------------------

/// `--trace ORDER`: the timeline, no key typed; `y` copies the traced orderNo and says so.
async fn opens_on_the_orders_trace(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let t = console(&w, (160, 40), &format!(" --trace {}", inc.order_no));
    let s = t.wait_for("the order's timeline", WITHIN, |s| {
        s.contains("Timeline, oldest first") && s.contains("copy 3 of 3")
    });
    assert!(
        s.contains("2:Trace") && s.contains(&inc.order_no),
        "{dialect}: {s}"
    );
    t.keys(&["y"]);
    let copied = format!("copied to the clipboard: {}", inc.order_no);
    let s = t.wait_for("what y copied", WITHIN, |s| {
        status_line(s).contains(&copied)
    });
    assert!(s.contains("Timeline, oldest first"), "{dialect}: {s}");
    tmux::assert_console_gone(&t.quit_console(WITHIN));
}
per_dialect!(opens_on_the_orders_trace => opens_on_the_orders_trace_postgres, opens_on_the_orders_trace_mysql);

/// `--view dlq`: the DLQ, its messages listed; `y` copies the selected message's position as a
/// redrive names it. An empty DLQ has no row: `y` copies the command that opens it.
async fn opens_on_the_dlq(dialect: Dialect) {
    let mut w = world(dialect, 0).await;
    fresh_dlq(&mut w).await;
    let inc = Incident::write(&w).await;
    let empty = console(&w, (120, 30), " --view dlq");
    empty.wait_for("the empty DLQ", WITHIN, |s| {
        s.contains("0 message(s) in") && s.contains("7:DLQ")
    });
    empty.keys(&["y"]);
    empty.wait_for("the command copied", WITHIN, |s| {
        status_line(s).contains("copied to the clipboard: idemguard console --view dlq")
    });
    tmux::assert_console_gone(&empty.quit_console(WITHIN));

    dead_letter(&w, &inc.order_no, &inc.event_id, "unknown order").await;
    let t = console(&w, (160, 40), " --view dlq");
    let s = t.wait_for("the DLQ's message", WITHIN, |s| {
        s.contains("1 message(s) in") && s.contains(&inc.order_no)
    });
    assert!(s.contains("unknown order"), "{dialect}: {s}");
    t.keys(&["y"]);
    let target = format!("copied to the clipboard: dlq:{}:", w.config.kafka.dlq_topic);
    t.wait_for("the message copied", WITHIN, |s| {
        status_line(s).contains(&target)
    });
    tmux::assert_console_gone(&t.quit_console(WITHIN));
}
per_dialect!(opens_on_the_dlq => opens_on_the_dlq_postgres, opens_on_the_dlq_mysql);

/// A view the console does not have: exit 2 before anything opens, the views named, the typo's
/// nearest view suggested.
#[test]
fn an_unknown_view_is_refused_naming_the_views() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["console", "--view", "dql"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown view `dql`: did you mean `dlq`?"),
        "{err}"
    );
    assert!(
        err.contains("views: overview, trace, locks, rates, stuck, audit, dlq"),
        "{err}"
    );
}

/// Every runbook that sends the engineer to the console says where it opens (`--view V` of a view
/// the console has, or `--trace ID`), and the DLQ's alert opens the DLQ.
#[test]
fn every_runbook_names_the_view_the_console_opens_on() {
    let rules = include_str!("../config/prometheus/idemguard.rules.yml");
    let mut views = Vec::new();
    for line in rules.lines().filter(|l| l.contains("runbook:")) {
        for (i, _) in line.match_indices("`idemguard console") {
            let command = &line[i + 1..];
            let command = &command[..command.find('`').unwrap()];
            match command.split_whitespace().collect::<Vec<_>>()[..] {
                ["idemguard", "console", "--view", v] => views.push(View::named(v).unwrap()),
                ["idemguard", "console", "--trace", _] => {}
                _ => panic!("a runbook opens the console without saying where: {line}"),
            }
        }
    }
    for v in [
        View::Dlq,
        View::Locks,
        View::Stuck,
        View::Rates,
        View::Overview,
    ] {
        assert!(views.contains(&v), "no runbook opens {v:?}: {views:?}");
    }
    assert!(
        rules.contains("IdemguardDlqGrowing") && rules.contains("`idemguard console --view dlq`")
    );
}
