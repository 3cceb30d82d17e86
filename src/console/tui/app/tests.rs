//! The app's state logic without a service: keys → state → actions, updates fed by hand, frames
//! drawn into ratatui's `TestBackend`. Milliseconds each.

use std::collections::BTreeSet;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::*;
use crate::config::{Config, LockMode};
use crate::console::read::overview::Leak;
use crate::console::read::records::StuckRecord;
use crate::contracts::{now_ms, LockHolder};
use crate::lock::{LockScan, LockView};
use crate::ops::{ActionOutcome, ActionResult};

const DEAD_LOCK: &str = "lock:req:APP:ORDER:20261129:0193a1c2-7b3d-7c4e-8f00-aaaaaaaaaaaa";
const STUCK_ID: &str = "APP:ORDER:20261129:0193a1c2-7b3d-7c4e-8f00-bbbbbbbbbbbb";
const LEAK_ORDER: &str = "20261129230742123abcdef012345";

fn app() -> App {
    App::new(&Config::defaults(), None)
}

fn key(app: &mut App, code: KeyCode) {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
}

fn ctrl(app: &mut App, c: char) {
    app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL));
}

fn typed(app: &mut App, s: &str) {
    s.chars().for_each(|c| key(app, KeyCode::Char(c)));
}

fn screen(app: &mut App, w: u16, h: u16) -> String {
    app.ui.size = (w, h);
    app.refresh_views();
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| crate::console::tui::ui::draw(f, app)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| {
            let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
            line.trim_end().to_string() + "\n"
        })
        .collect()
}

/// A lock of a dead owner without a TTL, and the heartbeat of nobody.
fn scan() -> LockScan {
    let holder = LockHolder {
        instance: "api-dead-0a1b2c".into(),
        host: "old-host".into(),
        pid: 999,
        acquired_at: now_ms() - 300_000,
        ttl_ms: 30_000,
        fence: 4,
        nonce: "n-dead".into(),
    };
    let node = LockView::held_on("127.0.0.1:6379", holder.to_value(), -1);
    let mut view = LockView::new(
        DEAD_LOCK.into(),
        LockMode::Single,
        vec![node],
        Some(4),
        now_ms(),
    );
    let live = BTreeSet::new();
    view.judge_owner(Some(&live));
    LockScan {
        locks: vec![view],
        live_instances: Some(live),
        read_at_ms: now_ms(),
        ..LockScan::default()
    }
}

fn stuck() -> StuckRecord {
    let created = now_ms() - 300_000;
    StuckRecord {
        request_id: STUCK_ID.into(),
        order_no: None,
        owner: "api-dead-0a1b2c".into(),
        owner_alive: None,
        fence: Some(4),
        created_at: created,
        updated_at: Some(created),
        lease_until: Some(created + 30_000),
        replay_count: Some(0),
        version: Some(0),
        order_exists: false,
        order_status: None,
        foreign: false,
        found_order_no: None,
    }
}

fn leak() -> Leak {
    Leak {
        table: "payment_flow".into(),
        by: "order_no".into(),
        key: LEAK_ORDER.into(),
        rows: 2,
        first: "PAY00000001".into(),
        last: "PAY00000002".into(),
    }
}

/// Everything the Overview reads, as the collectors would send it.
fn fed() -> App {
    let mut a = app();
    a.apply(Update::Stuck(Ok(vec![stuck()])));
    a.apply(Update::Locks(scan()));
    a.apply(Update::Leaks(Ok(vec![leak()])));
    a
}

fn result(action: &'static str, target: &str) -> ActionResult {
    ActionResult {
        action,
        target: target.into(),
        outcome: ActionOutcome::Done,
        before: None,
        after: None,
        detail: format!("{action} done"),
        audit_id: Some(1),
    }
}

#[test]
fn the_console_opens_on_the_overview_and_digits_switch_views() {
    let mut a = app();
    assert_eq!(a.ui.view, View::Overview);
    for (c, v) in ['2', '3', '4', '5', '6', '7', '1'].into_iter().zip([
        View::Trace,
        View::Locks,
        View::Rates,
        View::Stuck,
        View::Audit,
        View::Dlq,
        View::Overview,
    ]) {
        key(&mut a, KeyCode::Char(c));
        assert_eq!(a.ui.view, v, "key {c}");
    }
    key(&mut a, KeyCode::BackTab);
    assert_eq!(a.ui.view, View::Dlq, "shift-tab from the first view wraps");
}

#[test]
fn the_overview_shows_what_is_wrong_and_enter_opens_its_view_or_trace() {
    let mut a = fed();
    let findings = a.findings();
    let at = |text: &str| {
        findings
            .iter()
            .position(|f| f.text.contains(text))
            .unwrap_or_else(|| panic!("no line with {text}: {findings:#?}"))
    };
    // A leaked duplicate: Enter traces the order.
    a.ui.selected.insert(View::Overview, at(LEAK_ORDER));
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.ui.view, View::Trace);
    assert_eq!(
        a.stores.trace_target,
        Some(TraceTarget::OrderNo(LEAK_ORDER.into()))
    );
    // The stuck record, listed with its dead owner: Enter traces the request.
    key(&mut a, KeyCode::Char('1'));
    let line = &findings[at(STUCK_ID)];
    assert!(line.text.contains("DEAD"), "{line:?}");
    a.ui.selected.insert(View::Overview, at(STUCK_ID));
    key(&mut a, KeyCode::Enter);
    assert_eq!(
        a.stores.trace_target,
        Some(TraceTarget::RequestId(STUCK_ID.into()))
    );
    // A summary line opens its view.
    key(&mut a, KeyCode::Char('1'));
    a.ui.selected
        .insert(View::Overview, at("with a dead owner, 1 without a TTL"));
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.ui.view, View::Locks);
    key(&mut a, KeyCode::Char('1'));
    a.ui.selected
        .insert(View::Overview, at("stuck PROCESSING record"));
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.ui.view, View::Stuck);
}

/// At 80 columns a finding's text is cut in the table (the stuck record's age and owner come
/// after its requestId); the Selected panel under it shows the selected finding whole, and at
/// 160 columns, where the table holds it, there is no panel.
#[test]
fn the_overview_at_80_columns_shows_the_selected_finding_whole() {
    let mut a = fed();
    let findings = a.findings();
    let stuck = findings
        .iter()
        .position(|f| f.text.contains(STUCK_ID))
        .expect("the stuck record is a finding");
    let tail = findings[stuck]
        .text
        .rsplit(" · ")
        .next()
        .unwrap()
        .to_string();
    a.ui.selected.insert(View::Overview, stuck);
    let narrow = screen(&mut a, 80, 24);
    let row = narrow.lines().find(|l| l.contains(STUCK_ID)).unwrap();
    assert!(
        !row.contains(&tail),
        "the table row is cut at 80 columns: {narrow}"
    );
    let panel: String = narrow
        .lines()
        .skip_while(|l| !l.contains("Selected"))
        .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        panel.contains(STUCK_ID) && panel.contains(&tail),
        "the Selected panel holds the whole finding ({tail}): {narrow}"
    );
    let wide = screen(&mut a, 200, 50);
    assert!(!wide.contains("Selected"), "{wide}");
}

#[test]
fn the_help_scrolls_at_80x24_and_is_never_cut() {
    let mut a = app();
    let s = screen(&mut a, 80, 24);
    key(&mut a, KeyCode::Char('?'));
    let first = screen(&mut a, 80, 24);
    assert_ne!(s, first);
    assert!(first.contains("Help 1–22 of"), "{first}");
    assert!(first.contains("KEYS"), "{first}");
    assert!(!first.contains(":quit"), "the end is below");
    key(&mut a, KeyCode::Char('j'));
    assert_eq!(a.ui.help, Some(1));
    key(&mut a, KeyCode::Char('G'));
    let last = screen(&mut a, 80, 24);
    assert!(last.contains(":quit") && !last.contains(" KEYS"), "{last}");
    // Every help text is there whole, wrapped inside the popup (never past its border).
    let rows = ui_state::help_rows((80, 24), None);
    let width = ui_state::help_popup_width(80) as usize - 2;
    let text_column = ui_state::help_text_column();
    assert!(
        rows.iter()
            .all(|(_, v)| text_column + v.chars().count() <= width),
        "{rows:?}"
    );
    key(&mut a, KeyCode::Char('k'));
    assert!(a.ui.help.is_some(), "k scrolls, it does not close");
    key(&mut a, KeyCode::Char('x'));
    assert_eq!(a.ui.help, None, "any other key closes it");
    key(&mut a, KeyCode::Char('?'));
    key(&mut a, KeyCode::Char('q'));
    assert!(a.ui.quit, "q in the help quits");
}

#[test]
fn the_command_line_keys_come_from_its_table() {
    let mut a = app();
    typed(&mut a, ":lo");
    key(&mut a, KeyCode::Tab);
    assert_eq!(a.ui.input, Input::Command("locks ".into()));
    key(&mut a, KeyCode::Enter);
    assert_eq!((a.ui.view, &a.ui.input), (View::Locks, &Input::Normal));
    typed(&mut a, "/dead");
    ctrl(&mut a, 'u');
    assert_eq!(a.ui.input, Input::Filter(String::new()));
    key(&mut a, KeyCode::Backspace);
    assert_eq!(
        a.ui.input,
        Input::Normal,
        "backspace on an empty line leaves it"
    );
    typed(&mut a, ":ov");
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.ui.view, View::Overview);
}

#[test]
fn a_confirmed_release_goes_to_the_executor_and_its_result_to_the_locks_view_only() {
    let mut a = fed();
    let (tx, mut rx) = mpsc::channel(8);
    a.attach_executor(tx);
    assert!(matches!(rx.try_recv(), Ok(ExecRequest::LoadAudit)));
    a.allow_actions(true);
    key(&mut a, KeyCode::Char('3'));
    key(&mut a, KeyCode::Char('x'));
    assert!(a.actions.confirm.is_some());
    typed(&mut a, "stale");
    ctrl(&mut a, 'u');
    assert_eq!(a.actions.confirm.as_ref().unwrap().typed, "");
    key(&mut a, KeyCode::Esc);
    assert!(
        a.actions.confirm.is_none() && rx.try_recv().is_err(),
        "esc: nothing sent"
    );
    key(&mut a, KeyCode::Char('x'));
    key(&mut a, KeyCode::Enter);
    match rx.try_recv() {
        Ok(ExecRequest::Run(batch, _)) => {
            assert_eq!(batch.len(), 1);
            assert_eq!(batch[0].action.target(), DEAD_LOCK);
        }
        other => panic!("expected the batch, got {other:?}"),
    }
    a.apply(Update::ActionResults(vec![result(
        "release_lock",
        DEAD_LOCK,
    )]));
    assert_eq!(a.actions.last_batch(View::Locks).len(), 1);
    assert!(a.actions.last_batch(View::Stuck).is_empty());
}

#[test]
fn the_stuck_views_last_actions_panel_shows_stucks_actions_not_locks() {
    let mut a = fed();
    a.apply(Update::ActionResults(vec![result(
        "release_lock",
        DEAD_LOCK,
    )]));
    a.apply(Update::ActionResults(vec![result("finalize", STUCK_ID)]));
    // The status line says the last result whatever the view: only the panels are compared.
    a.ui.message = None;
    key(&mut a, KeyCode::Char('5'));
    let s = screen(&mut a, 200, 20);
    assert!(s.contains("Last actions, per row"), "{s}");
    assert!(s.contains(&format!("finalize {STUCK_ID}")), "{s}");
    assert!(
        !s.contains("release_lock"),
        "a lock's action in the Stuck view:\n{s}"
    );
    key(&mut a, KeyCode::Char('3'));
    let s = screen(&mut a, 200, 20);
    assert!(
        s.contains(&format!("release_lock {DEAD_LOCK}"))
            && !s.contains(&format!("finalize {STUCK_ID}")),
        "{s}"
    );
}

#[test]
fn at_80x24_ids_stay_whole_and_the_header_says_read_only() {
    let mut a = fed();
    for (k, id) in [('3', DEAD_LOCK), ('5', STUCK_ID)] {
        key(&mut a, KeyCode::Char(k));
        let s = screen(&mut a, 80, 24);
        assert!(
            s.lines().next().unwrap().contains("read-only · refresh"),
            "{s}"
        );
        assert!(s.contains(id), "{id} cut at 80 columns:\n{s}");
    }
}

#[test]
fn updates_keep_the_selection_inside_the_filtered_rows() {
    let mut a = fed();
    key(&mut a, KeyCode::Char('3'));
    key(&mut a, KeyCode::Char('G'));
    a.ui.selected.insert(View::Locks, 5);
    a.apply(Update::Locks(scan()));
    assert_eq!(a.selected(View::Locks), 0);
    typed(&mut a, "/nothing-matches");
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.row_count(View::Locks), 0);
}

/// In production, the health line marks a plaintext or unverified backend in red words; a
/// verified one, or any backend outside production, has no mark.
#[test]
fn the_health_line_marks_a_plaintext_or_unverified_backend_in_production() {
    let mut config = Config::defaults();
    config.environment.production = true;
    config.database.url = "postgres://app@db.example.com/orders?sslmode=require".into();
    config.redis.url = "redis://cache.example.com:6379".into();
    let mut prod = App::new(&config, None);
    let shown = screen(&mut prod, 170, 10);
    let health = shown.lines().find(|l| l.contains("database")).unwrap();
    assert!(
        health.contains("database connecting UNVERIFIED"),
        "{health}"
    );
    assert!(health.contains("redis connecting PLAINTEXT"), "{health}");
    assert!(
        health.contains("payment topic connecting PLAINTEXT"),
        "{health}"
    );
    config.database.url = "postgres://app@db.example.com/orders?sslmode=verify-full".into();
    let mut verified = App::new(&config, None);
    let shown = screen(&mut verified, 170, 10);
    assert!(!shown.contains("database connecting UNVERIFIED"), "{shown}");
    config.environment.production = false;
    config.database.url = "postgres://app@db.example.com/orders?sslmode=disable".into();
    let mut local = App::new(&config, None);
    let shown = screen(&mut local, 170, 10);
    assert!(!shown.contains("PLAINTEXT"), "{shown}");
}

/// A DLQ listing of `event_ids`, the whole DLQ view on screen.
fn dlq_app(event_ids: &[String]) -> App {
    use crate::console::read::dlq::{DlqListing, DlqMessage};
    use crate::console::read::window::TimeWindow;
    let messages = event_ids
        .iter()
        .enumerate()
        .map(|(i, id)| DlqMessage::for_test(0, i as i64, LEAK_ORDER, id))
        .collect();
    let listing = DlqListing {
        topic: "test-dlq".into(),
        window: TimeWindow {
            from_ms: 0,
            to_ms: now_ms(),
        },
        messages,
        truncated: false,
        read_cost: None,
    };
    let mut a = app();
    a.apply(Update::Dlq(Ok(Box::new(listing))));
    key(&mut a, KeyCode::Char('7'));
    a
}

/// A message whose eventId holds markup, or is longer than the screen, is a row like any
/// other: every row drawn, the table's borders whole, at every width.
#[test]
fn a_hostile_or_long_event_id_never_hides_the_dlq_rows() {
    let hostile = "not-a-uuid-0193a1c27b3d<script>x</script>|[l](javascript:1)".to_string();
    let long = format!("not-a-uuid-{}", "x".repeat(120));
    let cases = [
        vec![hostile.clone()],
        vec![hostile.clone(), long.clone(), hostile.clone()],
        vec![long.clone(), long.clone(), long.clone()],
    ];
    for ids in &cases {
        for w in [80, 100, 120, 200] {
            let mut a = dlq_app(ids);
            key(&mut a, KeyCode::Down);
            let s = screen(&mut a, w, 24);
            let rows = s.lines().filter(|l| l.contains(LEAK_ORDER)).count();
            assert_eq!(rows, ids.len(), "{w} columns, rows missing:\n{s}");
            let table: Vec<&str> = s
                .lines()
                .skip_while(|l| !l.contains("DLQ ["))
                .take(ids.len() + 2)
                .collect();
            assert_whole(&table, w, &s);
        }
    }
}

/// Who dead-lettered the selected message is in the Selected pane, whole, at 100 columns (the
/// table's BY names its instance where there is room); a message without `dlq.by.*` headers
/// says so, never blank; a hostile value is drawn escaped and cut.
#[test]
fn the_dlq_view_says_which_consumer_dead_lettered_the_selected_message() {
    use crate::stream::poison::DeadLetteredBy;
    let ids = ["not-a-uuid-1".to_string(), "not-a-uuid-2".to_string()];
    let mut a = dlq_app(&ids);
    let by = DeadLetteredBy {
        group: Some("payments-eu".into()),
        instance: Some("pay-7-4242-0a1b2c".into()),
        host: Some("pay-7".into()),
        version: Some("0.9.1".into()),
        at_ms: Some(now_ms() - 90_000),
    };
    let Some(Ok(listing)) = &mut a.stores.dlq else {
        unreachable!()
    };
    listing.messages[0].dead_lettered_by = Some(by.clone());
    let hostile = format!("\x1b]0;pwned\x07{}", "h".repeat(300));
    listing.messages[1].dead_lettered_by = Some(DeadLetteredBy {
        host: Some(hostile),
        at_ms: None,
        ..by
    });
    let s = screen(&mut a, 100, 24);
    let table: Vec<&str> = s
        .lines()
        .skip_while(|l| !l.contains("DLQ ["))
        .take(ids.len() + 2)
        .collect();
    assert_whole(&table, 100, &s);
    let pane = selected_pane(&s);
    for want in [
        "instance pay-7-4242-0a1b2c",
        "host pay-7 ",
        "group payments-eu",
        "idemguard 0.9.1",
        "(1m30s ago)",
        "unparseable",
    ] {
        assert!(pane.contains(want), "{want}:\n{s}");
    }
    key(&mut a, KeyCode::Down);
    let s = screen(&mut a, 100, 24);
    let pane = selected_pane(&s);
    // Its first 127 characters shown, then `…` (the pane wraps it: compared without spaces).
    let host = format!(r"host\x1b]0;pwned\x07{}…·group", "h".repeat(127 - 16));
    assert!(
        pane.replace(' ', "").contains(&host),
        "escaped and cut:\n{s}"
    );
    assert!(!s.contains('\x1b'), "{s}");
    assert!(pane.contains("at ?"), "{s}");
    // Dead-lettered by an idemguard older than the headers.
    let mut old = dlq_app(&ids[..1]);
    for w in [100, 200] {
        let s = screen(&mut old, w, 24);
        let pane = selected_pane(&s);
        assert!(pane.contains("by unknown (no dlq.by headers)"), "{w}:\n{s}");
    }
    let s = screen(&mut old, 200, 24);
    assert!(
        s.contains(" BY ") && s.contains(" unknown (no dlq.by headers) "),
        "the BY column at 200 columns:\n{s}"
    );
}

/// The Selected pane's text, its lines joined by a space, its borders and padding left out.
fn selected_pane(s: &str) -> String {
    let lines = s.lines().skip_while(|l| !l.contains("Selected")).skip(1);
    let text: Vec<&str> = lines
        .take_while(|l| l.starts_with('│'))
        .map(|l| l.trim_matches(['│', ' ']))
        .collect();
    text.join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each line of a table runs to its right border.
fn assert_whole(table: &[&str], w: u16, s: &str) {
    for l in table {
        assert_eq!(l.chars().count(), w as usize, "{w} columns:\n{s}");
        assert!(l.ends_with(['│', '╮']), "{w} columns, border cut:\n{s}");
    }
}

/// The Stuck and Locks views share the DLQ's table: an identifying value wider than the
/// screen takes the row and is cut at the border, which stays.
#[test]
fn an_id_wider_than_the_screen_is_cut_at_the_border() {
    let long = format!(
        "APP:ORDER:20261129:{}<b>|[l](javascript:1)",
        "z".repeat(150)
    );
    let mut a = app();
    let mut s = stuck();
    s.request_id = long.clone();
    a.apply(Update::Stuck(Ok(vec![s.clone(), stuck()])));
    let mut locks = scan();
    locks.locks[0].key = format!("lock:req:{long}");
    a.apply(Update::Locks(locks));
    for (k, title) in [('5', "Stuck records ["), ('3', "Locks [")] {
        key(&mut a, KeyCode::Char(k));
        for w in [80, 120, 200] {
            let s = screen(&mut a, w, 24);
            assert!(s.contains("APP:ORDER:20261129:zzz"), "{w}:\n{s}");
            let table: Vec<&str> = s
                .lines()
                .skip_while(|l| !l.contains(title))
                .take(3)
                .collect();
            assert_eq!(table.len(), 3, "{w}:\n{s}");
            assert_whole(&table, w, &s);
        }
    }
}

/// A mistyped `:` command is answered with the command it is nearest, as the CLI's parser
/// answers a mistyped subcommand; a word near none is not given a guess.
#[test]
fn a_mistyped_command_is_told_the_nearest_one() {
    let mut a = app();
    for (typed_line, meant) in [
        (":trcae", ":trace"),
        (":lcoks", ":locks"),
        (":reprot", ":report"),
    ] {
        typed(&mut a, typed_line);
        key(&mut a, KeyCode::Enter);
        let (said, level, _) = a.ui.message.clone().unwrap();
        assert_eq!(level, Level::Error);
        assert!(
            said.contains(&format!("did you mean `{meant}`?")),
            "{typed_line}: {said}"
        );
    }
    for far in [":kubernetes", ":xy", ":dxx"] {
        typed(&mut a, far);
        key(&mut a, KeyCode::Enter);
        let said = a.ui.message.clone().unwrap().0;
        assert!(!said.contains("did you mean"), "{far}: {said}");
    }
}

/// Every key and command of the help is followed by a space before its text, the longest
/// (`:report [html] [ID]`) included.
#[test]
fn the_help_separates_each_key_from_its_text() {
    let mut a = app();
    key(&mut a, KeyCode::Char('?'));
    key(&mut a, KeyCode::Char('G'));
    let s = screen(&mut a, 120, 80);
    assert!(s.contains(":report [html] [ID] "), "{s}");
    for (k, v) in ui_state::help_rows((120, 80), None) {
        if k.is_empty() || v.is_empty() {
            continue;
        }
        let first = v.split_whitespace().next().unwrap();
        assert!(
            s.lines()
                .any(|l| l.contains(&k) && !l.contains(&format!("{k}{first}"))),
            "`{k}` runs into its text `{first}`:\n{s}"
        );
    }
}

/// A DLQ listing as [`dlq_app`] makes it, with the second message in the state `redriven` says
/// (`None`: as read before the redrive, "would apply"; `Some(id)`: redriven as audit row `id`).
fn dlq_listing_update(event_ids: &[String], redriven: Option<i64>) -> Update {
    use crate::console::read::dlq::{DlqListing, DlqMessage, RedriveRecord, Verdict};
    use crate::console::read::window::TimeWindow;
    let mut messages: Vec<DlqMessage> = event_ids
        .iter()
        .enumerate()
        .map(|(i, id)| DlqMessage::for_test(0, i as i64, LEAK_ORDER, id))
        .collect();
    messages[1].verdict = Verdict::WouldApply;
    if let Some(audit_id) = redriven {
        messages[1].verdict = Verdict::AlreadyApplied {
            how: "the order is PAID".into(),
        };
        messages[1].redriven = Some(RedriveRecord {
            audit_id,
            outcome: "done".into(),
            operator: "test".into(),
            at_ms: now_ms(),
        });
    }
    Update::Dlq(Ok(Box::new(DlqListing {
        topic: "test-dlq".into(),
        window: TimeWindow {
            from_ms: 0,
            to_ms: now_ms(),
        },
        messages,
        truncated: false,
        read_cost: None,
    })))
}

/// The DLQ view narrowed to `/would apply`, its one row redriven: the batch the executor got,
/// then its result and the DLQ read again, as the executor sends them.
fn redriven_under_a_filter() -> App {
    let ids: Vec<String> = (0..3).map(|i| format!("not-a-uuid-{i}")).collect();
    let mut a = dlq_app(&ids);
    a.apply(dlq_listing_update(&ids, None));
    let (tx, mut rx) = mpsc::channel(8);
    a.attach_executor(tx);
    a.allow_actions(true);
    typed(&mut a, "/would apply");
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.row_count(View::Dlq), 1);
    key(&mut a, KeyCode::Char('r'));
    key(&mut a, KeyCode::Enter);
    let target = loop {
        match rx.try_recv() {
            Ok(ExecRequest::Run(batch, _)) => break batch[0].action.target().to_string(),
            Ok(_) => continue,
            Err(e) => panic!("no batch sent: {e:?}"),
        }
    };
    assert_eq!(target, "dlq:test-dlq:0:1");
    let mut done = result("redrive", &target);
    done.detail = "published to payment.succeeded partition 0".into();
    a.apply(Update::BatchEnded(crate::ops::BatchSummary {
        done: 1,
        refused: 0,
        changed: 0,
        errors: 0,
        not_attempted: 0,
        cancelled: false,
        results: vec![done],
    }));
    a.apply(dlq_listing_update(&ids, Some(7)));
    a
}

/// A redrive changes the cells the operator's filter matched ("would apply" becomes "already
/// applied"): the row stays on screen under that filter, marked with its result, until the
/// operator changes the filter.
#[test]
fn a_row_redriven_under_a_filter_stays_in_view() {
    let mut a = redriven_under_a_filter();
    assert_eq!(a.row_count(View::Dlq), 1, "the redriven row left the view");
    let s = screen(&mut a, 220, 24);
    assert!(s.contains("DLQ [1 of 3 · filter /would apply]"), "{s}");
    let row = s
        .lines()
        .find(|l| l.contains("not-a-uuid-1"))
        .unwrap_or_else(|| panic!("no row:\n{s}"));
    assert!(row.contains("[done]") && row.contains("done #7"), "{row}");
    typed(&mut a, "/would apply");
    key(&mut a, KeyCode::Enter);
    assert_eq!(
        a.row_count(View::Dlq),
        0,
        "a filter typed again is applied as typed"
    );
}

/// The result's marker takes a place of its own on the row: the DLQ row's AGE is still shown.
#[test]
fn a_rows_result_marker_leaves_its_age_shown() {
    let mut a = redriven_under_a_filter();
    let s = screen(&mut a, 220, 24);
    let row = s.lines().find(|l| l.contains("not-a-uuid-1")).unwrap();
    let age = crate::console::format::age(60_000);
    let age_at = row.find(&age[..2]);
    assert!(
        row.contains("[done]") && age_at.is_some_and(|i| i < 6),
        "the AGE cell is covered:\n{row}"
    );
}

/// One action's result is said once: on its row of the view's panel — not again as the panel's
/// headline, nor on the bottom line while that view is on screen; an operator on another view
/// is told on the bottom line.
#[test]
fn an_actions_result_is_said_once() {
    let mut a = redriven_under_a_filter();
    let s = screen(&mut a, 220, 30);
    let detail = "published to payment.succeeded partition 0";
    assert_eq!(s.matches(detail).count(), 1, "{s}");
    let ids: Vec<String> = (0..3).map(|i| format!("not-a-uuid-{i}")).collect();
    let mut b = dlq_app(&ids);
    b.apply(dlq_listing_update(&ids, None));
    key(&mut b, KeyCode::Char('1'));
    let mut done = result("redrive", "dlq:test-dlq:0:1");
    done.detail = detail.into();
    b.apply(Update::ActionResults(vec![done]));
    let said = b.ui.message.clone().unwrap().0;
    assert!(said.contains(detail), "{said}");
}

/// `y` copies the ID as it is shown (escaped: it may be pasted into a shell) and says so; a view
/// without an ID copies the command that opens the console on it.
#[test]
fn y_copies_the_id_shown_or_the_command_that_opens_the_view() {
    let mut a = App::new(&Config::defaults(), None);
    key(&mut a, KeyCode::Char('4'));
    key(&mut a, KeyCode::Char('y'));
    assert_eq!(
        a.take_clipboard().as_deref(),
        Some("idemguard console --view rates")
    );
    let said = a.ui.message.as_ref().map(|(m, _, _)| m.as_str());
    assert_eq!(
        said,
        Some("copied to the clipboard: idemguard console --view rates")
    );
    a.trace("ORDER\x1b]0;pwned\x07");
    key(&mut a, KeyCode::Char('y'));
    assert_eq!(
        a.take_clipboard().as_deref(),
        Some("ORDER\\x1b]0;pwned\\x07")
    );
}
