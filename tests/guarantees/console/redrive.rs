//! The DLQ view and redrive, against the real broker, the real consumer and both databases:
//! - `idemguard dlq`'s read model lists each DLQ message with what the consumer would do with it
//!   now: a late event (its order created since) would apply, a malformed one is still poison,
//!   one re-published by hand since is already applied;
//! - `redrive --dry-run` writes nothing; a redriven late event is applied once; a second
//!   redrive of the same DLQ message is refused (its ops_audit row is the record);
//! - a redrive of an event already applied changes nothing (no second points row);
//! - a message still poison returns to the DLQ once, its redrive noted, and a redrive of the
//!   returned message is refused: it never loops;
//! - a redrive whose publish fails leaves its audit row at `error`, and may be retried;
//! - a DLQ topic created again: the redrive of the message that held a position before does
//!   not stand for the one that holds it now;
//! - a DLQ message names the consumer that dead-lettered it (`dlq.by.*`: group, instance, host,
//!   version, time) in `dlq --json`, `dlq` and the view; a forged `dlq.*` header of the incoming
//!   message never survives; one dead-lettered without them says so.
//!
//! - `redrive` publishes over TLS with a client certificate, as every Kafka client does in
//!   production (over SASL_SSL, logged in by each of the broker's mechanisms: security::tls).
//!
//! Every test has its own database, topics and consumer group.

use crate::support::tmux;

use std::time::{Duration, Instant};

use crate::common::consumer::*;
use crate::common::*;
use idemguard::console::cli::headless;
use idemguard::console::read::dlq::{DlqMessage, Verdict};
use idemguard::console::read::window::TimeWindow;
use idemguard::contracts::{headers, now_ms, OrderNo, PaymentSucceeded};

/// The DLQ as `idemguard dlq` reads it: the last hour, verdicts looked up.
async fn listing(s: &ConsumerSetup) -> Vec<DlqMessage> {
    let window = TimeWindow {
        from_ms: now_ms() - 3_600_000,
        to_ms: now_ms() + 60_000,
    };
    let d = headless::dlq(&s.config, window).await;
    assert!(d.ok, "every backend answered: {:?}", d.backends);
    d.data.messages
}

/// Waits (bounded) until the DLQ lists `n` messages.
async fn until_listed(s: &ConsumerSetup, n: usize) -> Vec<DlqMessage> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let l = listing(s).await;
        if l.len() >= n {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "the DLQ lists {} of {n}: {l:?}",
            l.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn by_event<'a>(l: &'a [DlqMessage], event_id: &str) -> &'a DlqMessage {
    l.iter()
        .find(|m| m.event_id.as_deref() == Some(event_id))
        .unwrap_or_else(|| panic!("no DLQ message of {event_id}: {l:?}"))
}

/// An order with a given orderNo, CREATED (the order a late event names, arriving after it).
async fn insert_order(s: &ConsumerSetup, order_no: &str, req: &str, user_id: i64) {
    let sql = format!(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES ({}, 1, 1, 1999, 'CREATED', 0, 0)",
        placeholders(s.dialect, 3)
    );
    sqlx::query(&sql)
        .bind(req)
        .bind(order_no)
        .bind(user_id)
        .execute(&s.db.pool)
        .await
        .unwrap();
}

/// `idemguard redrive --dlq P:O --json` (plus `extra`) on the test's database and topics:
/// its exit code and its JSON.
async fn redrive(s: &ConsumerSetup, m: &DlqMessage, extra: &[&str]) -> (i32, serde_json::Value) {
    redrive_at(s, &format!("{}:{}", m.partition, m.offset), extra).await
}

/// `idemguard redrive --dlq POSITION --json` (plus `extra`): its exit code and its JSON.
async fn redrive_at(s: &ConsumerSetup, position: &str, extra: &[&str]) -> (i32, serde_json::Value) {
    redrive_at_with(s, position, extra, &[]).await
}

/// [`redrive_at`] with `env` over the test's settings.
async fn redrive_at_with(
    s: &ConsumerSetup,
    position: &str,
    extra: &[&str],
    env: &[(&str, String)],
) -> (i32, serde_json::Value) {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["--config", config, "redrive", "--dlq", position, "--json"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("IDEMGUARD_DATABASE__URL", &s.config.database.url)
        .env(
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            &s.config.kafka.payment_topic,
        )
        .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &s.config.kafka.dlq_topic)
        .env("IDEMGUARD_KAFKA__CONSUMER_GROUP", &s.group)
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("redrive ends within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "redrive printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    // One message: its result; a dry run: its plans.
    let one = match json.get("results") {
        Some(results) => results[0].clone(),
        None => json,
    };
    (out.status.code().unwrap_or(-1), one)
}

async fn points_of(s: &ConsumerSetup, event_id: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM points_ledger WHERE source_event_no = {}",
        placeholders(s.dialect, 1)
    );
    sqlx::query_scalar(&sql)
        .bind(event_id)
        .fetch_one(&s.db.pool)
        .await
        .unwrap()
}

async fn audit_outcomes(s: &ConsumerSetup, target: &str) -> Vec<String> {
    let sql = format!(
        "SELECT outcome FROM ops_audit WHERE target = {} ORDER BY id",
        placeholders(s.dialect, 1)
    );
    sqlx::query_scalar(&sql)
        .bind(target)
        .fetch_all(&s.db.pool)
        .await
        .unwrap()
}

/// The console's DLQ view in a real terminal (tmux): `:dlq` lists the late event as "would
/// apply"; `/` narrows it to its order; `r` opens the confirmation with its destination and
/// expected outcome (Esc: nothing runs); Enter traces its order.
fn dlq_view_in_a_terminal(config: &idemguard::config::Config, late: &DlqMessage) {
    let mut env = tmux::local_env(config);
    env.push(("IDEMGUARD_KAFKA__DLQ_TOPIC", config.kafka.dlq_topic.clone()));
    let t = tmux::Terminal::console("igr", (220, 40), &env, " --allow-actions");
    let within = Duration::from_secs(30);
    t.wait_for("the console", within, |s| s.contains("idemguard console"));
    t.keys(&[":dlq", "Enter"]);
    // Waits for the rows themselves: a capture can catch a frame still arriving, its summary
    // line drawn and its rows not yet.
    let listed = t.wait_for("the DLQ view's rows", within, |s| {
        s.contains("3 message(s) in") && s.contains("would apply") && s.contains("still poison")
    });
    assert!(listed.contains("7:DLQ"), "{listed}");
    let order_no = late.order_no.clone().unwrap();
    t.keys(&["/"]);
    t.type_line(&order_no);
    t.wait_for("the filtered row", within, |s| {
        s.contains("[1 of 3") && s.contains(&order_no)
    });
    t.keys(&["r"]);
    t.wait_for("the confirmation", within, |s| {
        s.contains("Redrive 1 DLQ message(s)")
            && s.contains("the consumer applies it once")
            && s.contains("redrive.audit_id")
    });
    t.keys(&["Escape"]);
    t.wait_for("the popup closed", within, |s| !s.contains("Redrive 1 DLQ"));
    t.keys(&["Enter"]);
    t.wait_for("the order's trace", within, |s| {
        s.contains("Timeline, oldest first") && s.contains(&order_no)
    });
    let after = t.quit_console(within);
    tmux::assert_console_gone(&after);
}

/// A poison eventId holding markup and a `javascript:` link: the report shows it as text.
const HOSTILE: &str = "<script>x</script>|[l](javascript:1)";

/// The report of the late event's order lists its DLQ message (reason, position, source,
/// redriven, verdict) in its own section — Markdown and HTML — and places it in the timeline.
fn assert_report_lists_the_dlq_message(
    report: &idemguard::console::report::IncidentReport,
    late: &DlqMessage,
    d: idemguard::config::Dialect,
) {
    let listed: Vec<_> = report
        .dlq_messages
        .iter()
        .filter(|m| m.target == late.target)
        .collect();
    assert_eq!(
        listed.len(),
        1,
        "{d}: {:?} (not read: {:?})",
        report.dlq_messages,
        report.errors
    );
    let m = listed[0];
    assert_eq!(
        m.redriven.as_ref().map(|r| r.outcome.as_str()),
        Some("done"),
        "{d}: {m:?}"
    );
    assert!(
        matches!(&m.verdict, Verdict::AlreadyApplied { .. }),
        "{d}: {m:?}"
    );
    let entries = &report.timelines[0].entries;
    let placed: Vec<_> = entries
        .iter()
        .filter(|e| e.summary.starts_with("in the DLQ: unknown order"))
        .collect();
    assert_eq!(placed.len(), 1, "{d}: {entries:?}");
    assert_eq!(placed[0].at_ms, late.timestamp_ms, "{d}");
    let times: Vec<i64> = entries.iter().filter_map(|e| e.at_ms).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{d}: in time order");
    let position = format!("{}@{}", late.partition, late.offset);
    let md = idemguard::console::report::markdown(report);
    let section = md
        .split("## DLQ messages of these orders")
        .nth(1)
        .unwrap_or_else(|| panic!("{d}: no DLQ section:\n{md}"));
    let row = section
        .lines()
        .find(|l| l.contains(&position))
        .unwrap_or_else(|| panic!("{d}: no row of {position}:\n{section}"));
    assert!(
        row.contains("unknown order")
            && row.contains("redriven: done")
            && row.contains("already applied"),
        "{d}: {row}"
    );
    let html = idemguard::console::report::html(report);
    let section = html
        .split("<section id=\"dlq\">")
        .nth(1)
        .unwrap_or_else(|| panic!("{d}: no DLQ section in the HTML"));
    assert!(
        section
            .split("</section>")
            .next()
            .unwrap()
            .contains(&position),
        "{d}: {section}"
    );
}

async fn redrive_once_and_never_loop(s: &ConsumerSetup) {
    let d = s.dialect;
    let mut config = s.config.clone();
    config.kafka.consumer_group = s.group.clone();
    let s = &ConsumerSetup {
        dialect: d,
        config,
        db: s.db.clone(),
        group: s.group.clone(),
    };
    let member = s.start_member().await;
    let p = producer(&s.config);
    let topic = &s.config.kafka.payment_topic;
    // A late event: its order does not exist yet.
    let late_no = OrderNo::generate().to_string();
    let late_req = format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7());
    let late = payment(&late_no, &late_req, 71);
    produce(&p, topic, &late).await;
    // A late event whose order arrives and which is then re-published by hand.
    let again_no = OrderNo::generate().to_string();
    let again_req = format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7());
    let again = payment(&again_no, &again_req, 72);
    produce(&p, topic, &again).await;
    // Poison for good: its eventId is not a UUID.
    let (bad_no, bad_req) = create_order(&s.db, 73).await;
    let mut bad = payment(&bad_no, &bad_req, 73);
    bad.event_id = format!("not-a-uuid-{}", unique_suffix());
    produce(&p, topic, &bad).await;
    member
        .until("3 messages in the DLQ", 60, |st| get(&st.dlq) >= 3)
        .await;

    insert_order(s, &late_no, &late_req, 71).await;
    insert_order(s, &again_no, &again_req, 72).await;
    produce(&p, topic, &again).await;
    member.until_applied(1, 60).await;
    assert_eq!(points_of(s, &again.event_id).await, 1, "{d}");

    let l = until_listed(s, 3).await;
    let (late_m, again_m, bad_m) = (
        by_event(&l, &late.event_id).clone(),
        by_event(&l, &again.event_id).clone(),
        by_event(&l, &bad.event_id).clone(),
    );
    assert_eq!(late_m.verdict, Verdict::WouldApply, "{d}: {late_m:?}");
    assert!(late_m.reason.contains("unknown order"), "{d}: {late_m:?}");
    assert_eq!(late_m.source.as_ref().unwrap().topic, *topic, "{d}");
    assert!(
        matches!(&again_m.verdict, Verdict::AlreadyApplied { .. }),
        "{d}: {again_m:?}"
    );
    assert!(
        matches!(
            &bad_m.verdict,
            Verdict::StillPoison {
                same_reason: true,
                ..
            }
        ),
        "{d}: {bad_m:?}"
    );
    assert!(l.iter().all(|m| m.redriven.is_none()), "{d}: {l:?}");
    let target = late_m.target.clone();

    // --dry-run: the verdict, and nothing written.
    let (code, plan) = redrive(s, &late_m, &["--dry-run"]).await;
    assert_eq!(code, 0, "{d}: {plan}");
    assert_eq!(
        plan[0]["message"]["verdict"]["verdict"], "would_apply",
        "{d}: {plan}"
    );
    assert!(audit_outcomes(s, &target).await.is_empty(), "{d}");

    // The TUI: the same listing, the confirmation cancelled, nothing written.
    let (c, m) = (s.config.clone(), late_m.clone());
    tokio::task::spawn_blocking(move || dlq_view_in_a_terminal(&c, &m))
        .await
        .unwrap();
    assert!(audit_outcomes(s, &target).await.is_empty(), "{d}");

    // Without --allow-actions: refused, audited.
    let (code, r) = redrive(s, &late_m, &[]).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (4, Some("refused")),
        "{d}: {r}"
    );

    // The late event, redriven: applied once.
    let (code, r) = redrive(
        s,
        &late_m,
        &["--allow-actions", "--reason", "order arrived late"],
    )
    .await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    member.until_applied(2, 60).await;
    assert_eq!(points_of(s, &late.event_id).await, 1, "{d}");
    // A second redrive of the same DLQ message: refused, nothing published.
    let (code, r) = redrive(s, &late_m, &["--allow-actions"]).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (4, Some("refused")),
        "{d}: {r}"
    );
    assert!(
        r["detail"].as_str().unwrap().contains("already redriven"),
        "{d}: {r}"
    );
    assert_eq!(
        audit_outcomes(s, &target).await,
        ["refused", "done", "refused"],
        "{d}"
    );
    // `report --id ORDER` lists the redrives of its event (their audit rows name the order).
    use idemguard::console::report::{build, ReportScope};
    let scope = ReportScope::Id(idemguard::contracts::TraceTarget::classify(&late_no));
    let report = build(&s.config, &scope).await.unwrap();
    let redrives: Vec<_> = report
        .operator_actions
        .iter()
        .filter(|a| a.action == "redrive")
        .map(|a| a.outcome.as_str())
        .collect();
    // (The read-only refusal read nothing, so it names no order.)
    assert_eq!(
        redrives,
        ["done", "refused"],
        "{d}: {:?}",
        report.operator_actions
    );
    // ... and its DLQ message in a section of its own, redriven, and in the order's timeline.
    assert_report_lists_the_dlq_message(&report, &late_m, d);

    // Already applied: the redrive publishes, the consumer drops it, nothing changes.
    let hits = member.get(|st| &st.dedup_hits);
    let (code, r) = redrive(s, &again_m, &["--allow-actions"]).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    member
        .until("the redriven copy dropped", 60, |st| {
            get(&st.dedup_hits) > hits
        })
        .await;
    assert_eq!(points_of(s, &again.event_id).await, 1, "{d}");
    assert_eq!(member.get(|st| &st.applied), 2, "{d}");

    // Still poison: back in the DLQ once, noted; its return is not redriven again.
    let (code, r) = redrive(s, &bad_m, &["--allow-actions"]).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    let audit_id = r["audit_id"].as_i64().unwrap();
    member
        .until("the poison back in the DLQ", 60, |st| get(&st.dlq) >= 4)
        .await;
    let l = until_listed(s, 4).await;
    let back = l
        .iter()
        .find(|m| m.returned_from.is_some())
        .unwrap_or_else(|| panic!("{d}: no returned message: {l:?}"))
        .clone();
    let mark = back.returned_from.as_ref().unwrap();
    assert_eq!(
        (mark.audit_id, mark.dlq_partition, mark.dlq_offset),
        (audit_id, bad_m.partition, bad_m.offset),
        "{d}"
    );
    assert!(
        back.reason.contains("still poison after its redrive"),
        "{d}: {back:?}"
    );
    let (code, r) = redrive(s, &back, &["--allow-actions"]).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (4, Some("refused")),
        "{d}: {r}"
    );
    assert!(
        r["detail"].as_str().unwrap().contains("not redriven again"),
        "{d}: {r}"
    );
    let l = listing(s).await;
    assert_eq!(l.len(), 4, "{d}: exactly one return: {l:?}");
    let shown = by_event(&l, &late.event_id);
    assert_eq!(
        shown.redriven.as_ref().map(|r| r.outcome.as_str()),
        Some("done"),
        "{d}: {shown:?}"
    );
    // The poison's order, and a second poison of it whose eventId holds markup: its report
    // lists its three DLQ messages, every string of them neutralised.
    let mut hostile = payment(&bad_no, &bad_req, 73);
    hostile.event_id = format!("not-a-uuid-{}{HOSTILE}", unique_suffix());
    produce(&p, topic, &hostile).await;
    member
        .until("the hostile poison in the DLQ", 60, |st| get(&st.dlq) >= 5)
        .await;
    until_listed(s, 5).await;
    let scope = ReportScope::Id(idemguard::contracts::TraceTarget::classify(&bad_no));
    let report = build(&s.config, &scope).await.unwrap();
    assert_eq!(
        report.dlq_messages.len(),
        3,
        "{d}: {:?} (not read: {:?})",
        report.dlq_messages,
        report.errors
    );
    let md = idemguard::console::report::markdown(&report);
    let html = idemguard::console::report::html(&report);
    for raw in [HOSTILE, "<script>x"] {
        assert!(!md.contains(raw), "{d}: {raw} raw in the Markdown:\n{md}");
        assert!(!html.contains(raw), "{d}: {raw} raw in the HTML");
    }
    // Shown as text: neutralised, not dropped.
    assert!(md.contains("\\<script\\>x"), "{d}:\n{md}");
    assert!(md.contains("\\[l\\](javascript:1)"), "{d}:\n{md}");
    assert!(html.contains("&lt;script&gt;x"), "{d}");
    assert!(md.contains("returned from the redrive of"), "{d}:\n{md}");
    let stats = member.stop().await;
    assert_eq!(get(&stats.dlq), 5, "{d}: {stats:?}");
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] redrive_once_and_never_loop(&consumer_setup) => redrive_postgres, redrive_mysql);

/// A bulk redrive of every message with one reason, interrupted (SIGINT) after its first
/// progress line: it stops between messages, and `ops_audit` holds exactly the messages it
/// published — each `done`, none left at `attempt` — and nothing of the ones it never started.
async fn bulk_redrive_interrupted_audits_what_it_published(s: &ConsumerSetup) {
    use tokio::io::AsyncBufReadExt;
    let d = s.dialect;
    let member = s.start_member().await;
    let p = producer(&s.config);
    const N: u64 = 20;
    for i in 0..N {
        let order_no = OrderNo::generate().to_string();
        let req = format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7());
        produce(
            &p,
            &s.config.kafka.payment_topic,
            &payment(&order_no, &req, 80 + i as i64),
        )
        .await;
    }
    member
        .until("every late event in the DLQ", 60, |st| get(&st.dlq) >= N)
        .await;
    until_listed(s, N as usize).await;

    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            config,
            "redrive",
            "--all-with-reason",
            "unknown order",
        ])
        .args(["--allow-actions", "--json"])
        .env("IDEMGUARD_DATABASE__URL", &s.config.database.url)
        .env(
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            &s.config.kafka.payment_topic,
        )
        .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &s.config.kafka.dlq_topic)
        .env("IDEMGUARD_KAFKA__CONSUMER_GROUP", &s.group)
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.starts_with("[1/") {
                return l;
            }
        }
        panic!("redrive ended before its first message");
    })
    .await
    .expect("a first progress line within 60 s");
    assert!(
        first.contains(&format!("[1/{N}]")) && first.contains(" done:"),
        "{d}: {first}"
    );
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    assert!(kill.unwrap().success());
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("redrive stops within 60 s of Ctrl-C")
        .unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["cancelled"], true, "{d}: {summary}");
    assert_eq!(out.status.code(), Some(130), "{d}: {summary}");
    let done = summary["done"].as_u64().unwrap();
    let not_attempted = summary["not_attempted"].as_u64().unwrap();
    assert!(
        done >= 1 && not_attempted >= 1,
        "{d}: stopped midway: {summary}"
    );
    assert_eq!(done + not_attempted, N, "{d}: {summary}");
    let sql = "SELECT outcome FROM ops_audit WHERE action = 'redrive' ORDER BY id";
    let rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(&s.db.pool).await.unwrap();
    assert_eq!(
        rows,
        vec!["done"; done as usize],
        "{d}: exactly what it published"
    );
    member
        .until("each published message back in the DLQ", 60, |st| {
            get(&st.dlq) >= N + done
        })
        .await;
    member.stop().await;
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] bulk_redrive_interrupted_audits_what_it_published(&consumer_setup) => bulk_redrive_postgres, bulk_redrive_mysql);

/// The console's bulk redrive in a real terminal (tmux): `/unknown order` then `T` tags the whole
/// reason, `r` confirms all of them (the phrase typed), the TUI shows "n of N" as they run
/// through the CLI's executor, Esc stops it between messages, and its summary says what ran.
/// `ops_audit` then holds exactly the messages it published — each `done` — and nothing of the
/// ones it never started.
async fn tui_bulk_redrive_stopped_audits_what_it_published(s: &ConsumerSetup) {
    let d = s.dialect;
    let mut config = s.config.clone();
    config.kafka.consumer_group = s.group.clone();
    let member = s.start_member().await;
    let p = producer(&config);
    const N: usize = 20;
    for i in 0..N {
        let order_no = OrderNo::generate().to_string();
        let req = format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7());
        produce(
            &p,
            &config.kafka.payment_topic,
            &payment(&order_no, &req, 90 + i as i64),
        )
        .await;
    }
    member
        .until("every late event in the DLQ", 60, |st| {
            get(&st.dlq) >= N as u64
        })
        .await;
    until_listed(s, N).await;

    let c = config.clone();
    let summary = tokio::task::spawn_blocking(move || bulk_redrive_in_a_terminal(&c, N))
        .await
        .unwrap();
    let counts = |word: &str| -> usize {
        let before = summary.split(word).next().unwrap_or("");
        let n = before
            .trim_end()
            .rsplit([' ', '—', ','])
            .next()
            .unwrap_or("");
        n.parse()
            .unwrap_or_else(|_| panic!("{d}: no count before {word:?}: {summary}"))
    };
    let (published, not_attempted) = (counts(" published"), counts(" not attempted"));
    assert!(
        published >= 1 && not_attempted >= 1,
        "{d}: stopped midway: {summary}"
    );
    assert_eq!(published + not_attempted, N, "{d}: {summary}");
    let sql = "SELECT outcome FROM ops_audit WHERE action = 'redrive' ORDER BY id";
    let rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(&s.db.pool).await.unwrap();
    assert_eq!(
        rows,
        vec!["done"; published],
        "{d}: exactly what it published"
    );
    member
        .until("each published message back in the DLQ", 60, |st| {
            get(&st.dlq) >= (N + published) as u64
        })
        .await;
    member.stop().await;
}

/// Drives the bulk redrive in the console; the summary line it ends with.
fn bulk_redrive_in_a_terminal(config: &idemguard::config::Config, n: usize) -> String {
    let mut env = tmux::local_env(config);
    env.push(("IDEMGUARD_KAFKA__DLQ_TOPIC", config.kafka.dlq_topic.clone()));
    env.push(("IDEMGUARD_TRACE__ENABLED", "false".into()));
    let t = tmux::Terminal::console("igb", (220, 50), &env, " --allow-actions");
    let within = Duration::from_secs(30);
    t.wait_for("the console", within, |s| s.contains("idemguard console"));
    t.keys(&[":dlq", "Enter"]);
    t.wait_for("the DLQ view", within, |s| {
        s.contains(&format!("{n} message(s) in"))
    });
    t.keys(&["/"]);
    t.type_line("unknown order");
    t.keys(&["T"]);
    t.wait_for("the reason tagged", within, |s| {
        s.contains(&format!("{n} row(s) tagged"))
    });
    t.keys(&["r"]);
    t.wait_for("the confirmation", within, |s| {
        s.contains(&format!("Redrive {n} DLQ message(s)"))
            && (s.contains("the consumer applies it once") || s.contains("still poison"))
    });
    t.type_line(&format!("redrive {n} in local"));
    let running = t.wait_for(
        "the first message's progress",
        Duration::from_secs(60),
        |s| s.contains(&format!("redrive 1 of {n}: 1 published")),
    );
    assert!(running.contains("Esc stops between actions"), "{running}");
    t.keys(&["Escape"]);
    let ended = t.wait_for("the summary", Duration::from_secs(60), |s| {
        s.contains("stopped (Esc) after")
    });
    let summary = ended
        .lines()
        .find(|l| l.contains("stopped (Esc) after"))
        .unwrap()
        .to_string();
    let after = t.quit_console(within);
    tmux::assert_console_gone(&after);
    summary
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] tui_bulk_redrive_stopped_audits_what_it_published(&consumer_setup) => tui_bulk_redrive_postgres, tui_bulk_redrive_mysql);

/// A message in the test's DLQ as the consumer writes one: `e`'s key, body and ID headers, the
/// reason, and a source position on `source_topic`. Its DLQ position.
async fn put_in_dlq(s: &ConsumerSetup, e: &PaymentSucceeded, source_topic: &str) -> (i32, i64) {
    put_in_dlq_on(s, e, source_topic, None, &[]).await
}

/// [`put_in_dlq`] on the DLQ's `partition` when one is named, else where its key hashes; each
/// of `headers_over` replaces the header of its name, or is added.
async fn put_in_dlq_on(
    s: &ConsumerSetup,
    e: &PaymentSucceeded,
    source_topic: &str,
    partition: Option<i32>,
    headers_over: &[(&str, &str)],
) -> (i32, i64) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;
    let body = serde_json::to_vec(e).unwrap();
    let dlq_id = format!("dlq-{}", unique_suffix());
    let mut all = vec![
        (headers::EVENT_ID, e.event_id.as_str()),
        (headers::REQUEST_ID, e.request_id.as_str()),
        (headers::ORDER_NO, e.order_no.as_str()),
        ("dlq.id", &dlq_id),
        ("dlq.reason", "unknown order"),
        ("dlq.source.topic", source_topic),
        ("dlq.source.partition", "5"),
        ("dlq.source.offset", "0"),
    ];
    for &(key, value) in headers_over {
        match all.iter_mut().find(|(k, _)| *k == key) {
            Some(h) => h.1 = value,
            None => all.push((key, value)),
        }
    }
    let mut h = OwnedHeaders::new();
    for (key, value) in all {
        h = h.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    let mut record = FutureRecord::to(&s.config.kafka.dlq_topic)
        .key(&e.order_no)
        .payload(&body)
        .headers(h);
    if let Some(p) = partition {
        record = record.partition(p);
    }
    let sent = producer(&s.config)
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    (sent.partition, sent.offset)
}

/// A redrive whose publish fails: its DLQ message names a partition of the payment topic the
/// broker does not have (the topic was recreated smaller since the message was refused). The
/// publish fails; the audit row, written first, says `error` and why; that row does not count as
/// a redrive, so once the topic has the partition again the same redrive runs again and
/// publishes — with that second row's id in its headers — and a third is refused.
async fn a_failed_publish_says_error_and_may_be_retried(s: &ConsumerSetup) {
    let d = s.dialect;
    // The payment topic has 3 partitions (0-2); the message names partition 5.
    let source = s.config.kafka.payment_topic.clone();
    let (order_no, req) = create_order(&s.db, 90).await;
    let event = payment(&order_no, &req, 90);
    let (partition, offset) = put_in_dlq(s, &event, &source).await;
    let position = format!("{partition}:{offset}");
    let target =
        idemguard::stream::redrive::audit_target(&s.config.kafka.dlq_topic, partition, offset);

    let (code, r) = redrive_at(s, &position, &["--allow-actions"]).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (1, Some("error")),
        "{d}: {r}"
    );
    let detail = r["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("the publish to {source} failed"))
            && detail.contains("may be retried"),
        "{d}: {r}"
    );
    assert_eq!(audit_outcomes(s, &target).await, ["error"], "{d}");

    grow_to_partitions(&s.config, &source, 6).await;
    let (code, r) = redrive_at(s, &position, &["--allow-actions"]).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    let retry_id = r["audit_id"].as_i64().unwrap();
    let (code, r) = redrive_at(s, &position, &["--allow-actions"]).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (4, Some("refused")),
        "{d}: {r}"
    );
    assert_eq!(
        audit_outcomes(s, &target).await,
        ["error", "done", "refused"],
        "{d}"
    );

    // The one copy published: on the source topic, naming the retry's audit row.
    let config = s.config.clone();
    let copies = tokio::task::spawn_blocking(move || redriven_copies(&config, &source, 6));
    let copies = copies.await.unwrap();
    assert_eq!(copies, [(5, event.event_id.clone(), retry_id)], "{d}");
}

/// `topic` grown to `partitions`, as a team that adds partitions does.
async fn grow_to_partitions(config: &idemguard::config::Config, topic: &str, partitions: usize) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let grown = NewPartitions::new(topic, partitions);
    for r in admin.create_partitions([&grown], &opts).await.unwrap() {
        r.unwrap_or_else(|(t, e)| panic!("cannot grow {t} to {partitions} partitions: {e}"));
    }
}

/// `topic` deleted and created again with `partitions`, as a team that resets a topic does.
async fn recreate_with_partitions(
    config: &idemguard::config::Config,
    topic: &str,
    partitions: i32,
) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    assert!(idemguard::console::read::topics::readers_closed(
        Duration::from_secs(10)
    ));
    for r in admin.delete_topics(&[topic], &opts).await.unwrap() {
        r.unwrap_or_else(|(t, e)| panic!("cannot delete {t}: {e}"));
    }
    let again = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for r in admin.create_topics(&[again], &opts).await.unwrap() {
        r.unwrap_or_else(|(t, e)| {
            panic!("cannot create {t} again with {partitions} partitions: {e}")
        });
    }
}

/// Every message on `topic` (of `partitions`), as many as its watermarks say it holds: its
/// partition, its eventId header and its `redrive.audit_id` header (-1 unless there is exactly
/// one).
fn redriven_copies(
    config: &idemguard::config::Config,
    topic: &str,
    partitions: i32,
) -> Vec<(i32, String, i64)> {
    use idemguard::stream::redrive::{header_text, AUDIT_ID};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Headers;
    use rdkafka::{Message, Offset, TopicPartitionList};
    let consumer: BaseConsumer = idemguard::kafka_client::client_config(&config.kafka)
        .set("group.id", format!("igt-reader-{}", unique_suffix()))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let (mut tpl, mut held) = (TopicPartitionList::new(), 0);
    for p in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .unwrap();
        held += high - low;
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut copies = Vec::new();
    while (copies.len() as i64) < held {
        assert!(
            Instant::now() < deadline,
            "{topic}: {copies:?} of {held} within 30 s"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            let marks = m
                .headers()
                .map_or(0, |h| h.iter().filter(|h| h.key == AUDIT_ID).count());
            let audit_id = header_text(&m, AUDIT_ID)
                .and_then(|a| a.parse().ok())
                .filter(|_| marks == 1);
            copies.push((
                m.partition(),
                header_text(&m, headers::EVENT_ID).unwrap_or_default(),
                audit_id.unwrap_or(-1),
            ));
        }
    }
    copies
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] a_failed_publish_says_error_and_may_be_retried(&consumer_setup) => failed_publish_postgres, failed_publish_mysql);

/// A DLQ message is data anyone who can write to the DLQ may have written: its headers never
/// decide where idemguard writes. Messages naming the trace topic and a topic that does not
/// exist are refused, with the reason, and that topic is not created; a forged
/// `redrive.audit_id` on a message that may be redriven is dropped: the one copy carries the
/// redrive's own audit row.
async fn a_redrive_writes_only_to_the_payment_topic(s: &ConsumerSetup) {
    let d = s.dialect;
    let (order_no, req) = create_order(&s.db, 92).await;
    let missing = format!("{}.elsewhere", s.config.kafka.payment_topic);
    for source in [s.config.kafka.trace_topic.as_str(), missing.as_str()] {
        let event = payment(&order_no, &req, 92);
        let (p, o) = put_in_dlq(s, &event, source).await;
        // Every face's SOURCE cell (the DLQ view, `dlq`, `redrive --dry-run`) names the topic.
        let listed = until_listed(s, 1).await;
        let cells = idemguard::console::columns::dlq_cells(by_event(&listed, &event.event_id), 0);
        assert_eq!(cells[2], format!("5@0 {source}"), "{d}");
        let (code, r) = redrive_at(s, &format!("{p}:{o}"), &["--allow-actions"]).await;
        assert_eq!(
            (code, r["outcome"].as_str()),
            (4, Some("refused")),
            "{d}: {source}: {r}"
        );
        let payment_topic = &s.config.kafka.payment_topic;
        assert!(
            r["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("not the payment topic {payment_topic}")),
            "{d}: {r}"
        );
    }
    let config = s.config.clone();
    let (topic, asked) = (missing.clone(), missing.clone());
    let exists = tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = idemguard::kafka_client::client_config(&config.kafka)
            .set("allow.auto.create.topics", "false")
            .create()
            .unwrap();
        let md = c
            .fetch_metadata(Some(&asked), Duration::from_secs(10))
            .unwrap();
        md.topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none())
    });
    assert!(
        !exists.await.unwrap(),
        "{d}: the refused redrive created {missing}"
    );

    let event = payment(&order_no, &req, 92);
    let forged = [
        ("dlq.source.partition", "1"),
        ("redrive.audit_id", "424242"),
    ];
    let source = s.config.kafka.payment_topic.clone();
    let (p, o) = put_in_dlq_on(s, &event, &source, None, &forged).await;
    let (code, r) = redrive_at(s, &format!("{p}:{o}"), &["--allow-actions"]).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    let audit_id = r["audit_id"].as_i64().unwrap();
    let config = s.config.clone();
    let copies = tokio::task::spawn_blocking(move || redriven_copies(&config, &source, 3));
    assert_eq!(
        copies.await.unwrap(),
        [(1, event.event_id.clone(), audit_id)],
        "{d}: one copy, its own audit row alone"
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] a_redrive_writes_only_to_the_payment_topic(&consumer_setup) => redrive_only_to_the_payment_topic_postgres, redrive_only_to_the_payment_topic_mysql);

/// Every Kafka client of a production deployment connects over TLS with a client certificate:
/// `idemguard redrive`, the writer, on the stack's mutual-TLS listener (9093, which takes no
/// other client) reads the DLQ message and publishes it once to the payment topic, with its
/// audit row's id.
async fn a_redrive_publishes_over_tls_with_a_client_certificate(s: &ConsumerSetup) {
    let d = s.dialect;
    let (order_no, req) = create_order(&s.db, 94).await;
    let event = payment(&order_no, &req, 94);
    let source = s.config.kafka.payment_topic.clone();
    let in_partition_1 = [("dlq.source.partition", "1")];
    let (p, o) = put_in_dlq_on(s, &event, &source, None, &in_partition_1).await;

    let mut tls = s.config.clone();
    kafka_over_mutual_tls(&mut tls.kafka);
    let k = &tls.kafka;
    let env = [
        (
            "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
            k.bootstrap_servers.clone(),
        ),
        (
            "IDEMGUARD_KAFKA__SECURITY_PROTOCOL",
            k.security_protocol.as_str().into(),
        ),
        ("IDEMGUARD_KAFKA__SSL_CA_FILE", k.ssl_ca_file.clone()),
        ("IDEMGUARD_KAFKA__SSL_CERT_FILE", k.ssl_cert_file.clone()),
        ("IDEMGUARD_KAFKA__SSL_KEY_FILE", k.ssl_key_file.clone()),
    ];
    let (code, r) = redrive_at_with(s, &format!("{p}:{o}"), &["--allow-actions"], &env).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    let audit_id = r["audit_id"].as_i64().unwrap();
    let target = idemguard::stream::redrive::audit_target(&s.config.kafka.dlq_topic, p, o);
    assert_eq!(audit_outcomes(s, &target).await, ["done"], "{d}: {r}");
    let copies = tokio::task::spawn_blocking(move || redriven_copies(&tls, &source, 3));
    assert_eq!(
        copies.await.unwrap(),
        [(1, event.event_id.clone(), audit_id)],
        "{d}: one copy on the payment topic, read over the same listener"
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] a_redrive_publishes_over_tls_with_a_client_certificate(&consumer_setup) => redrive_over_tls_postgres, redrive_over_tls_mysql);

/// A DLQ topic deleted and created again (a broker rebuilt, a topic reset) hands its positions
/// to new messages: the redrive of the message that held a position before does not stand for
/// the one that holds it now. The new message lists as not redriven, its redrive publishes, and
/// a second redrive of it is refused.
async fn a_recreated_dlq_does_not_inherit_redrives(s: &ConsumerSetup) {
    let d = s.dialect;
    // The payment topic, with the partition 5 that `put_in_dlq` names.
    let source = s.config.kafka.payment_topic.clone();
    grow_to_partitions(&s.config, &source, 6).await;
    let (first_no, first_req) = create_order(&s.db, 91).await;
    let (partition, offset) = put_in_dlq(s, &payment(&first_no, &first_req, 91), &source).await;
    let position = format!("{partition}:{offset}");
    let (code, r) = redrive_at(s, &position, &["--allow-actions"]).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");

    recreate_with_partitions(&s.config, &s.config.kafka.dlq_topic, 3).await;
    let (next_no, next_req) = create_order(&s.db, 92).await;
    let next = payment(&next_no, &next_req, 92);
    let at = put_in_dlq_on(s, &next, &source, Some(partition), &[]).await;
    assert_eq!(
        at,
        (partition, offset),
        "{d}: the new message holds the old position"
    );
    let listed = until_listed(s, 1).await;
    let m = by_event(&listed, &next.event_id);
    assert_eq!(m.redriven, None, "{d}: {m:?}");
    assert_eq!(m.verdict, Verdict::WouldApply, "{d}: {m:?}");

    let (code, r) = redrive_at(s, &position, &["--allow-actions"]).await;
    assert_eq!((code, r["outcome"].as_str()), (0, Some("done")), "{d}: {r}");
    let listed = listing(s).await;
    let redriven = by_event(&listed, &next.event_id).redriven.clone();
    assert_eq!(
        redriven.map(|r| (r.audit_id, r.outcome)),
        Some((r["audit_id"].as_i64().unwrap(), "done".to_string())),
        "{d}"
    );
    let (code, r) = redrive_at(s, &position, &["--allow-actions"]).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (4, Some("refused")),
        "{d}: {r}"
    );
    let target =
        idemguard::stream::redrive::audit_target(&s.config.kafka.dlq_topic, partition, offset);
    assert_eq!(
        audit_outcomes(s, &target).await,
        ["done", "done", "refused"],
        "{d}"
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] a_recreated_dlq_does_not_inherit_redrives(&consumer_setup) => recreated_dlq_postgres, recreated_dlq_mysql);

// ---------------------------------------------------------------------------------------------
// Who dead-lettered a message
// ---------------------------------------------------------------------------------------------

/// A consumer of the test's group whose instance id the test chose: its `dlq.by.instance`.
fn consumer_named(s: &ConsumerSetup, instance: &str) -> Member {
    use idemguard::contracts::Instance;
    use idemguard::stream::{ConsumeOptions, PaymentConsumer};
    use idemguard::trace::Tracer;
    let me = Instance {
        id: instance.to_string(),
        ..Instance::current()
    };
    let options = ConsumeOptions {
        group: Some(s.group.clone()),
        ..Default::default()
    };
    let consumer =
        PaymentConsumer::new(&s.config, s.db.clone(), Tracer::log_only(&me), options).unwrap();
    let stats = consumer.stats();
    let stop = tokio_util::sync::CancellationToken::new();
    let handle = tokio::spawn(consumer.run(stop.clone()));
    Member {
        stop,
        stats,
        handle,
    }
}

/// `idemguard dlq` (plus `args`) on the test's database and DLQ: its exit code and stdout.
fn dlq_command(s: &ConsumerSetup, args: &[&str]) -> (Option<i32>, String) {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["--config", config, "dlq"])
        .args(args)
        .env("IDEMGUARD_DATABASE__URL", &s.config.database.url)
        .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &s.config.kafka.dlq_topic)
        .env("IDEMGUARD_KAFKA__CONSUMER_GROUP", &s.group)
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A poison event carrying forged `dlq.*` headers (another consumer named as its
/// dead-letterer, a reason of the producer's making) reaches the DLQ with this consumer's
/// `dlq.by.*` headers — group, instance, host, version, time — once each, and nothing forged;
/// `dlq --json`, `dlq`'s text and the console's DLQ view name that consumer. A message
/// dead-lettered by an older idemguard (no `dlq.by.*`) says so.
async fn the_dlq_names_the_consumer_that_dead_lettered_a_message(s: &ConsumerSetup) {
    use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
    use rdkafka::producer::FutureRecord;
    let d = s.dialect;
    // Dead-lettered by an idemguard older than the headers: put there first, so it is the
    // older of the two.
    let (old_no, old_req) = create_order(&s.db, 81).await;
    let old = payment(&old_no, &old_req, 81);
    put_in_dlq(s, &old, &s.config.kafka.payment_topic).await;

    let unknown = payment(
        &OrderNo::generate().to_string(),
        "APP:ORDER:20261130:by",
        82,
    );
    let forged = [
        (headers::EVENT_ID, unknown.event_id.as_str()),
        ("dlq.by.instance", "forged-instance"),
        ("dlq.by.group", "forged-group"),
        ("dlq.by.at_ms", "1"),
        ("dlq.reason", "forged reason"),
        ("dlq.source.offset", "999"),
    ];
    let mut hs = OwnedHeaders::new();
    for (key, value) in forged {
        hs = hs.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    let body = serde_json::to_vec(&unknown).unwrap();
    producer(&s.config)
        .send(
            FutureRecord::to(&s.config.kafka.payment_topic)
                .key(&unknown.order_no)
                .payload(&body)
                .headers(hs),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    let instance = format!("igt-by-{}", unique_suffix());
    let before = now_ms();
    let member = consumer_named(s, &instance);
    member
        .until("the poison in the DLQ", 60, |st| get(&st.dlq) >= 1)
        .await;
    member.stop.cancel();
    let _ = member.handle.await;

    // The read model.
    let l = until_listed(s, 2).await;
    let m = by_event(&l, &unknown.event_id);
    let host = hostname::get().unwrap().into_string().unwrap();
    let by = m.dead_lettered_by.clone().expect("dlq.by headers");
    assert_eq!(
        (
            by.group.as_deref(),
            by.instance.as_deref(),
            by.host.as_deref()
        ),
        (
            Some(s.group.as_str()),
            Some(instance.as_str()),
            Some(host.as_str())
        ),
        "{d}: {m:?}"
    );
    assert_eq!(
        by.version.as_deref(),
        Some(env!("CARGO_PKG_VERSION")),
        "{d}"
    );
    let at = by.at_ms.unwrap();
    assert!(
        at >= before && at <= now_ms(),
        "{d}: at {at}, before {before}"
    );
    assert!(m.reason.starts_with("unknown order"), "{d}: {m:?}");
    assert_eq!(by_event(&l, &old.event_id).dead_lettered_by, None, "{d}");

    // The DLQ message itself: every `dlq.*` header once, none forged.
    let (c, (p, o)) = (s.config.clone(), (m.partition, m.offset));
    let entry =
        tokio::task::spawn_blocking(move || idemguard::stream::redrive::read_entry(&c, p, o))
            .await
            .unwrap()
            .unwrap()
            .expect("the DLQ message");
    let hs = entry.message.headers().unwrap();
    let names: Vec<&str> = hs.iter().map(|h| h.key).collect();
    for name in [
        "dlq.by.group",
        "dlq.by.instance",
        "dlq.by.host",
        "dlq.by.version",
        "dlq.by.at_ms",
        "dlq.reason",
        "dlq.source.offset",
    ] {
        let n = names.iter().filter(|k| **k == name).count();
        assert_eq!(n, 1, "{d}: {name} ×{n} in {names:?}");
    }
    let forged_left = hs
        .iter()
        .filter(|h| {
            h.value
                .is_some_and(|v| v.starts_with(b"forged") || v == b"999")
        })
        .count();
    assert_eq!(forged_left, 0, "{d}: a forged header survived: {names:?}");
    assert!(names.contains(&headers::EVENT_ID), "{d}: {names:?}");

    // `dlq --json` and `dlq`.
    let (code, out) = dlq_command(s, &["--json"]);
    assert_eq!(code, Some(0), "{d}: {out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let messages = doc["data"]["messages"].as_array().unwrap();
    let of = |id: &str| {
        messages
            .iter()
            .find(|m| m["event_id"] == id)
            .unwrap_or_else(|| panic!("{d}: {id} not in {doc}"))
    };
    let json_by = &of(&unknown.event_id)["dead_lettered_by"];
    assert_eq!(json_by["instance"], instance.as_str(), "{d}: {json_by}");
    assert_eq!(json_by["group"], s.group.as_str(), "{d}: {json_by}");
    assert_eq!(json_by["host"], host.as_str(), "{d}: {json_by}");
    assert_eq!(json_by["version"], env!("CARGO_PKG_VERSION"), "{d}");
    assert_eq!(json_by["at_ms"], at, "{d}: {json_by}");
    assert!(of(&old.event_id)["dead_lettered_by"].is_null(), "{d}");
    let (code, text) = dlq_command(s, &[]);
    assert_eq!(code, Some(0), "{d}: {text}");
    let who = format!(
        "{}@{}  instance {instance} · host {host} · group {} · idemguard {}",
        m.partition,
        m.offset,
        s.group,
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&who), "{d}: {who}\n{text}");
    assert!(text.contains("unknown (no dlq.by headers)"), "{d}: {text}");
    assert!(!text.contains("forged"), "{d}: {text}");

    dlq_view_names_who(s, &instance, &host).await;
}

/// The console's DLQ view at 100 columns, by the real collectors: the newest message selected,
/// its Selected pane names the consumer; the older one says it is not known.
async fn dlq_view_names_who(s: &ConsumerSetup, instance: &str, host: &str) {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use idemguard::console::tui::{app::App, backend::Backends, ui};
    let mut config = s.config.clone();
    config.kafka.consumer_group = s.group.clone();
    let mut backends = Backends::spawn(&config);
    let mut app = App::new(&config, Some(backends.focus.clone()));
    app.attach_executor(backends.spawn_executor(&config, false));
    let key = |app: &mut App, c: KeyCode| app.handle_key(KeyEvent::new(c, KeyModifiers::NONE));
    key(&mut app, KeyCode::Char('7'));
    let deadline = Instant::now() + Duration::from_secs(40);
    while !matches!(&app.stores.dlq, Some(Ok(l)) if l.messages.len() >= 2) {
        assert!(Instant::now() < deadline, "the DLQ view was not read");
        if let Ok(Some(u)) =
            tokio::time::timeout(Duration::from_millis(200), backends.updates.recv()).await
        {
            app.apply(u);
        }
    }
    let draw = |app: &mut App| {
        app.ui.size = (100, 30);
        app.refresh_views();
        let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 30)).unwrap();
        t.draw(|f| ui::draw(f, app)).unwrap();
        let buf = t.backend().buffer();
        (0..30)
            .map(|y| (0..100).map(|x| buf[(x, y)].symbol()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let s_new = draw(&mut app);
    let pane: String = s_new
        .lines()
        .skip_while(|l| !l.contains("Selected"))
        .collect();
    for want in [format!("instance {instance}"), format!("host {host}")] {
        assert!(pane.contains(&want), "{want}:\n{s_new}");
    }
    assert!(pane.contains("unknown order"), "the reason:\n{s_new}");
    key(&mut app, KeyCode::Down);
    let s_old = draw(&mut app);
    assert!(
        s_old.contains("by     unknown (no dlq.by headers)"),
        "{s_old}"
    );
    backends.shutdown().await;
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] the_dlq_names_the_consumer_that_dead_lettered_a_message(&consumer_setup) => dlq_by_postgres, dlq_by_mysql);
