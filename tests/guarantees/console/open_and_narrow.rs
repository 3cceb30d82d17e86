//! The console opens on the answer an alert or a ticket gives, hands it on, and keeps it readable
//! on a narrow terminal — the real binary in tmux against fresh services:
//! - `console --trace ORDER` shows the order's timeline without a key typed; `--view dlq` opens
//!   on the DLQ; an unknown view exits non-zero naming the views (and the nearest one);
//! - `y` says on the status line what it copied: the traced ID, the selected DLQ message, or —
//!   in a view without an ID — the command that opens the console on it;
//! - every alert's runbook that names the console names a view or a trace it opens;
//! - at 80×24, 100×30 and 200×50 the DLQ, Trace, Locks, Stuck, Audit and Rates views keep the
//!   columns that identify a row and answer the view's question (the rest in the Selected
//!   panel), the tabs keep their names from 100 columns and the footer its help and quit keys.

use crate::common;
use crate::console::fixture as console_fixture;
use crate::support::tmux;

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

/// An empty `--trace` is refused before anything opens (a blank ID traces nothing).
#[test]
fn an_empty_trace_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["console", "--trace", ""])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--trace <ID>"), "{err}");
}

/// Every runbook that sends the engineer to the console says where it opens (`--view V` of a view
/// the console has, or `--trace ID`), and the DLQ's alert opens the DLQ.
#[test]
fn every_runbook_names_the_view_the_console_opens_on() {
    let rules = include_str!("../../../config/prometheus/idemguard.rules.yml");
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

// ---------------------------------------------------------------------------------------------
// Narrow terminals
// ---------------------------------------------------------------------------------------------

const SIZES: [(u16, u16); 3] = [(80, 24), (100, 30), (200, 50)];

/// The header row of the table titled `title`: the line under its title (empty when there is
/// no such table).
fn header_row<'a>(screen: &'a str, title: &str) -> &'a str {
    let mut lines = screen.lines().skip_while(|l| !l.contains(title));
    lines.nth(1).unwrap_or_default()
}

/// Where `header` starts in `row`, in characters.
fn column_at(row: &str, header: &str) -> Option<usize> {
    let at = row.find(header)?;
    Some(row[..at].chars().count())
}

/// The header (tabs) and the footer (keys) at every size: the current view's name, the others'
/// names from 100 columns; help and quit always.
fn assert_frame(screen: &str, (cols, _): (u16, u16), view: &str) {
    let head = screen.lines().next().unwrap_or_default();
    assert!(head.contains(view), "{cols}: {head}");
    if cols >= 100 {
        assert!(
            head.contains("1:Overview") && head.contains("7:DLQ"),
            "{cols}: {head}"
        );
    }
    let foot = status_line(screen);
    assert!(
        foot.contains("<?> help") && foot.contains("<q> quit"),
        "{cols}: {foot}"
    );
}

/// The DLQ at 80×24, 100×30 and 200×50: the order (whole), what the consumer would do NOW and the
/// REASON at every size, REDRIVEN from 100 columns, every column at 200; the Selected panel names
/// the message's event, hidden from the table at 80 and 100.
async fn dlq_view_at_three_sizes(dialect: Dialect) {
    let mut w = world(dialect, 0).await;
    fresh_dlq(&mut w).await;
    let inc = Incident::write(&w).await;
    let unknown_order = format!("20261129{}", common::unique_suffix());
    let reason = "unknown order: no orders row after 3 lookups over 30s (the order service's \
                  outbox may be behind, or the event names an order of another environment)";
    dead_letter(&w, &unknown_order, &inc.event_id, reason).await;
    dead_letter(&w, &inc.order_no, &inc.event_id, "unknown order").await;
    for size in SIZES {
        let t = console(&w, size, " --view dlq");
        let s = t.wait_for("the DLQ's messages", WITHIN, |s| {
            s.contains("2 message(s) in")
                && s.contains(&inc.order_no)
                && s.contains(&unknown_order)
                && status_line(s).contains("<q> quit")
        });
        let row = header_row(&s, " DLQ [");
        for h in ["ORDER", "NOW", "REASON"] {
            assert!(row.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        if size.0 >= 100 {
            assert!(row.contains("REDRIVEN"), "{dialect} {size:?}:\n{s}");
        }
        if size.0 >= 200 {
            for h in ["AGE", "AT", "SOURCE", "EVENT ID", "BY"] {
                assert!(row.contains(h), "{dialect} {size:?} {h}:\n{s}");
            }
        }
        // The event ID: in its column at 200, else in the Selected panel.
        let panel: String = s.lines().skip_while(|l| !l.contains("Selected")).collect();
        let event_shown = row.contains("EVENT ID") || panel.contains(&inc.event_id);
        assert!(event_shown, "{dialect} {size:?}:\n{s}");
        assert_frame(&s, size, "7:DLQ");
        tmux::assert_console_gone(&t.quit_console(WITHIN));
    }
}
per_dialect!(dlq_view_at_three_sizes => dlq_view_at_three_sizes_postgres, dlq_view_at_three_sizes_mysql);

/// The Trace at 80×24, 100×30 and 200×50: TIME, SOURCE, WHAT and STOPPED BY at every size, the
/// LAYER from 100; SOURCE is no wider than its cells need, so WHAT keeps most of the row (at
/// 100 columns it had 25 when SOURCE took 43).
async fn trace_view_at_three_sizes(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    for size in SIZES {
        let t = console(&w, size, &format!(" --trace {}", inc.order_no));
        // The keys are on the bottom line once "tracing order no …" has faded.
        let s = t.wait_for("the order's timeline", WITHIN, |s| {
            s.contains("Timeline, oldest first [23]") && status_line(s).contains("<q> quit")
        });
        let row = header_row(&s, "Timeline, oldest first");
        for h in ["TIME", "SOURCE", "WHAT", "STOPPED BY"] {
            assert!(row.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        if size.0 >= 100 {
            assert!(row.contains("LAYER"), "{dialect} {size:?}:\n{s}");
        }
        let what = column_at(row, "STOPPED BY").unwrap() - column_at(row, "WHAT").unwrap();
        let least = (size.0 as usize) * 35 / 100;
        assert!(
            what >= least,
            "{dialect} {size:?}: WHAT {what} < {least}:\n{s}"
        );
        assert_frame(&s, size, "2:Trace");
        tmux::assert_console_gone(&t.quit_console(WITHIN));
    }
}
per_dialect!(trace_view_at_three_sizes => trace_view_at_three_sizes_postgres, trace_view_at_three_sizes_mysql);

/// Locks and Stuck at 80×24, 100×30 and 200×50: a lock's KEY (whole), whether its OWNER is
/// alive and its PTTL at every size, its FLAGS at 200 (else in the Selected panel); a stuck
/// record's REQUEST ID, AGE and whether its owner is ALIVE at every size, its ORDER at 200 (else
/// in the Selected panel).
async fn locks_and_stuck_at_three_sizes(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let lock_key = idemguard::contracts::keys::request_lock(&inc.stuck_dead);
    for size in SIZES {
        let t = console(&w, size, " --view locks");
        // Whole frames: the flags (in the table or the panel drawn under it) and the keys.
        let s = t.wait_for("the locks", WITHIN, |s| {
            s.contains(&lock_key)
                && s.contains("FLAGS")
                && (s.contains(" held_long") || !s.contains("Selected"))
                && status_line(s).contains("<q> quit")
        });
        let row = header_row(&s, "Locks [");
        for h in ["KEY", "OWNER", "PTTL"] {
            assert!(row.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        // The flags: in their column at 200, else in the Selected panel.
        let flags_shown = row.contains("FLAGS") || s.contains("FLAGS held_long");
        assert!(flags_shown, "{dialect} {size:?}:\n{s}");
        assert_frame(&s, size, "3:Locks");
        t.keys(&["5"]);
        let s = t.wait_for("the stuck records", WITHIN, |s| {
            s.contains(&inc.stuck_dead)
                && s.contains("Stuck records [")
                && (s.contains("ORDER no order") || !s.contains("Selected"))
        });
        let row = header_row(&s, "Stuck records [");
        for h in ["REQUEST ID", "AGE", "ALIVE"] {
            assert!(row.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        let order_shown = row.contains("ORDER") || s.contains("ORDER no order");
        assert!(order_shown, "{dialect} {size:?}:\n{s}");
        tmux::assert_console_gone(&t.quit_console(WITHIN));
    }
}
per_dialect!(locks_and_stuck_at_three_sizes => locks_and_stuck_at_three_sizes_postgres, locks_and_stuck_at_three_sizes_mysql);

/// The Audit at 80×24, 100×30 and 200×50, after a read-only console's refused release: the
/// TARGET (whole), TIME, ACTION and OUTCOME at every size; the DETAIL at 200, else in the
/// Selected panel.
async fn audit_at_three_sizes(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let order_lock = idemguard::contracts::keys::order_lock(&inc.order_no);
    for size in SIZES {
        let t = console(&w, size, " --view locks");
        t.wait_for("the locks", WITHIN, |s| s.contains(&order_lock));
        // Read-only: the attempt is refused, and audited.
        t.keys(&["x"]);
        t.wait_for("the refusal", WITHIN, |s| {
            status_line(s).contains("read-only")
        });
        t.keys(&["6"]);
        let s = t.wait_for("the audited refusal", WITHIN, |s| {
            s.contains("Audit (ops_audit) [")
                && s.contains(&order_lock)
                && (s.contains("DETAIL") || s.contains("no row selected"))
                && status_line(s).contains("<q> quit")
        });
        let row = header_row(&s, "Audit (ops_audit) [");
        for h in ["TIME", "ACTION", "TARGET", "OUTCOME"] {
            assert!(row.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        assert_frame(&s, size, "6:Audit");
        tmux::assert_console_gone(&t.quit_console(WITHIN));
    }
}
per_dialect!(audit_at_three_sizes => audit_at_three_sizes_postgres, audit_at_three_sizes_mysql);

/// The Rates at 80×24, 100×30 and 200×50: the consumer lag's TOPIC, PARTITION and LAG at
/// every size, the interceptions' LAYER, INTERCEPTION and LAST MIN too.
async fn rates_at_three_sizes(dialect: Dialect) {
    let w = world(dialect, 0).await;
    Incident::write(&w).await;
    for size in SIZES {
        let t = console(&w, size, " --view rates");
        let s = t.wait_for("the lag per partition", WITHIN, |s| {
            header_row(s, "Consumer lag per partition").contains("TOPIC")
                && status_line(s).contains("<q> quit")
        });
        let lag = header_row(&s, "Consumer lag per partition");
        for h in ["TOPIC", "PARTITION", "LAG"] {
            assert!(lag.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        let rates = s
            .lines()
            .find(|l| l.contains("INTERCEPTION"))
            .unwrap_or_else(|| panic!("{dialect} {size:?}:\n{s}"));
        for h in ["LAYER", "LAST MIN"] {
            assert!(rates.contains(h), "{dialect} {size:?} {h}:\n{s}");
        }
        assert_frame(&s, size, "4:Rates");
        tmux::assert_console_gone(&t.quit_console(WITHIN));
    }
}
per_dialect!(rates_at_three_sizes => rates_at_three_sizes_postgres, rates_at_three_sizes_mysql);
