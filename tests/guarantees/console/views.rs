//! The operations console against the real services: a fresh database (both dialects for the
//! trace view), a Redis server of the test's own (killed mid-session in the fault test), fresh
//! topics with real payment messages and real trace events. Views are drawn into ratatui's
//! TestBackend and compared with insta snapshots, volatile text (times, durations, IDs, ports)
//! redacted; the app is driven by scripted keys; the headless commands' JSON is checked field by
//! field; the real binary runs in tmux.

use crate::common;
use crate::console::fixture as console_fixture;
use crate::support::tmux;

use std::time::{Duration, Instant};

use console_fixture::{
    age_after, assert_about, assert_refresh_drawn, block, cell, parse_age, press, pump_until,
    redactions, screen, snapshot, trace_read_done, type_str, world, Incident, World, AMOUNT,
    POINTS, SKU, USER,
};
use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use idemguard::config::Dialect;
use idemguard::console::cli::headless;
use idemguard::console::columns;
use idemguard::console::format::clock;
use idemguard::console::tui::app::{App, Health, Input};
use idemguard::console::tui::backend::{BackendId, Backends};
use idemguard::console::tui::keymap::View;
use idemguard::contracts::{keys, TraceTarget};
use ratatui::backend::{Backend, ClearType, TestBackend, WindowSize};
use ratatui::layout::{Position, Size};
use ratatui::Terminal;
use serde_json::Value;
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/// Every backend up (but `except`): the header reads the same on every run.
fn all_up_but(app: &App, except: Option<BackendId>) -> bool {
    app.stores
        .backends
        .iter()
        .all(|(b, s)| Some(*b) == except || s.health == Health::Up)
}

/// The console on `w`: real collectors feeding a fresh app.
fn console(w: &World) -> (App, Backends) {
    let backends = Backends::spawn(&w.config);
    let app = App::new(&w.config, Some(backends.focus.clone()));
    (app, backends)
}

/// Timeline entries the incident yields when traced: 8 rows, 3 Kafka copies, 10 trace events,
/// the order lock and the fast-path key.
const INCIDENT_ENTRIES: usize = 23;

/// How far a drawn duration may be from the one the fixture implies: the clock moves between
/// the view's "now" and the check, the cell is cut to the second, and the timeline is rebuilt
/// only every half second; a loaded CI machine adds seconds, never minutes.
const SLACK_MS: i64 = 5_000;

/// A Locks row as drawn (the snapshot redacts these cells): HELD is the time since the
/// holder's `acquired_at`, PTTL is within (0, the key's TTL] (or "no TTL"), OWNER is the
/// liveness the fixture set.
#[track_caller]
fn assert_lock_row(s: &str, key: &str, acquired_at: i64, ttl_ms: Option<i64>, owner: &str) {
    let get = |h: &str| cell(s, columns::LOCKS, key, h);
    let now = idemguard::contracts::now_ms();
    let held = parse_age(&get("HELD")).unwrap_or_else(|| panic!("{key} HELD: {s}"));
    assert_about(&format!("{key} HELD"), held, now - acquired_at, SLACK_MS);
    let pttl = get("PTTL");
    match ttl_ms {
        Some(ttl) => {
            let left = parse_age(&pttl).unwrap_or_else(|| panic!("{key} PTTL `{pttl}`: {s}"));
            assert!(
                left > 0 && left <= ttl,
                "{key} PTTL {left} ms, TTL {ttl}: {s}"
            );
        }
        None => assert_eq!(pttl, "no TTL", "{key}: {s}"),
    }
    assert_eq!(get("OWNER"), owner, "{key} OWNER: {s}");
}

/// A Stuck row as drawn: AGE since `created_at`, the owner's liveness, the lease over by the
/// time since `lease_until`.
#[track_caller]
fn assert_stuck_row(
    s: &str,
    request_id: &str,
    created_at: i64,
    lease_until: Option<i64>,
    alive: Option<&str>,
) {
    let get = |h: &str| cell(s, columns::STUCK, request_id, h);
    let now = idemguard::contracts::now_ms();
    let age = parse_age(&get("AGE")).unwrap_or_else(|| panic!("{request_id} AGE: {s}"));
    assert_about(
        &format!("{request_id} AGE"),
        age,
        now - created_at,
        SLACK_MS,
    );
    if let Some(alive) = alive {
        assert_eq!(get("ALIVE"), alive, "{request_id}: {s}");
    }
    if let Some(lease_until) = lease_until {
        let over = age_after(&get("LEASE"), "over ");
        assert_about(
            &format!("{request_id} lease over"),
            over,
            now - lease_until,
            SLACK_MS,
        );
    }
}

/// The Trace view's TIME cells, top to bottom, are the fixture's timestamps (offsets from t0,
/// oldest first), then "now" for the Redis state.
#[track_caller]
fn assert_timeline_times(s: &str, inc: &Incident, offsets: &[i64]) {
    let block_start = s
        .lines()
        .position(|l| l.contains("Timeline, oldest first"))
        .unwrap();
    let times: Vec<String> = s
        .lines()
        .skip(block_start + 2)
        .take_while(|l| !l.starts_with('╰'))
        .map(|l| {
            l.trim_start_matches('│')
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .filter(|t| !t.is_empty())
        .collect();
    let want: Vec<String> = offsets.iter().map(|o| clock(inc.t0 + o)).collect();
    assert_eq!(
        times[..want.len()],
        want[..],
        "the timeline's TIME cells: {s}"
    );
}

/// The incident's timestamps as offsets from t0, oldest first (see `Incident::write`).
const INCIDENT_OFFSETS: [i64; 22] = [
    0, 0, 5, 5, 6, 10, 10, 11, 40, 500, 900, 1_000, 1_001, 2_000, 2_100, 2_200, 3_000, 3_000,
    3_001, 3_002, 3_100, 3_200,
];

fn timeline_complete(app: &App) -> bool {
    app.timeline()
        .is_some_and(|t| t.entries.len() == INCIDENT_ENTRIES)
}

// ---------------------------------------------------------------------------------------------
// Trace view, both dialects
// ---------------------------------------------------------------------------------------------

async fn trace_view(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let (mut app, mut b) = console(&w);

    // Typed as an operator would: the command line, the ID, Enter.
    press(&mut app, KeyCode::Char(':'));
    type_str(&mut app, &format!("trace {}", inc.order_no));
    assert_eq!(
        app.ui.input,
        Input::Command(format!("trace {}", inc.order_no))
    );
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.ui.view, View::Trace);
    pump_until(
        &mut app,
        &mut b.updates,
        "the whole timeline of the order",
        timeline_complete,
    )
    .await;

    let t = app.timeline().unwrap().clone();
    assert_eq!(t.order_no.as_deref(), Some(inc.order_no.as_str()));
    assert_eq!(t.request_id.as_deref(), Some(inc.request_id.as_str()));
    assert_eq!(t.event_ids, vec![inc.event_id.clone()]);
    // Oldest first; the current Redis state (no time of its own) last.
    let times: Vec<i64> = t
        .entries
        .iter()
        .map(|e| e.at_ms.unwrap_or(i64::MAX))
        .collect();
    assert!(times.windows(2).all(|p| p[0] <= p[1]), "{times:?}");
    // The claim at its start, then the record it wrote.
    assert!(
        t.entries[0].summary.starts_with("claimed"),
        "{:?}",
        t.entries[0]
    );
    assert_eq!(t.entries[1].source, "idempotency_record");
    // Every duplicate names the layer that stopped it.
    let stopped: Vec<(String, String)> = t
        .interceptions
        .iter()
        .map(|i| (i.layer.clone(), i.outcome.clone()))
        .collect();
    assert_eq!(
        stopped,
        vec![
            ("lock".into(), "lock_contended".into()),
            ("api".into(), "replayed".into()),
            ("api".into(), "replayed".into()),
            ("stream".into(), "dedup_hit".into()),
            ("stream".into(), "dedup_hit".into())
        ]
    );
    assert_eq!(t.events.len(), 1);
    let e = &t.events[0];
    assert_eq!(
        (
            e.kafka_copies,
            e.processed_rows,
            e.dedup_hits,
            e.points_rows,
            e.notification_rows
        ),
        (3, 1, 2, 1, 1)
    );
    let kafka: Vec<&str> = t
        .entries
        .iter()
        .filter(|e| e.layer == "kafka")
        .map(|e| e.summary.as_str())
        .collect();
    assert!(kafka[2].ends_with("copy 3 of 3"), "{kafka:?}");

    pump_until(&mut app, &mut b.updates, "every backend up", |a| {
        all_up_but(a, None) && trace_read_done(a)
    })
    .await;
    // The record the claim wrote, selected: its times read as times.
    app.ui.selected.insert(View::Trace, 1);
    let s = screen(&mut app, 170, 46);
    snapshot!(format!("trace_view_{}", dialect.dir()), s.clone());
    // What the snapshot redacts, checked on the drawn cells: every TIME is the
    // fixture's, the Redis state is "now"; the record's age and the lock's "since" are the time
    // since t0; the lock's PTTL and owner (cut in the row) read whole in the Selected pane.
    assert_refresh_drawn(&s, w.config.console.refresh);
    assert_timeline_times(&s, &inc, &INCIDENT_OFFSETS);
    assert!(s.contains("│now          api    idem:"), "{s}");
    let now = idemguard::contracts::now_ms();
    let selected = block(&s, "Selected");
    assert_about(
        "record age",
        age_after(&selected, "· age "),
        now - inc.t0,
        SLACK_MS,
    );
    let lock_row = s
        .lines()
        .find(|l| l.contains("held by api-live-0a1b2c (host"))
        .unwrap();
    assert_about(
        "lock held since",
        age_after(lock_row, " since "),
        now - inc.t0 - 5,
        SLACK_MS,
    );
    let lock_entry = t
        .entries
        .iter()
        .position(|e| e.source.starts_with("lock:order:"))
        .unwrap();
    app.ui.selected.insert(View::Trace, lock_entry);
    let lock = block(&screen(&mut app, 170, 46), "Selected");
    let left = age_after(&lock, "· PTTL ");
    assert!(left > 0 && left <= 600_000, "the lock's PTTL: {lock}");
    assert!(
        lock.contains(&format!(
            "PTTL {} · owner alive",
            idemguard::console::format::age(left)
        )),
        "{lock}"
    );
    app.ui.selected.insert(View::Trace, INCIDENT_ENTRIES - 1);
    let fast = block(&screen(&mut app, 170, 46), "Selected");
    let left = age_after(&fast, "· PTTL ");
    assert!(left > 0 && left <= 600_000, "the fast path's PTTL: {fast}");
    app.ui.selected.insert(View::Trace, 0);

    // The requestId and the eventId resolve to the same order.
    for id in [inc.request_id.clone(), inc.event_id.clone()] {
        app.run_command(&format!("trace {id}"));
        pump_until(
            &mut app,
            &mut b.updates,
            &format!("the timeline by {id}"),
            timeline_complete,
        )
        .await;
        let t = app.timeline().unwrap();
        assert_eq!(
            t.order_no.as_deref(),
            Some(inc.order_no.as_str()),
            "{dialect}: {id}"
        );
        assert_eq!(
            t.request_id.as_deref(),
            Some(inc.request_id.as_str()),
            "{dialect}: {id}"
        );
    }

    // Live: a decision made now appears without asking again.
    let tracer = idemguard::trace::Tracer::from_config(
        &w.config,
        &idemguard::contracts::Instance::current(),
    )
    .unwrap();
    tracer.emit(
        idemguard::contracts::TraceEvent::new(
            idemguard::contracts::Layer::Stream,
            idemguard::contracts::Outcome::DedupHit,
        )
        .order_no(&inc.order_no)
        .event_id(&inc.event_id)
        .detail("copy 4, live"),
    );
    tracer.flush(Duration::from_secs(10));
    pump_until(&mut app, &mut b.updates, "the live dedup hit", |a| {
        a.timeline().is_some_and(|t| t.interceptions.len() == 6)
    })
    .await;
    b.shutdown().await;
}

per_dialect!(trace_view => trace_view_postgres, trace_view_mysql);

// ---------------------------------------------------------------------------------------------
// Locks view: single and RedLock, dead owners, no TTL, quorum
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn locks_view_shows_holders_liveness_and_quorum() {
    let w = world(Dialect::Postgres, 3).await;
    let inc = Incident::write(&w).await;
    // RedLock: one key held by the same value on 2 of 3 nodes (quorum), one split 1/1/- (none).
    let holder = |inst: &str, nonce: &str| idemguard::contracts::LockHolder {
        instance: inst.into(),
        host: "pay-host".into(),
        pid: 77,
        acquired_at: inc.t0,
        ttl_ms: 600_000,
        fence: 9,
        nonce: nonce.into(),
    };
    let agreed = holder(&inc.live_instance, "q1").to_value();
    let quorum_key = keys::order_lock("REDLOCK-QUORUM");
    let split_key = keys::order_lock("REDLOCK-SPLIT");
    for (n, node) in w.redlock.iter().enumerate() {
        let mut c = node.conn().await;
        let v = if n < 2 {
            agreed.clone()
        } else {
            holder(&inc.dead_instance, "q2").to_value()
        };
        let _: () = redis::cmd("SET")
            .arg(&quorum_key)
            .arg(v)
            .arg("PX")
            .arg(600_000)
            .query_async(&mut c)
            .await
            .unwrap();
        if n < 2 {
            let _: () = redis::cmd("SET")
                .arg(&split_key)
                .arg(holder(&format!("inst-{n}"), "s").to_value())
                .arg("PX")
                .arg(600_000)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    }
    let (mut app, mut b) = console(&w);
    type_str(&mut app, ":lk");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.ui.view, View::Locks);
    pump_until(&mut app, &mut b.updates, "four locks", |a| {
        a.stores.locks.as_ref().is_some_and(|l| l.locks.len() == 4)
    })
    .await;
    let scan = app.stores.locks.clone().unwrap();
    let by_key = |k: &str| {
        scan.locks
            .iter()
            .find(|l| l.key == k)
            .unwrap_or_else(|| panic!("{k} not listed"))
    };
    let live = by_key(&keys::order_lock(&inc.order_no));
    assert_eq!(
        (live.scope.as_str(), live.owner_alive, live.fence_counter),
        ("single", Some(true), Some(3))
    );
    // Its holder is alive and its TTL fresh, but it was acquired at the incident, ten minutes
    // ago: twenty TTLs, past `console.lock_held_warning` (10 × lock.ttl) — a lock renewed for
    // ever, flagged for that alone.
    assert!(
        live.flags == [idemguard::lock::LockFlag::HeldLong] && live.pttl_ms().unwrap() > 500_000,
        "{live:?}"
    );
    let dead = by_key(&keys::request_lock(&inc.stuck_dead));
    assert_eq!((dead.owner_alive, dead.pttl_ms()), (Some(false), Some(-1)));
    assert_eq!(
        dead.flags.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
        ["no_ttl", "dead_owner", "held_long"]
    );
    let q = by_key(&quorum_key);
    assert_eq!(q.scope.as_str(), "redlock");
    assert_eq!(
        q.quorum().map(|q| (q.agreeing, q.nodes, q.reached)),
        Some((2, 3, true))
    );
    assert_eq!(q.holder().unwrap().nonce, "q1");
    assert_eq!(
        serde_json::to_value(q).unwrap()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["agrees"] == true)
            .collect::<Vec<_>>(),
        [true, true, false]
    );
    let s = by_key(&split_key);
    assert_eq!(
        s.quorum().map(|q| (q.agreeing, q.reached)),
        Some((1, false))
    );
    assert!(s.flags.iter().any(|f| f.as_str() == "no_quorum"));
    pump_until(&mut app, &mut b.updates, "every backend up", |a| {
        all_up_but(a, None)
    })
    .await;
    let s = screen(&mut app, 170, 20);
    snapshot!("locks_view", s.clone());
    // What the snapshot redacts, on the drawn cells.
    assert_refresh_drawn(&s, w.config.console.refresh);
    assert_lock_row(
        &s,
        &keys::order_lock(&inc.order_no),
        inc.t0 + 5,
        Some(600_000),
        "alive",
    );
    assert_lock_row(&s, &quorum_key, inc.t0, Some(600_000), "alive");
    assert_lock_row(&s, &split_key, inc.t0, Some(600_000), "DEAD");
    assert_lock_row(
        &s,
        &keys::request_lock(&inc.stuck_dead),
        inc.stuck_created_at,
        None,
        "DEAD",
    );

    // Enter on the order's lock traces the order.
    let row = app.stores.filtered[&View::Locks]
        .iter()
        .position(|i| scan.locks[*i].key == live.key)
        .unwrap();
    press(&mut app, KeyCode::Char('g'));
    for _ in 0..row {
        press(&mut app, KeyCode::Char('j'));
    }
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        (app.ui.view, app.stores.trace_target.clone()),
        (
            View::Trace,
            Some(TraceTarget::OrderNo(inc.order_no.clone()))
        )
    );

    // Headless twin, field by field.
    let r = headless::locks(&w.config).await;
    assert_eq!(r.exit_code(), 0);
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["schema"], "idemguard.console/v1");
    assert_eq!(j["command"], "locks");
    assert_eq!(j["ok"], true);
    assert_eq!(j["data"]["nodes"].as_array().unwrap().len(), 4);
    let locks = j["data"]["locks"].as_array().unwrap();
    let get = |k: &str| locks.iter().find(|l| l["key"] == k).unwrap().clone();
    let l = get(&keys::order_lock(&inc.order_no));
    assert_eq!(l["scope"], "single");
    assert_eq!(l["holder"]["instance"], inc.live_instance.as_str());
    assert_eq!(l["holder"]["host"], "api-host");
    assert_eq!(l["holder"]["pid"], 4242);
    assert_eq!(l["holder"]["acquired_at"], inc.t0 + 5);
    assert_eq!(l["holder"]["fence"], 3);
    assert_eq!(l["fence_counter"], 3);
    assert_eq!(l["owner_alive"], true);
    assert!(l["pttl_ms"].as_i64().unwrap() > 500_000);
    let d = get(&keys::request_lock(&inc.stuck_dead));
    assert_eq!(d["pttl_ms"], -1);
    assert_eq!(d["owner_alive"], false);
    assert_eq!(
        d["flags"],
        serde_json::json!(["no_ttl", "dead_owner", "held_long"])
    );
    let q = get(&quorum_key);
    assert_eq!(
        q["quorum"],
        serde_json::json!({ "agreeing": 2, "nodes": 3, "reached": true })
    );
    assert_eq!(q["nodes"][2]["agrees"], false);
    let table = headless::locks_table(&r);
    assert!(
        table.contains(&keys::order_lock(&inc.order_no))
            && table.contains("no_ttl,dead_owner")
            && table.contains("2/3"),
        "{table}"
    );
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Stuck and Rates views
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stuck_and_rates_views_and_their_headless_twins() {
    let w = world(Dialect::Mysql, 0).await;
    let inc = Incident::write(&w).await;
    let (mut app, mut b) = console(&w);
    app.run_command("stuck");
    pump_until(
        &mut app,
        &mut b.updates,
        "two stuck records with liveness",
        |a| {
            a.stores
                .stuck
                .as_ref()
                .is_some_and(|s| s.len() == 2 && s.iter().all(|r| r.owner_alive.is_some()))
        },
    )
    .await;
    let s = app.stores.stuck.clone().unwrap();
    assert_eq!(s[0].request_id, inc.stuck_dead, "oldest first");
    assert_eq!((s[0].owner_alive, s[0].order_exists), (Some(false), false));
    assert_eq!(
        (
            s[1].owner_alive,
            s[1].order_exists,
            s[1].order_status.as_deref()
        ),
        (Some(true), true, Some("CREATED"))
    );
    pump_until(&mut app, &mut b.updates, "every backend up", |a| {
        all_up_but(a, None)
    })
    .await;
    let s = screen(&mut app, 170, 12);
    snapshot!("stuck_view", s.clone());
    // What the snapshot redacts, on the drawn cells: ages, liveness, leases.
    assert_refresh_drawn(&s, w.config.console.refresh);
    let created = inc.stuck_created_at;
    assert_stuck_row(
        &s,
        &inc.stuck_dead,
        created,
        Some(created + 30_000),
        Some("DEAD"),
    );
    assert_stuck_row(
        &s,
        &inc.stuck_with_order,
        created + 1,
        Some(created + 60_000),
        Some("alive"),
    );

    app.run_command("rates");
    pump_until(
        &mut app,
        &mut b.updates,
        "the trace topic's last hour read and the lag",
        |a| {
            a.stores.trace_log.events_seen == 10
                && a.stores.rates_reading().is_none()
                // The payment topic's hour read too: the summary counts its messages.
                && a.stores.payment_topic.as_ref().and_then(|p| p.catch_up).is_some_and(|c| c.done)
                && matches!(&a.stores.lag, Some(Ok(l)) if !l.is_empty())
        },
    )
    .await;
    let s = screen(&mut app, 170, 28);
    snapshot!("rates_view", s.clone());
    // What the snapshot redacts, on the drawn cells: each interception's sparkline
    // has one full bar, in the incident's minute (counted from the right end, "now"); every
    // other row's is blank; the figures are the fixture's counts.
    assert_refresh_drawn(&s, w.config.console.refresh);
    let minutes_ago = idemguard::contracts::now_ms().div_euclid(60_000) - inc.t0.div_euclid(60_000);
    for (label, last, hour) in [
        ("replays", "0", "2"),
        ("lock contention", "0", "1"),
        ("dedup hits", "0", "2"),
        ("409 in flight", "0", "0"),
        ("fence rejected", "0", "0"),
        ("DLQ", "0", "0"),
    ] {
        let get = |h: &str| cell(&s, columns::RATES, &format!(" {label} "), h);
        assert_eq!(
            (get("LAST MIN").as_str(), get("60 MIN").as_str()),
            (last, hour),
            "{label}: {s}"
        );
        let row = s
            .lines()
            .find(|l| l.contains(&format!(" {label} ")))
            .unwrap();
        // The cell's 60 minutes, oldest first, then read from the right.
        let head = s.lines().find(|l| l.contains("PER MINUTE")).unwrap();
        let from = head[..head.find("PER MINUTE").unwrap()].chars().count();
        let mut spark: Vec<char> = row.chars().skip(from).take(60).collect();
        spark.resize(60, ' ');
        spark.reverse();
        let bars: Vec<usize> = (0..spark.len()).filter(|i| spark[*i] != ' ').collect();
        if hour == "0" {
            assert!(bars.is_empty(), "{label}: no bar: {row}");
        } else {
            // `bars` counts from the right: 0 is the current minute. The draw and this check
            // may straddle a minute boundary.
            assert_eq!(bars.len(), 1, "{label}: one bar: {row}");
            assert_eq!(
                spark[bars[0]], '█',
                "{label}: the minute's only count is full: {row}"
            );
            assert!(
                (minutes_ago - 1..=minutes_ago).contains(&(bars[0] as i64)),
                "{label}: the bar {} minutes ago, the incident {minutes_ago}: {row}",
                bars[0]
            );
        }
    }
    assert!(
        s.contains("10 trace events read") && s.contains("in the last 60 minutes: 5"),
        "{s}"
    );
    b.shutdown().await;

    // Headless stuck, field by field.
    let r = headless::stuck(&w.config).await;
    assert_eq!(r.exit_code(), 0, "{}", r.failures());
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["command"], "stuck");
    assert_eq!(j["data"]["threshold_ms"], 60_000);
    let recs = j["data"]["records"].as_array().unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["request_id"], inc.stuck_dead.as_str());
    assert_eq!(recs[0]["owner"], inc.dead_instance.as_str());
    assert_eq!(recs[0]["owner_alive"], false);
    assert_eq!(recs[0]["order_exists"], false);
    assert_eq!(recs[0]["order_status"], Value::Null);
    assert_eq!(recs[0]["fence"], 4);
    assert_eq!(
        recs[0]["lease_until"].as_i64().unwrap() - recs[0]["created_at"].as_i64().unwrap(),
        30_000
    );
    assert_eq!(recs[1]["request_id"], inc.stuck_with_order.as_str());
    assert_eq!(recs[1]["owner_alive"], true);
    assert_eq!(recs[1]["order_exists"], true);
    assert_eq!(recs[1]["found_order_no"], inc.stuck_order_no.as_str());
    assert_eq!(recs[1]["order_status"], "CREATED");
    assert_eq!(recs[1]["replay_count"], 1);

    // Headless rates: the incident's interceptions in their minute, and the lag.
    let r = headless::rates(&w.config).await;
    assert_eq!(r.exit_code(), 0, "{}", r.failures());
    let j = serde_json::to_value(&r).unwrap();
    let series = j["data"]["rates"]["series"].as_array().unwrap();
    let total = |o: &str| {
        series.iter().find(|s| s["outcome"] == o).unwrap()["total"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        (
            total("replayed"),
            total("dedup_hit"),
            total("lock_contended"),
            total("dlq")
        ),
        (2, 2, 1, 0)
    );
    let minute = (inc.t0 - j["data"]["rates"]["first_minute_ms"].as_i64().unwrap()) / 60_000;
    let replays = &series.iter().find(|s| s["outcome"] == "replayed").unwrap()["per_minute"];
    assert_eq!(
        replays[minute as usize], 2,
        "the replays are counted in the incident's minute"
    );
    let lag = j["data"]["lag"].as_array().unwrap();
    let p = lag
        .iter()
        .find(|l| l["partition"] == inc.partition)
        .unwrap();
    assert_eq!(p["committed"], inc.offsets[0] + 1);
    assert_eq!(p["high_watermark"], inc.offsets[2] + 1);
    assert_eq!(p["lag"], 2);
}

// ---------------------------------------------------------------------------------------------
// The Overview, the first screen: real data on both dialects; snapshots at 80×24 and 160×45
// ---------------------------------------------------------------------------------------------

/// The Overview has read every source: the leak, both stuck records with their owner's
/// liveness, the locks, the lag and the incident's interceptions.
fn overview_complete(a: &App, order_no: &str) -> bool {
    let f = a.findings();
    let has = |t: &str| f.iter().any(|l| l.text.contains(t));
    has(order_no)
        && has("2 stuck PROCESSING record(s), 1 with a dead owner")
        && has("1 lock(s) with a dead owner")
        && has("consumer lag 2 on p0")
        && has("replays: 0 in the last 5 min · 2 in the hour")
        && all_up_but(a, None)
}

async fn overview(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let leaked_event = inc.leak_points(&w).await;
    let (mut app, mut b) = console(&w);
    assert_eq!(
        app.ui.view,
        View::Overview,
        "the console opens on the Overview"
    );
    pump_until(&mut app, &mut b.updates, "the whole Overview", |a| {
        overview_complete(a, &inc.order_no)
    })
    .await;
    let f = app.findings();
    let line = |t: &str| f.iter().position(|l| l.text.contains(t)).unwrap();
    let leak = &f[line(&inc.order_no)];
    assert!(
        leak.text.contains("2 rows in points_ledger") && leak.text.contains(&leaked_event[..8]),
        "{dialect}: {leak:?}"
    );
    let dead = &f[line(&inc.stuck_dead)];
    assert!(dead.text.contains("DEAD"), "{dialect}: {dead:?}");
    if dialect == Dialect::Postgres {
        snapshot!("overview_80x24", screen(&mut app, 80, 24));
        snapshot!("overview_100x30", screen(&mut app, 100, 30));
        snapshot!("overview_200x50", screen(&mut app, 200, 50));
        let wide = screen(&mut app, 160, 45);
        snapshot!("overview_160x45", wide.clone());
        // What the snapshots redact, checked on the drawn cells: the stuck record was
        // created five minutes ago and its owner has no heartbeat.
        let row = wide.lines().find(|l| l.contains(&inc.stuck_dead)).unwrap();
        assert!(row.contains("DEAD ") && row.contains(" · 5m"), "{row}");
    }

    // Enter on the leak traces its order; on a stuck record, its request; on the locks, Locks.
    app.ui.selected.insert(View::Overview, line(&inc.order_no));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        (app.ui.view, app.stores.trace_target.clone()),
        (
            View::Trace,
            Some(TraceTarget::OrderNo(inc.order_no.clone()))
        )
    );
    press(&mut app, KeyCode::Char('1'));
    app.ui
        .selected
        .insert(View::Overview, line(&inc.stuck_dead));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.stores.trace_target,
        Some(TraceTarget::RequestId(inc.stuck_dead.clone()))
    );
    press(&mut app, KeyCode::Char('1'));
    app.ui
        .selected
        .insert(View::Overview, line("1 lock(s) with a dead owner"));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.ui.view, View::Locks);

    if dialect == Dialect::Postgres {
        // Every view at 80×24 keeps its identifying column whole.
        let s = screen(&mut app, 80, 24);
        assert!(s.contains(&keys::request_lock(&inc.stuck_dead)), "{s}");
        snapshot!("locks_view_80x24", s.clone());
        // At 80 columns KEY, OWNER and PTTL fit, the rest in the Selected panel; what is
        // redacted is the header's refresh and the SCAN's duration (a real, short one).
        assert_refresh_drawn(&s, w.config.console.refresh);
        let scan = age_after(&s, "SCAN of 1 node(s) took ");
        assert!((0..SLACK_MS).contains(&scan), "{s}");
        press(&mut app, KeyCode::Char('5'));
        let s = screen(&mut app, 80, 24);
        assert!(
            s.contains(&inc.stuck_dead) && s.contains(&inc.stuck_with_order),
            "{s}"
        );
        let row = s.lines().find(|l| l.contains(&inc.stuck_dead)).unwrap();
        assert!(
            row.contains(" 5m"),
            "the AGE cell, redacted in the snapshot: {row}"
        );
        snapshot!("stuck_view_80x24", s.clone());
        assert_refresh_drawn(&s, w.config.console.refresh);
        let created = inc.stuck_created_at;
        assert_stuck_row(&s, &inc.stuck_dead, created, None, None);
        assert_stuck_row(&s, &inc.stuck_with_order, created + 1, None, None);
        app.run_command(&format!("trace {}", inc.order_no));
        // The incident's entries and the leaked duplicate's points row.
        pump_until(
            &mut app,
            &mut b.updates,
            "the timeline with the leak",
            |a| {
                a.timeline()
                    .is_some_and(|t| t.entries.len() == INCIDENT_ENTRIES + 1)
                    && trace_read_done(a)
            },
        )
        .await;
        // The record the claim wrote, selected.
        app.ui.selected.insert(View::Trace, 1);
        let s = screen(&mut app, 80, 24);
        assert!(
            s.contains(&inc.order_no) && s.contains(&inc.request_id),
            "{s}"
        );
        snapshot!("trace_view_80x24", s.clone());
        // The rows that fit are the fixture's first timestamps; the record's age in the
        // Selected pane is the time since t0.
        assert_refresh_drawn(&s, w.config.console.refresh);
        assert_timeline_times(&s, &inc, &INCIDENT_OFFSETS[..7]);
        let selected = block(&s, "Selected");
        let now = idemguard::contracts::now_ms();
        assert_about(
            "record age",
            age_after(&selected, "· age "),
            now - inc.t0,
            SLACK_MS,
        );
    }
    b.shutdown().await;
}

per_dialect!(overview => overview_postgres, overview_mysql);

// ---------------------------------------------------------------------------------------------
// Scripted keys
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn scripted_keys_trace_filter_switch_views() {
    let w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let (mut app, mut b) = console(&w);

    // :t is an alias of :trace.
    type_str(&mut app, &format!(":t {}", inc.request_id));
    press(&mut app, KeyCode::Enter);
    pump_until(&mut app, &mut b.updates, "the timeline", timeline_complete).await;
    assert_eq!(app.row_count(View::Trace), INCIDENT_ENTRIES);

    // Filter the trace to the Kafka copies; then invert it.
    type_str(&mut app, "/kafka");
    assert_eq!(app.ui.input, Input::Filter("kafka".into()));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.row_count(View::Trace), 3);
    type_str(&mut app, "/");
    assert_eq!(app.ui.input, Input::Filter(String::new()));
    assert!(
        screen(&mut app, 170, 46).contains("now /kafka"),
        "the filter line says what the view's filter is"
    );
    press(&mut app, KeyCode::Esc);
    assert_eq!(
        app.row_count(View::Trace),
        3,
        "esc leaves the filter as it was"
    );
    type_str(&mut app, "/!kafka");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.row_count(View::Trace), INCIDENT_ENTRIES - 3);
    assert!(screen(&mut app, 170, 46).contains("filter /!kafka"));

    // Switch views: the filter stays with the Trace view.
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.ui.view, View::Locks);
    pump_until(&mut app, &mut b.updates, "the locks", |a| {
        a.stores.locks.as_ref().is_some_and(|l| l.locks.len() == 2)
    })
    .await;
    assert_eq!(app.row_count(View::Locks), 2);
    type_str(&mut app, "/dead_owner");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.row_count(View::Locks), 1);
    press(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.ui.copied.as_deref(),
        Some(keys::request_lock(&inc.stuck_dead).as_str())
    );
    assert_eq!(
        app.take_clipboard().as_deref(),
        Some(keys::request_lock(&inc.stuck_dead).as_str())
    );
    press(&mut app, KeyCode::Char('2'));
    assert_eq!(app.ui.view, View::Trace);
    assert_eq!(app.filter(View::Trace).typed(), "!kafka");
    assert_eq!(app.filter(View::Locks).typed(), "dead_owner");
    press(&mut app, KeyCode::Esc);
    assert!(
        app.filter(View::Trace).is_empty(),
        "esc clears this view's filter"
    );
    assert_eq!(app.filter(View::Locks).typed(), "dead_owner");
    press(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.ui.copied.as_deref(),
        Some(inc.order_no.as_str()),
        "y on the trace copies the orderNo"
    );

    // Views by command and alias, backwards with shift-tab.
    for (cmd, view) in [
        ("stuck", View::Stuck),
        ("r", View::Rates),
        ("locks", View::Locks),
        ("tr", View::Trace),
    ] {
        type_str(&mut app, &format!(":{cmd}"));
        press(&mut app, KeyCode::Enter);
        assert_eq!(app.ui.view, view, ":{cmd}");
    }
    press(&mut app, KeyCode::BackTab);
    assert_eq!(
        app.ui.view,
        View::Overview,
        "shift-tab from Trace: the Overview"
    );
    press(&mut app, KeyCode::BackTab);
    assert_eq!(
        app.ui.view,
        View::Dlq,
        "shift-tab from the first view wraps to the last, the DLQ"
    );

    // Help generated from the keymap; it scrolls (G: its end); any other key closes it.
    press(&mut app, KeyCode::Char('?'));
    let help = screen(&mut app, 170, 46);
    assert!(
        help.contains("Help")
            && help.contains(":trace ID")
            && help.contains("copy the selected ID"),
        "{help}"
    );
    press(&mut app, KeyCode::Char('G'));
    let help = screen(&mut app, 170, 46);
    assert!(help.contains("aliases :t :tr"), "{help}");
    press(&mut app, KeyCode::Char('x'));
    assert!(app.ui.help.is_none());

    // Unknown command: said, nothing else changes.
    type_str(&mut app, ":pods");
    press(&mut app, KeyCode::Enter);
    assert!(screen(&mut app, 170, 46).contains("unknown command `pods`"));

    // Pause (`p` everywhere; Space too, outside the views where Space tags rows): the
    // collectors are told and the header says so; +/- step the refresh period.
    press(&mut app, KeyCode::Char('p'));
    assert!(app.ui.paused && b.focus.borrow().paused);
    assert!(screen(&mut app, 170, 46).contains("PAUSED"));
    press(&mut app, KeyCode::Char('p'));
    assert!(!b.focus.borrow().paused);
    app.run_command("refresh 1s");
    press(&mut app, KeyCode::Char('+'));
    assert_eq!(b.focus.borrow().refresh, Duration::from_millis(500));
    press(&mut app, KeyCode::Char('-'));
    press(&mut app, KeyCode::Char('-'));
    assert_eq!(b.focus.borrow().refresh, Duration::from_secs(2));

    // q quits.
    press(&mut app, KeyCode::Char('q'));
    assert!(app.ui.quit);
    b.shutdown().await;
}

/// The real main loop (select over events, updates, tick, render) on a TestBackend with a
/// scripted key stream: it draws, follows the keys and returns on `q`.
#[tokio::test]
async fn main_loop_runs_scripted_keys_and_quits() {
    let w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let (mut app, mut b) = console(&w);
    let mut keys: Vec<std::io::Result<Event>> = Vec::new();
    for c in format!(":trace {}", inc.order_no).chars() {
        keys.push(Ok(Event::Key(KeyEvent::new(
            KeyCode::Char(c),
            KeyModifiers::NONE,
        ))));
    }
    keys.push(Ok(Event::Key(KeyEvent::new(
        KeyCode::Enter,
        KeyModifiers::NONE,
    ))));
    let (tx, rx) = mpsc::channel::<std::io::Result<Event>>(64);
    for k in keys {
        tx.send(k).await.unwrap();
    }
    // Ctrl-C once the trace is drawn from both topics (waiting for the state, not for time).
    let (drawn_tx, drawn) = tokio::sync::oneshot::channel();
    let wanted = vec!["sink_applied".to_string(), "copy 3 of 3".to_string()];
    let backend = Watched {
        inner: TestBackend::new(170, 46),
        wanted,
        drawn: Some(drawn_tx),
    };
    let mut terminal = Terminal::new(backend).unwrap();
    let events = tokio_stream_from(rx);
    let quitter = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(20), drawn)
            .await
            .expect("the trace is drawn within 20 s")
            .unwrap();
        tx.send(Ok(Event::Key(KeyEvent::new(
            KeyCode::Char('c'),
            KeyModifiers::CONTROL,
        ))))
        .await
        .unwrap();
    });
    let mut copied = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        idemguard::console::tui::terminal::run_loop(
            &mut terminal,
            &mut app,
            events,
            &mut b.updates,
            idemguard::console::tui::terminal::QuitSignals::listen().unwrap(),
            |t| copied.push(t.to_string()),
        ),
    )
    .await
    .expect("the loop returns after ctrl-c")
    .unwrap();
    quitter.await.unwrap();
    assert!(app.ui.quit);
    assert_eq!(
        app.stores.trace_target,
        Some(TraceTarget::OrderNo(inc.order_no.clone()))
    );
    let shown = drawn_text(&terminal.backend().inner);
    assert!(
        shown.contains("idemguard console") && shown.contains("Timeline, oldest first"),
        "{shown}"
    );
    b.shutdown().await;
}

/// A [`TestBackend`] that says, after a frame is flushed, when every `wanted` text is on screen.
struct Watched {
    inner: TestBackend,
    wanted: Vec<String>,
    drawn: Option<tokio::sync::oneshot::Sender<()>>,
}

fn drawn_text(backend: &TestBackend) -> String {
    backend
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect()
}

impl Backend for Watched {
    type Error = std::convert::Infallible;

    fn draw<'a, I>(&mut self, content: I) -> Result<(), Self::Error>
    where
        I: Iterator<Item = (u16, u16, &'a ratatui::buffer::Cell)>,
    {
        self.inner.draw(content)
    }
    fn hide_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.hide_cursor()
    }
    fn show_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.show_cursor()
    }
    fn get_cursor_position(&mut self) -> Result<Position, Self::Error> {
        self.inner.get_cursor_position()
    }
    fn set_cursor_position<P: Into<Position>>(&mut self, p: P) -> Result<(), Self::Error> {
        self.inner.set_cursor_position(p)
    }
    fn clear(&mut self) -> Result<(), Self::Error> {
        self.inner.clear()
    }
    fn clear_region(&mut self, clear_type: ClearType) -> Result<(), Self::Error> {
        self.inner.clear_region(clear_type)
    }
    fn size(&self) -> Result<Size, Self::Error> {
        self.inner.size()
    }
    fn window_size(&mut self) -> Result<WindowSize, Self::Error> {
        self.inner.window_size()
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.inner.flush()?;
        let text = drawn_text(&self.inner);
        if self.wanted.iter().all(|w| text.contains(w.as_str())) {
            if let Some(tx) = self.drawn.take() {
                let _ = tx.send(());
            }
        }
        Ok(())
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Unpin {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

// ---------------------------------------------------------------------------------------------
// A backend dies mid-session
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn redis_killed_mid_session_shows_down_and_the_ui_keeps_answering() {
    let mut w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let (mut app, mut b) = console(&w);
    app.run_command("locks");
    pump_until(&mut app, &mut b.updates, "the locks", |a| {
        a.stores.locks.as_ref().is_some_and(|l| l.locks.len() == 2)
            && a.stores.backends[&BackendId::Redis].health == Health::Up
    })
    .await;

    let killed = Instant::now();
    w.redis.kill();
    pump_until(&mut app, &mut b.updates, "redis shown as down", |a| {
        matches!(a.stores.backends[&BackendId::Redis].health, Health::Down(_))
    })
    .await;
    let Health::Down(err) = app.stores.backends[&BackendId::Redis].health.clone() else {
        unreachable!()
    };
    assert!(
        err.contains(&format!("127.0.0.1:{}", w.redis.port)),
        "the error names the node: {err}"
    );
    assert!(app.stores.backends[&BackendId::Redis].last_ok_ms.is_some());
    // The last good data stays on screen, with its age.
    assert_eq!(app.stores.locks.as_ref().unwrap().locks.len(), 2);
    pump_until(&mut app, &mut b.updates, "every other backend up", |a| {
        all_up_but(a, Some(BackendId::Redis))
    })
    .await;
    let s = screen(&mut app, 170, 20);
    assert!(
        s.contains("redis DOWN") && s.contains("last good data"),
        "{s}"
    );
    snapshot!("locks_view_redis_down", s.clone());
    // What the snapshot redacts, on the drawn cells: the last good data is as old
    // as the time since the kill (plus a poll), and its rows still read as written.
    assert_refresh_drawn(&s, w.config.console.refresh);
    let since_kill = killed.elapsed().as_millis() as i64;
    for label in ["redis DOWN (data ", "last good data "] {
        let old = age_after(&s, label);
        assert!(
            (0..=since_kill + SLACK_MS).contains(&old),
            "{label}{old} ms, killed {since_kill} ms ago: {s}"
        );
    }
    assert_lock_row(
        &s,
        &keys::order_lock(&inc.order_no),
        inc.t0 + 5,
        Some(600_000),
        "alive",
    );
    assert_lock_row(
        &s,
        &keys::request_lock(&inc.stuck_dead),
        inc.stuck_created_at,
        None,
        "DEAD",
    );

    // Keys still answer, and the database keeps delivering.
    let before = Instant::now();
    type_str(&mut app, ":stuck");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.ui.view, View::Stuck);
    assert!(before.elapsed() < Duration::from_millis(100));
    app.stores.stuck = None;
    pump_until(
        &mut app,
        &mut b.updates,
        "fresh stuck rows from the database",
        |a| a.stores.stuck.as_ref().is_some_and(|s| s.len() == 2),
    )
    .await;
    assert_eq!(app.stores.backends[&BackendId::Database].health, Health::Up);
    // With Redis down the owner's liveness is unknown, never guessed.
    assert!(app
        .stores
        .stuck
        .as_ref()
        .unwrap()
        .iter()
        .all(|r| r.owner_alive.is_none()));
    type_str(&mut app, &format!(":trace {}", inc.order_no));
    press(&mut app, KeyCode::Enter);
    pump_until(&mut app, &mut b.updates, "the trace without redis", |a| {
        a.timeline()
            .is_some_and(|t| t.entries.len() == INCIDENT_ENTRIES - 2)
    })
    .await;
    b.shutdown().await;

    // Headless: the failing backend makes the exit status non-zero, the rest is still printed.
    let r = headless::trace(&w.config, &TraceTarget::classify(&inc.order_no)).await;
    assert_eq!(r.exit_code(), headless::EXIT_BACKEND_FAILED);
    assert!(r.data.found);
    assert!(r.failures().contains("redis"), "{}", r.failures());
}

// ---------------------------------------------------------------------------------------------
// Headless trace, both dialects, field by field
// ---------------------------------------------------------------------------------------------

async fn headless_trace_json(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let r = headless::trace(&w.config, &TraceTarget::classify(&inc.event_id)).await;
    assert_eq!(r.exit_code(), 0, "{dialect}: {}", r.failures());
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["schema"], "idemguard.console/v1");
    assert_eq!(j["command"], "trace");
    assert_eq!(j["environment"]["name"], "local");
    assert_eq!(j["backends"].as_array().unwrap().len(), 4);
    assert!(j["backends"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b["ok"] == true));
    let d = &j["data"];
    assert_eq!(d["kind"], "event_id");
    assert_eq!(d["found"], true);
    assert_eq!(d["order_no"], inc.order_no.as_str());
    assert_eq!(d["request_id"], inc.request_id.as_str());
    assert_eq!(d["event_ids"], serde_json::json!([inc.event_id]));
    let entries = d["entries"].as_array().unwrap();
    assert_eq!(entries.len(), INCIDENT_ENTRIES, "{dialect}");
    let by_source = |s: &str| {
        entries
            .iter()
            .filter(|e| e["source"] == s)
            .cloned()
            .collect::<Vec<Value>>()
    };

    let idem = &by_source("idempotency_record")[0]["fields"];
    assert_eq!(idem["request_id"], inc.request_id.as_str());
    assert_eq!(idem["status"], "SUCCEEDED");
    assert_eq!(idem["response_code"], 201);
    assert_eq!(idem["owner"], inc.live_instance.as_str());
    assert_eq!(idem["replay_count"], 2);
    assert_eq!(idem["created_at"], inc.t0);
    assert_eq!(idem["lease_until"], inc.t0 + 30_000);
    assert_eq!(idem["request_hash"].as_str().unwrap().len(), 64);
    let order = &by_source("order_record")[0]["fields"];
    assert_eq!(order["order_no"], inc.order_no.as_str());
    assert_eq!(order["status"], "PAID");
    assert_eq!(
        (order["version"].as_i64(), order["fence"].as_i64()),
        (Some(1), Some(3))
    );
    assert_eq!(
        (
            order["user_id"].as_i64(),
            order["sku_id"].as_i64(),
            order["amount"].as_i64()
        ),
        (Some(USER), Some(SKU), Some(AMOUNT))
    );
    assert_eq!(order["payment_event_id"], inc.event_id.as_str());
    assert_eq!(by_source("stock_movement")[0]["fields"]["delta"], -1);
    let pay = &by_source("payment_flow")[0]["fields"];
    assert_eq!(
        (
            pay["pay_no"].as_str(),
            pay["status"].as_str(),
            pay["amount"].as_i64()
        ),
        (Some(inc.pay_no.as_str()), Some("SUCCEEDED"), Some(AMOUNT))
    );
    assert_eq!(by_source("outbox")[0]["fields"]["status"], "SENT");
    let processed = &by_source("processed_event")[0]["fields"];
    assert_eq!(
        processed["consumer_group"],
        w.config.kafka.consumer_group.as_str()
    );
    assert_eq!(processed["kafka_partition"], inc.partition);
    assert_eq!(processed["kafka_offset"], inc.offsets[0]);
    assert_eq!(processed["outcome"], "applied");
    assert_eq!(by_source("points_ledger")[0]["fields"]["points"], POINTS);
    assert_eq!(by_source("notification")[0]["fields"]["channel"], "sms");
    let kafka: Vec<&Value> = entries.iter().filter(|e| e["layer"] == "kafka").collect();
    assert_eq!(kafka.len(), 3);
    for (n, k) in kafka.iter().enumerate() {
        assert_eq!(k["fields"]["partition"], inc.partition);
        assert_eq!(k["fields"]["offset"], inc.offsets[n]);
        assert_eq!(k["fields"]["timestamp_ms"], inc.t0 + 2_000 + n as i64 * 100);
        assert_eq!(k["fields"]["event_id"], inc.event_id.as_str());
        assert_eq!(k["at_ms"], inc.t0 + 2_000 + n as i64 * 100);
    }
    let lock = &by_source(&format!("{} (single)", keys::order_lock(&inc.order_no)))[0];
    assert_eq!(lock["fields"]["holder"]["fence"], 3);
    assert_eq!(lock["fields"]["owner_alive"], true);
    let fast = &by_source(&keys::idempotency_fast_path(&inc.request_id))[0];
    assert_eq!(fast["at_ms"], Value::Null);
    assert!(fast["fields"]["value"]
        .as_str()
        .unwrap()
        .contains("SUCCEEDED"));
    let stopped: Vec<(&str, &str)> = d["interceptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["layer"].as_str().unwrap(), i["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        stopped,
        [
            ("lock", "lock_contended"),
            ("api", "replayed"),
            ("api", "replayed"),
            ("stream", "dedup_hit"),
            ("stream", "dedup_hit")
        ]
    );
    assert_eq!(
        d["events"][0],
        serde_json::json!({ "event_id": inc.event_id, "kafka_copies": 3, "processed_rows": 1, "dedup_hits": 2, "points_rows": 1, "notification_rows": 1 })
    );
    let table = headless::trace_table(&r);
    assert!(
        table.contains("duplicates stopped: 5")
            && table.contains("copy 3 of 3")
            && table.contains("STOPPED BY"),
        "{table}"
    );
}

per_dialect!(headless_trace_json => headless_trace_json_postgres, headless_trace_json_mysql);

/// A trace (and an --id report) of an order still finds its Kafka side when both topics hold
/// more other messages after it than the console's stores keep: the headless reads keep what
/// names the order's IDs, not the newest N messages.
#[tokio::test]
async fn a_trace_finds_its_kafka_side_behind_more_messages_than_the_stores_keep() {
    use idemguard::console::read::store::{PAYMENT_MESSAGES_KEPT, TRACE_EVENTS_KEPT};
    use idemguard::console::report::{self, ReportScope};
    use idemguard::contracts::{headers, Layer, Outcome, TraceEvent};
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    let w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &w.config.kafka.bootstrap_servers)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "500000")
        .create()
        .unwrap();
    let send = |mut record: BaseRecord<'_, str, [u8]>| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match producer.send(record) {
                Ok(()) => return,
                Err((e, back)) => {
                    assert!(Instant::now() < deadline, "producing the filler: {e}");
                    record = back;
                    producer.poll(Duration::from_millis(20));
                }
            }
        }
    };
    // More than the log keeps behind the incident in every partition of the trace topic, so
    // however the reader interleaves partitions, the incident's events are evicted.
    for p in 0..3 {
        for i in 0..TRACE_EVENTS_KEPT + 10 {
            let e = TraceEvent::new(Layer::Api, Outcome::Replayed)
                .request_id(format!("APP:ORDER:20261129:filler-{p}-{i}"))
                .order_no(format!("F{p}{i:027}"));
            send(
                BaseRecord::to(&w.config.kafka.trace_topic)
                    .partition(p)
                    .key("filler")
                    .payload(serde_json::to_vec(&e).unwrap().as_slice()),
            );
        }
    }
    for i in 0..PAYMENT_MESSAGES_KEPT + 10 {
        let order = format!("F{i:028}");
        let h = OwnedHeaders::new().insert(Header {
            key: headers::ORDER_NO,
            value: Some(order.as_str()),
        });
        send(
            BaseRecord::to(&w.config.kafka.payment_topic)
                .key(order.as_str())
                .payload(b"{}".as_slice())
                .headers(h),
        );
    }
    producer.flush(Duration::from_secs(60)).unwrap();

    let r = headless::trace(&w.config, &TraceTarget::classify(&inc.order_no)).await;
    assert_eq!(r.exit_code(), 0, "{}", r.failures());
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(
        j["data"]["entries"].as_array().unwrap().len(),
        INCIDENT_ENTRIES
    );
    assert_eq!(
        j["data"]["interceptions"].as_array().unwrap().len(),
        5,
        "the trace events of the incident were kept"
    );
    assert_eq!(
        j["data"]["events"][0]["kafka_copies"], 3,
        "the payment messages of the incident were kept"
    );

    let rep = report::build(
        &w.config,
        &ReportScope::Id(TraceTarget::classify(&inc.order_no)),
    )
    .await
    .unwrap();
    let j = serde_json::to_value(&rep).unwrap();
    let stopped: u64 = j["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        stopped, 5,
        "the report counts the incident's interceptions: {}",
        j["rates"]
    );

    // The live console: once its trace log has moved past the incident (it keeps the newest
    // events), tracing the order still shows every trace event of it, read from the topic.
    let (mut app, mut b) = console(&w);
    let filler = 3 * (TRACE_EVENTS_KEPT + 10) as u64;
    // 300,000 events for a debug build next to other tests: a longer wait than pump_until's.
    let deadline = Instant::now() + Duration::from_secs(240);
    // The payment index too has moved past the incident's messages: its Kafka copies come from
    // the trace's own read of the payment topic, not from what the live reader still holds.
    let payment_filler = (PAYMENT_MESSAGES_KEPT + 10) as u64;
    while !(app.stores.trace_log.events_seen >= filler
        && app.stores.payments.messages_seen >= payment_filler
        && app
            .stores
            .trace_log
            .matching(
                Some(&inc.order_no),
                Some(&inc.request_id),
                &Default::default(),
            )
            .is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "the console read {} of {filler} trace events and {} of {payment_filler} payment messages in 240 s",
            app.stores.trace_log.events_seen,
            app.stores.payments.messages_seen
        );
        if let Ok(Some(u)) =
            tokio::time::timeout(Duration::from_millis(200), b.updates.recv()).await
        {
            app.apply(u);
        }
    }
    type_str(&mut app, &format!(":trace {}", inc.order_no));
    press(&mut app, KeyCode::Enter);
    pump_until(
        &mut app,
        &mut b.updates,
        "the whole timeline of an order older than the log keeps",
        timeline_complete,
    )
    .await;
    assert_eq!(app.timeline().unwrap().interceptions.len(), 5);
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The binary: exit statuses, and a real terminal (tmux)
// ---------------------------------------------------------------------------------------------

fn idemguard(w: &World, args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
    c.args(args).envs(tmux::local_env(&w.config));
    c.output().unwrap()
}

#[tokio::test]
async fn binary_exit_statuses_and_a_real_terminal() {
    let mut w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;

    let ok = idemguard(&w, &["trace", &inc.order_no, "--json"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let j: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(j["data"]["order_no"], inc.order_no.as_str());
    let table = idemguard(&w, &["trace", &inc.request_id]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("TIME  "),
        "a readable table by default"
    );
    let unknown = idemguard(&w, &["trace", "APP:ORDER:20261129:nobody-knows-me"]);
    assert_eq!(unknown.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no row, key, message or trace event")
    );
    for cmd in ["locks", "stuck", "rates"] {
        let out = idemguard(&w, &[cmd, "--json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["command"], cmd);
    }

    // A real terminal: tmux runs `idemguard console`; it draws; q leaves and the shell's screen
    // is back (the alternate screen is gone, the marker printed after the exit is visible).
    let t = tmux::Terminal::console("igt", (160, 40), &tmux::local_env(&w.config), "");
    let within = Duration::from_secs(20);
    let drawn = t.wait_for("the console", within, |s| {
        s.contains("idemguard console") && s.contains("database ok")
    });
    assert!(
        drawn.contains("LOCAL")
            && drawn.contains("1:Overview")
            && drawn.contains("what is wrong now"),
        "{drawn}"
    );
    t.keys(&[&format!(":trace {}", inc.order_no), "Enter"]);
    t.wait_for("the timeline", within, |s| {
        s.contains("Timeline, oldest first") && s.contains("copy 3 of 3")
    });
    let after = t.quit_console(within);
    tmux::assert_console_gone(&after);
    drop(t);

    // With its Redis gone, the headless locks say so and exit non-zero.
    w.redis.kill();
    let down = idemguard(&w, &["locks"]);
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains(&format!("127.0.0.1:{}", w.redis.port)));
}

// ---------------------------------------------------------------------------------------------
// A database without the schema: every face says to run `idemguard migrate`
// ---------------------------------------------------------------------------------------------

async fn a_database_without_the_schema_says_to_migrate(dialect: Dialect) {
    let mut config = common::fresh_database_config(dialect).await;
    let topics = common::fresh_topics(&config, &["idemguard.trace", "payment.succeeded"]).await;
    config.kafka.trace_topic = topics[0].clone();
    config.kafka.payment_topic = topics[1].clone();
    // The database as shown: config::redact_url of its URL (no password, ever).
    let shown = BackendId::Database.target(&config);
    let says_migrate = |e: Option<&str>| {
        e.is_some_and(|e| e.starts_with("run `idemguard migrate`") && e.contains(&shown))
    };

    // The headless twins.
    let stuck = headless::stuck(&config).await;
    let db = stuck.backends.iter().find(|b| b.is(BackendId::Database));
    let error = db.and_then(|b| b.error.as_deref());
    assert!(says_migrate(error), "stuck: {error:?}");
    let trace = headless::trace(&config, &TraceTarget::classify("20261130000000000abc")).await;
    let db = trace.backends.iter().find(|b| b.is(BackendId::Database));
    let error = db.and_then(|b| b.error.as_deref());
    assert!(says_migrate(error), "trace: {error:?}");

    // The TUI: the collector's status, and the alert line at 80 columns still says it.
    let mut backends = Backends::spawn(&config);
    let mut app = App::new(&config, Some(backends.focus.clone()));
    pump_until(&mut app, &mut backends.updates, "the database down", |a| {
        matches!(
            &a.stores.backends[&BackendId::Database].health,
            Health::Down(_)
        )
    })
    .await;
    let Health::Down(e) = &app.stores.backends[&BackendId::Database].health else {
        unreachable!()
    };
    assert!(says_migrate(Some(e)), "TUI: {e}");
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("run `idemguard migrate`"), "{s}");
    backends.shutdown().await;
}

per_dialect!(a_database_without_the_schema_says_to_migrate => a_database_without_the_schema_says_to_migrate_postgres, a_database_without_the_schema_says_to_migrate_mysql);

// ---------------------------------------------------------------------------------------------
// `:report` writes into console.report_dir and says the full path
// ---------------------------------------------------------------------------------------------

async fn report_command_writes_into_the_report_dir(dialect: Dialect) {
    let (mut config, db) = common::migrated_database(dialect).await;
    db.pool.close().await;
    let topics = common::fresh_topics(&config, &["idemguard.trace", "payment.succeeded"]).await;
    config.kafka.trace_topic = topics[0].clone();
    config.kafka.payment_topic = topics[1].clone();
    let tmp = tempfile::tempdir().unwrap();
    // Two levels that do not exist yet: the directory is created.
    let dir = tmp.path().join("incidents").join("reports");
    config.console.report_dir = dir.display().to_string();

    let mut backends = Backends::spawn(&config);
    let exec = backends.spawn_executor(&config, false);
    let mut app = App::new(&config, None);
    app.attach_executor(exec);
    app.run_command("report 20261130000000000abc");
    pump_until(&mut app, &mut backends.updates, "the report written", |a| {
        a.ui.message
            .as_ref()
            .is_some_and(|(m, _, _)| m.starts_with("report "))
    })
    .await;
    let path = dir.join("idemguard-report-20261130000000000abc.md");
    let said = &app.ui.message.as_ref().unwrap().0;
    assert!(
        said.starts_with(&format!("report written to {}:", path.display())),
        "{said}"
    );
    let md = std::fs::read_to_string(&path).unwrap();
    assert!(
        md.starts_with("# Post-incident report — 20261130000000000abc"),
        "{md}"
    );
    backends.shutdown().await;
}

per_dialect!(report_command_writes_into_the_report_dir => report_command_writes_into_the_report_dir_postgres, report_command_writes_into_the_report_dir_mysql);
