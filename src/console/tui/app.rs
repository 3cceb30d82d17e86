//! The console's state, owned by the UI task alone: what the collectors sent (applied with
//! [`App::apply`]), what the operator does (keys, [`App::handle_key`]), and nothing else — no
//! locks, no shared mutable state. Drawing reads it ([`crate::console::tui::ui::draw`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crossterm::event::{Event, KeyEvent, KeyEventKind};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, EnvironmentConfig};
use crate::contracts::{keys, now_ms, TraceTarget};

use crate::console::columns;
use crate::console::read::locks::TraceKeys;
use crate::console::read::records::{annotate_stuck, StuckRecord, TraceIds, TraceRows};
use crate::console::read::store::{PaymentIndex, TraceLog};
use crate::console::read::timeline::{self, Timeline};
use crate::console::read::topics::PartitionLag;
use crate::console::read::trace::{self, TracePieces};
use crate::console::tui::backend::{BackendId, ExecRequest, Focus, TopicProgress, Update};
use crate::console::tui::confirm::{self, Confirm, RowResult};
use crate::console::tui::keymap::{self, Command, UiAction, View, REFRESH_STEPS};
use crate::lock::LockScan;
use crate::ops::{ActionResult, AuditRow};

/// How often the timeline's relative times (ages, PTTLs) are recomputed without new data.
const TIMELINE_AGES: Duration = Duration::from_millis(500);

/// A view's filter: case-insensitive text; `invert` keeps the rows that do NOT contain it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub invert: bool,
}

impl Filter {
    /// `foo` or `!foo` as typed after `/`.
    pub fn parse(typed: &str) -> Filter {
        match typed.strip_prefix('!') {
            Some(rest) => Filter {
                text: rest.to_string(),
                invert: true,
            },
            None => Filter {
                text: typed.to_string(),
                invert: false,
            },
        }
    }
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
    /// As the operator would type it.
    pub fn typed(&self) -> String {
        format!("{}{}", if self.invert { "!" } else { "" }, self.text)
    }
}

/// What the bottom line is reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Normal,
    Command(String),
    Filter(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Connecting,
    Up,
    /// Answering, but part of it is not (a RedLock node).
    Degraded(String),
    Down(String),
}

#[derive(Debug, Clone)]
pub struct BackendState {
    pub health: Health,
    /// When it last delivered good data (epoch ms).
    pub last_ok_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Error,
}

pub struct App {
    pub env: EnvironmentConfig,
    pub view: View,
    pub input: Input,
    pub filters: BTreeMap<View, Filter>,
    pub selected: BTreeMap<View, usize>,
    pub paused: bool,
    paused_at_ms: Option<i64>,
    pub refresh: Duration,
    pub show_help: bool,
    /// Where log lines go while the console owns the terminal (shown in the help screen).
    pub log_file: Option<String>,
    pub message: Option<(String, Level, Instant)>,
    pub quit: bool,
    /// Set when the screen must be drawn again.
    pub dirty: bool,
    pub backends: BTreeMap<BackendId, BackendState>,
    pub backend_targets: BTreeMap<BackendId, String>,
    pub stuck_threshold: Duration,

    // What the collectors sent.
    /// What the Trace view traces, parsed where it was typed.
    pub trace_target: Option<TraceTarget>,
    pub trace_rows: Option<TraceRows>,
    pub trace_keys: Option<TraceKeys>,
    pub trace_log: TraceLog,
    /// The trace target's events read from the whole trace topic ([`Update::TraceHistory`]).
    trace_history: Option<Vec<crate::contracts::TraceEvent>>,
    pub payments: PaymentIndex,
    pub trace_topic: Option<TopicProgress>,
    pub payment_topic: Option<TopicProgress>,
    pub lag: Option<Result<Vec<PartitionLag>, String>>,
    pub locks: Option<LockScan>,
    pub stuck: Option<Vec<StuckRecord>>,
    pub live_instances: Option<BTreeSet<String>>,

    /// Rows of the Locks and Stuck views that pass their filter (indices into the data).
    pub filtered: BTreeMap<View, Vec<usize>>,
    /// The trace view's timeline as last built ([`App::refresh_views`]): rebuilt when its data
    /// changed or its relative times aged, never more than once per frame.
    pub trace_view: Option<Timeline>,
    trace_stale: bool,
    trace_built_at: Option<Instant>,
    /// The last text copied with `y` (and written to the terminal as OSC 52).
    pub copied: Option<String>,
    clipboard_out: Option<String>,
    focus: Option<watch::Sender<Focus>>,

    // Actions (issue 8).
    /// `--allow-actions` or `environment.allow_actions`: otherwise the action keys are greyed
    /// out and only say how to enable them.
    pub actions_enabled: bool,
    pub dialect: crate::config::Dialect,
    /// Tagged rows per view (lock keys, requestIds): survive refreshes and re-sorting.
    pub tagged: BTreeMap<View, BTreeSet<String>>,
    /// The confirmation popup, when open: every key goes to it.
    pub confirm: Option<Confirm>,
    /// The result of the last action on each target (lock key / requestId).
    pub results: BTreeMap<String, RowResult>,
    /// The last batch's results, in order (shown under the table).
    pub last_batch: Vec<ActionResult>,
    /// Confirmed batches not yet handed to the executor (tests read them here when no
    /// executor is attached).
    pub confirmed: Vec<Vec<confirm::Planned>>,
    pub audit: Option<Result<Vec<AuditRow>, String>>,
    executor: Option<mpsc::Sender<ExecRequest>>,
}

impl App {
    /// `focus`: the collectors' watch channel (`None` in tests that feed updates by hand).
    pub fn new(config: &Config, focus: Option<watch::Sender<Focus>>) -> App {
        let backends = BackendId::ALL
            .iter()
            .map(|b| {
                (
                    *b,
                    BackendState {
                        health: Health::Connecting,
                        last_ok_ms: None,
                    },
                )
            })
            .collect();
        let backend_targets = BackendId::ALL
            .iter()
            .map(|b| (*b, b.target(config)))
            .collect();
        App {
            env: config.environment.clone(),
            view: View::Trace,
            input: Input::Normal,
            filters: BTreeMap::new(),
            selected: BTreeMap::new(),
            paused: false,
            paused_at_ms: None,
            refresh: config.console.refresh,
            show_help: false,
            log_file: None,
            message: None,
            quit: false,
            dirty: true,
            backends,
            backend_targets,
            stuck_threshold: config.console.stuck_threshold,
            trace_target: None,
            trace_rows: None,
            trace_keys: None,
            trace_log: TraceLog::default(),
            trace_history: None,
            payments: PaymentIndex::default(),
            trace_topic: None,
            payment_topic: None,
            lag: None,
            locks: None,
            stuck: None,
            live_instances: None,
            filtered: BTreeMap::new(),
            trace_view: None,
            trace_stale: true,
            trace_built_at: None,
            copied: None,
            clipboard_out: None,
            focus,
            actions_enabled: config.environment.allow_actions,
            dialect: config.dialect(),
            tagged: BTreeMap::new(),
            confirm: None,
            results: BTreeMap::new(),
            last_batch: Vec::new(),
            confirmed: Vec::new(),
            audit: None,
            executor: None,
        }
    }

    /// Enable the action keys (`--allow-actions`; `environment.allow_actions` already does).
    pub fn allow_actions(&mut self, allow: bool) {
        self.actions_enabled |= allow;
    }

    /// Where confirmed batches go (see [`crate::console::tui::backend::Backends::spawn_executor`]).
    pub fn attach_executor(&mut self, tx: mpsc::Sender<ExecRequest>) {
        self.executor = Some(tx);
        self.request(ExecRequest::LoadAudit);
    }

    fn request(&mut self, req: ExecRequest) {
        let Some(tx) = &self.executor else {
            if let ExecRequest::Run(batch) = req {
                self.confirmed.push(batch);
            }
            return;
        };
        if let Err(e) = tx.try_send(req) {
            let what = match e.into_inner() {
                ExecRequest::Run(batch) => {
                    self.confirmed.push(batch);
                    "the batch"
                }
                ExecRequest::LoadAudit => "the audit reload",
                ExecRequest::Report(_) => "the report",
            };
            self.say(
                format!("the executor is busy; {what} was not sent — try again"),
                Level::Error,
            );
        }
    }

    /// "Now" for every relative time on screen; frozen while paused.
    pub fn now_ms(&self) -> i64 {
        self.paused_at_ms.unwrap_or_else(now_ms)
    }

    pub fn filter(&self, view: View) -> Filter {
        self.filters.get(&view).cloned().unwrap_or_default()
    }

    pub fn selected(&self, view: View) -> usize {
        self.selected.get(&view).copied().unwrap_or(0)
    }

    // -----------------------------------------------------------------------------------------
    // Input
    // -----------------------------------------------------------------------------------------

    pub fn handle_event(&mut self, ev: Event) {
        match ev {
            Event::Key(k) if k.kind != KeyEventKind::Release => self.handle_key(k),
            Event::Resize(..) => self.dirty = true,
            Event::Paste(text) => {
                if let Input::Command(s) | Input::Filter(s) = &mut self.input {
                    s.push_str(text.trim());
                    self.dirty = true;
                }
            }
            _ => {}
        }
    }

    pub fn handle_key(&mut self, key: KeyEvent) {
        use crossterm::event::{KeyCode, KeyModifiers};
        self.dirty = true;
        // The confirmation popup takes every key until Enter (run) or Esc (cancel).
        if let Some(c) = &mut self.confirm {
            match key.code {
                KeyCode::Esc => {
                    self.confirm = None;
                    self.say("cancelled: nothing was done", Level::Info);
                }
                KeyCode::Enter => match c.missing() {
                    Some(m) => self.say(m, Level::Error),
                    None => {
                        let batch = c.confirmed();
                        let n = batch.len();
                        self.confirm = None;
                        self.tagged.remove(&self.view);
                        self.request(ExecRequest::Run(batch));
                        self.say(format!("running {n} action(s)…"), Level::Info);
                    }
                },
                KeyCode::Backspace => {
                    c.typed.pop();
                }
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    self.confirm = None
                }
                KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    c.typed.clear()
                }
                KeyCode::Char(ch) => c.typed.push(ch),
                _ => {}
            }
            return;
        }
        // The command and filter lines take every key until Enter or Esc.
        if let Input::Command(line) | Input::Filter(line) = &mut self.input {
            match key.code {
                KeyCode::Esc => self.input = Input::Normal,
                KeyCode::Enter => {
                    let line = std::mem::take(line);
                    match std::mem::replace(&mut self.input, Input::Normal) {
                        Input::Command(_) => self.run_command(&line),
                        Input::Filter(_) => self.set_filter(Filter::parse(line.trim())),
                        Input::Normal => {}
                    }
                }
                // Backspace on an empty line leaves it, as in k9s.
                KeyCode::Backspace if line.pop().is_none() => self.input = Input::Normal,
                KeyCode::Backspace => {}
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    self.quit = true
                }
                KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => line.clear(),
                KeyCode::Tab => {
                    if let Input::Command(l) = &mut self.input {
                        complete_command(l);
                    }
                }
                KeyCode::Char(c) => line.push(c),
                _ => {}
            }
            return;
        }
        if self.show_help {
            // Any key closes the help; q still quits.
            self.show_help = false;
            if keymap::action_for(&key) == Some(UiAction::Quit) {
                self.quit = true;
            }
            return;
        }
        let Some(action) = keymap::action_for(&key) else {
            return;
        };
        self.act(action);
    }

    pub fn act(&mut self, action: UiAction) {
        self.dirty = true;
        match action {
            UiAction::Quit => self.quit = true,
            UiAction::Help => self.show_help = true,
            UiAction::CommandLine => self.input = Input::Command(String::new()),
            UiAction::Filter => self.input = Input::Filter(String::new()),
            UiAction::TagOrPause if matches!(self.view, View::Locks | View::Stuck) => {
                self.toggle_tag()
            }
            UiAction::Release => self.propose_release(),
            UiAction::Finalize => self.propose_finalize(),
            UiAction::Pause | UiAction::TagOrPause => {
                self.paused = !self.paused;
                self.paused_at_ms = self.paused.then(now_ms);
                self.say(
                    if self.paused {
                        "paused: the collectors stop polling (p resumes)"
                    } else {
                        "resumed"
                    },
                    Level::Info,
                );
                self.publish_focus();
            }
            UiAction::Faster | UiAction::Slower => {
                let i = REFRESH_STEPS
                    .iter()
                    .position(|d| *d >= self.refresh)
                    .unwrap_or(REFRESH_STEPS.len() - 1);
                let i = if action == UiAction::Faster {
                    i.saturating_sub(1)
                } else {
                    (i + 1).min(REFRESH_STEPS.len() - 1)
                };
                self.set_refresh(REFRESH_STEPS[i]);
            }
            UiAction::Copy => self.copy_selected(),
            UiAction::Up => self.move_selection(-1),
            UiAction::Down => self.move_selection(1),
            UiAction::PageUp => self.move_selection(-20),
            UiAction::PageDown => self.move_selection(20),
            UiAction::Top => self.move_selection(i64::MIN / 2),
            UiAction::Bottom => self.move_selection(i64::MAX / 2),
            UiAction::NextView => self.show((self.view.index() + 1) % View::ALL.len()),
            UiAction::PrevView => {
                self.show((self.view.index() + View::ALL.len() - 1) % View::ALL.len())
            }
            UiAction::Show(v) => self.show_view(v),
            UiAction::Drill => self.drill(),
            UiAction::Back => {
                if !self.filter(self.view).is_empty() {
                    self.set_filter(Filter::default());
                }
            }
        }
    }

    fn show(&mut self, index: usize) {
        self.show_view(View::ALL[index]);
    }

    fn show_view(&mut self, v: View) {
        self.view = v;
        self.publish_focus();
        if v == View::Audit {
            self.request(ExecRequest::LoadAudit);
        }
    }

    fn say(&mut self, text: impl Into<String>, level: Level) {
        self.message = Some((text.into(), level, Instant::now()));
    }

    /// Runs a `:` command line.
    pub fn run_command(&mut self, line: &str) {
        match keymap::parse_command(line) {
            Ok(Command::Trace(id)) => self.trace(&id),
            Ok(Command::Show(v)) => self.show_view(v),
            Ok(Command::Refresh(d)) => self.set_refresh(d),
            Ok(Command::Report(id)) => {
                let ids = self.resolved_ids();
                // The typed ID is parsed here, at the edge; the resolved IDs are typed already.
                match id
                    .map(|id| TraceTarget::classify(&id))
                    .or(ids.order_no.map(TraceTarget::OrderNo))
                    .or(ids.request_id.map(TraceTarget::RequestId))
                    .or_else(|| self.trace_target.clone())
                {
                    Some(target) if self.executor.is_some() => {
                        self.say(
                            format!("writing the report of {}…", target.id()),
                            Level::Info,
                        );
                        self.request(ExecRequest::Report(target));
                    }
                    Some(_) => self.say(
                        "no executor: reports are written by `idemguard report --id ID`",
                        Level::Error,
                    ),
                    None => self.say(
                        ":report needs an ID (or trace an order first)",
                        Level::Error,
                    ),
                }
            }
            Ok(Command::Help) => self.show_help = true,
            Ok(Command::Quit) => self.quit = true,
            Err(e) => self.say(e, Level::Error),
        }
    }

    /// Trace an orderNo, requestId or eventId as typed: parsed here, once.
    pub fn trace(&mut self, id: &str) {
        self.trace_target(TraceTarget::classify(id));
    }

    /// Trace a parsed target.
    pub fn trace_target(&mut self, target: TraceTarget) {
        self.view = View::Trace;
        if self.trace_target.as_ref() != Some(&target) {
            self.trace_target = Some(target.clone());
            self.trace_rows = None;
            self.trace_keys = None;
            self.trace_history = None;
            self.selected.insert(View::Trace, 0);
        }
        self.trace_stale = true;
        let kind = timeline::kind_of(&target).replace('_', " ");
        self.say(format!("tracing {kind} {}", target.id()), Level::Info);
        self.publish_focus();
    }

    fn set_refresh(&mut self, d: Duration) {
        self.refresh = d;
        self.say(
            format!("refresh every {}", humantime::format_duration(d)),
            Level::Info,
        );
        self.publish_focus();
    }

    fn set_filter(&mut self, f: Filter) {
        if f.is_empty() {
            self.filters.remove(&self.view);
        } else {
            self.filters.insert(self.view, f);
        }
        self.selected.insert(self.view, 0);
        self.refilter(self.view);
    }

    fn move_selection(&mut self, delta: i64) {
        let n = self.row_count(self.view) as i64;
        let cur = self.selected(self.view) as i64;
        let next = if n == 0 {
            0
        } else {
            (cur.saturating_add(delta)).clamp(0, n - 1)
        };
        self.selected.insert(self.view, next as usize);
    }

    /// Rows the current view lists after its filter.
    pub fn row_count(&self, view: View) -> usize {
        match view {
            View::Trace => self.timeline_rows().len(),
            View::Locks | View::Stuck => self.filtered.get(&view).map_or(0, Vec::len),
            View::Rates => self.rate_rows().len(),
            View::Audit => self.audit_rows().len(),
        }
    }

    /// Enter: trace what the selected row names.
    fn drill(&mut self) {
        match self.view {
            View::Locks => {
                let Some(row) = self.selected_lock() else {
                    return;
                };
                match keys::ids_of_lock(&row.key) {
                    (Some(o), _) => self.trace(&o),
                    (_, Some(r)) => self.trace(&r),
                    _ => self.say(
                        format!("{} names no order or request to trace", row.key),
                        Level::Error,
                    ),
                }
            }
            View::Stuck => {
                if let Some(r) = self.selected_stuck() {
                    let id = r.request_id.clone();
                    self.trace(&id);
                }
            }
            View::Trace if self.trace_target.is_none() => {
                self.input = Input::Command("trace ".into())
            }
            _ => {}
        }
    }

    fn copy_selected(&mut self) {
        let text = match self.view {
            View::Trace => {
                let ids = self.resolved_ids();
                ids.order_no
                    .or(ids.request_id)
                    .or(ids.event_id)
                    .or_else(|| self.trace_target.as_ref().map(|t| t.id().to_string()))
            }
            View::Locks => self.selected_lock().map(|l| l.key.clone()),
            View::Stuck => self.selected_stuck().map(|s| s.request_id.clone()),
            View::Audit => self
                .audit_rows()
                .get(self.selected(View::Audit))
                .map(|r| r.target.clone()),
            View::Rates => None,
        };
        match text {
            Some(t) => {
                self.say(format!("copied {t}"), Level::Info);
                self.copied = Some(t.clone());
                self.clipboard_out = Some(t);
            }
            None => self.say("nothing to copy here", Level::Error),
        }
    }

    /// Text to put on the clipboard (written by the terminal loop as OSC 52).
    pub fn take_clipboard(&mut self) -> Option<String> {
        self.clipboard_out.take()
    }

    pub fn selected_lock(&self) -> Option<&crate::lock::LockView> {
        let i = *self
            .filtered
            .get(&View::Locks)?
            .get(self.selected(View::Locks))?;
        self.locks.as_ref()?.locks.get(i)
    }

    /// The rows an action applies to: the tagged rows of the view, else the selected one.
    fn action_rows<T>(
        &self,
        view: View,
        all: &[T],
        id: impl Fn(&T) -> &str,
        selected: Option<&T>,
    ) -> Vec<usize> {
        let tagged = self.tagged.get(&view).filter(|t| !t.is_empty());
        match tagged {
            Some(t) => all
                .iter()
                .enumerate()
                .filter(|(_, r)| t.contains(id(r)))
                .map(|(i, _)| i)
                .collect(),
            None => selected
                .and_then(|s| all.iter().position(|r| std::ptr::eq(r, s)))
                .into_iter()
                .collect(),
        }
    }

    fn read_only_hint(&mut self, what: &str) {
        self.say(
            format!("read-only: {what} is off — restart with `idemguard console --allow-actions` or set environment.allow_actions = true"),
            Level::Error,
        );
    }

    /// Open the confirmation — or, read-only, send the attempt straight to the executor, which
    /// refuses it and audits the refusal (every attempt is in `ops_audit`), and say how to
    /// enable actions.
    fn offer(&mut self, c: Confirm, what: &str) {
        if self.actions_enabled {
            self.confirm = Some(c);
        } else {
            self.request(ExecRequest::Run(c.planned));
            self.read_only_hint(what);
        }
    }

    fn toggle_tag(&mut self) {
        let id = match self.view {
            View::Locks => self.selected_lock().map(|l| l.key.clone()),
            View::Stuck => self.selected_stuck().map(|s| s.request_id.clone()),
            _ => None,
        };
        let Some(id) = id else { return };
        let set = self.tagged.entry(self.view).or_default();
        if !set.remove(&id) {
            set.insert(id);
        }
        let n = set.len();
        self.say(format!("{n} row(s) tagged"), Level::Info);
        self.move_selection(1);
    }

    fn propose_release(&mut self) {
        if self.view != View::Locks {
            return self.say("x releases locks: open the Locks view (2)", Level::Error);
        }
        let Some(scan) = &self.locks else { return };
        let idx = self.action_rows(
            View::Locks,
            &scan.locks,
            |l| l.key.as_str(),
            self.selected_lock(),
        );
        if idx.is_empty() {
            return self.say("no lock selected", Level::Error);
        }
        let rows: Vec<&crate::lock::LockView> = idx.iter().map(|i| &scan.locks[*i]).collect();
        let c = confirm::release(&rows, self.now_ms(), &self.env.name, self.env.production);
        self.offer(c, "releasing a lock");
    }

    fn propose_finalize(&mut self) {
        if self.view != View::Stuck {
            return self.say(
                "f finalizes stuck records: open the Stuck view (4)",
                Level::Error,
            );
        }
        let Some(stuck) = &self.stuck else { return };
        let idx = self.action_rows(
            View::Stuck,
            stuck,
            |s| s.request_id.as_str(),
            self.selected_stuck(),
        );
        if idx.is_empty() {
            return self.say("no record selected", Level::Error);
        }
        let rows: Vec<&StuckRecord> = idx.iter().map(|i| &stuck[*i]).collect();
        let c = confirm::finalize(&rows, self.dialect, &self.env.name, self.env.production);
        self.offer(c, "finalizing a record");
    }

    /// The Audit view's rows after its filter.
    pub fn audit_rows(&self) -> Vec<&AuditRow> {
        let f = self.filter(View::Audit);
        let needle = f.text.to_lowercase();
        match &self.audit {
            Some(Ok(rows)) => rows
                .iter()
                .filter(|r| columns::passes(&columns::audit_cells(r), &needle, f.invert))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn is_tagged(&self, view: View, id: &str) -> bool {
        self.tagged.get(&view).is_some_and(|t| t.contains(id))
    }

    pub fn selected_stuck(&self) -> Option<&StuckRecord> {
        let i = *self
            .filtered
            .get(&View::Stuck)?
            .get(self.selected(View::Stuck))?;
        self.stuck.as_ref()?.get(i)
    }

    /// Periodic: expire the status message; relative times move on, so draw again.
    pub fn on_tick(&mut self) {
        if self
            .message
            .as_ref()
            .is_some_and(|(_, _, at)| at.elapsed() > Duration::from_secs(5))
        {
            self.message = None;
        }
        if !self.paused {
            self.dirty = true;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Updates from the collectors
    // -----------------------------------------------------------------------------------------

    pub fn apply(&mut self, update: Update) {
        self.dirty = true;
        let backend = update.backend();
        match update {
            Update::Stuck(Ok(rows)) => {
                self.ok(backend);
                self.stuck = Some(rows);
                self.annotate_stuck();
                self.refilter(View::Stuck);
            }
            Update::Stuck(Err(e)) => self.down(backend, e),
            Update::ActionResults(results) => {
                let done = results
                    .iter()
                    .filter(|r| r.outcome == crate::ops::ActionOutcome::Done)
                    .count();
                let level = if done == results.len() {
                    Level::Info
                } else {
                    Level::Error
                };
                let summary = match results.as_slice() {
                    [one] => format!(
                        "{} {}: {} — {}",
                        one.action, one.target, one.outcome, one.detail
                    ),
                    many => format!(
                        "{done} of {} action(s) done; per-row results below the table",
                        many.len()
                    ),
                };
                for r in &results {
                    self.results.insert(
                        r.target.clone(),
                        RowResult {
                            outcome: r.outcome,
                            detail: r.detail.clone(),
                        },
                    );
                }
                self.last_batch = results;
                self.say(summary, level);
            }
            Update::Audit(rows) => self.audit = Some(rows),
            Update::ReportWritten(Ok(m)) => self.say(m, Level::Info),
            Update::ReportWritten(Err(e)) => {
                self.say(format!("report not written: {e}"), Level::Error)
            }
            Update::TraceRows { target, result } => match result {
                Ok(rows) => {
                    self.ok(backend);
                    if self.trace_target.as_ref() == Some(&target) {
                        self.trace_rows = Some(rows);
                        self.trace_stale = true;
                        self.publish_focus();
                    }
                }
                Err(e) => self.down(backend, e),
            },
            Update::Locks(scan) => {
                let main = scan.nodes.iter().find(|n| n.role == "main");
                match main {
                    Some(m) if !m.ok => {
                        let e = m.error.clone().unwrap_or_default();
                        self.down(backend, e);
                        // The RedLock nodes may still have answered: keep what they said.
                        if scan.nodes.iter().any(|n| n.role == "redlock" && n.ok) {
                            self.locks = Some(scan);
                            self.refilter(View::Locks);
                        }
                    }
                    _ => {
                        match scan.first_error() {
                            Some(e) => self.degraded(backend, e),
                            None => self.ok(backend),
                        }
                        self.live_instances = scan.live_instances.clone();
                        self.locks = Some(scan);
                        self.annotate_stuck();
                        self.refilter(View::Locks);
                    }
                }
            }
            Update::TraceKeys { ids, result } => match result {
                Ok(k) => {
                    if ids == self.resolved_ids() {
                        self.trace_keys = Some(k);
                        self.trace_stale = true;
                    }
                }
                Err(e) => self.down(backend, e),
            },
            Update::TraceEvents(events) => {
                self.ok(backend);
                for e in events {
                    self.trace_log.ingest(e);
                }
                self.trace_stale = true;
                self.publish_focus();
            }
            Update::TraceHistory { ids, result } => match result {
                Ok(events) => {
                    self.ok(backend);
                    if ids == self.resolved_ids() {
                        self.trace_history = Some(events);
                        self.trace_stale = true;
                    }
                }
                Err(e) => self.down(backend, e),
            },
            Update::TraceTopic(Ok(p)) => {
                self.ok(backend);
                self.trace_topic = Some(p);
            }
            Update::TraceTopic(Err(e)) => self.down(backend, e),
            Update::PaymentMessages(msgs) => {
                self.ok(backend);
                for m in msgs {
                    self.payments.ingest(m);
                }
                self.trace_stale = true;
                self.publish_focus();
            }
            Update::PaymentTopic { progress, lag } => {
                match progress {
                    Ok(p) => {
                        match &lag {
                            Err(e) => self.degraded(backend, e.clone()),
                            Ok(_) => self.ok(backend),
                        }
                        self.payment_topic = Some(p);
                    }
                    Err(e) => self.down(backend, e),
                }
                if lag.is_ok() || self.lag.is_none() {
                    self.lag = Some(lag);
                }
            }
        }
    }

    fn ok(&mut self, b: BackendId) {
        let s = self
            .backends
            .get_mut(&b)
            .expect("every backend has a state");
        s.health = Health::Up;
        s.last_ok_ms = Some(now_ms());
    }

    fn degraded(&mut self, b: BackendId, e: String) {
        let s = self
            .backends
            .get_mut(&b)
            .expect("every backend has a state");
        s.health = Health::Degraded(e);
        s.last_ok_ms = Some(now_ms());
    }

    fn down(&mut self, b: BackendId, e: String) {
        self.backends
            .get_mut(&b)
            .expect("every backend has a state")
            .health = Health::Down(e);
    }

    fn annotate_stuck(&mut self) {
        // Liveness is only known while Redis answers; otherwise it is shown as unknown.
        let redis_up = !matches!(self.backends[&BackendId::Redis].health, Health::Down(_));
        let live = if redis_up {
            self.live_instances.as_ref()
        } else {
            None
        };
        if let Some(rows) = &mut self.stuck {
            annotate_stuck(rows, live);
        }
    }

    /// Recompute which rows of a table view pass its filter (on new data or a new filter only,
    /// never per frame: a 10,000-row view stays cheap to draw).
    fn refilter(&mut self, view: View) {
        let f = self.filter(view);
        let needle = f.text.to_lowercase();
        let now = self.now_ms();
        let rows: Vec<usize> = match view {
            View::Locks => self
                .locks
                .as_ref()
                .map(|s| {
                    s.locks
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| {
                            columns::passes(&columns::lock_cells(l, now), &needle, f.invert)
                        })
                        .map(|(i, _)| i)
                        .collect()
                })
                .unwrap_or_default(),
            View::Stuck => self
                .stuck
                .as_ref()
                .map(|s| {
                    s.iter()
                        .enumerate()
                        .filter(|(_, r)| {
                            columns::passes(&columns::stuck_cells(r, now), &needle, f.invert)
                        })
                        .map(|(i, _)| i)
                        .collect()
                })
                .unwrap_or_default(),
            _ => return,
        };
        let n = rows.len();
        self.filtered.insert(view, rows);
        if self.selected(view) >= n {
            self.selected.insert(view, n.saturating_sub(1));
        }
    }

    // -----------------------------------------------------------------------------------------
    // The trace
    // -----------------------------------------------------------------------------------------

    /// The IDs the trace target resolved to, from every source that answered.
    pub fn resolved_ids(&self) -> TraceIds {
        match &self.trace_target {
            Some(t) => {
                trace::resolve_ids(t, self.trace_rows.as_ref(), &self.payments, &self.trace_log)
            }
            None => TraceIds::default(),
        }
    }

    /// Tell the collectors what the UI looks at (only when it changed).
    fn publish_focus(&mut self) {
        let Some(tx) = &self.focus else { return };
        let next = Focus {
            target: self.trace_target.clone(),
            ids: self.resolved_ids(),
            tracing: self.view == View::Trace,
            paused: self.paused,
            refresh: self.refresh,
        };
        tx.send_if_modified(|f| {
            if *f != next {
                *f = next;
                true
            } else {
                false
            }
        });
    }

    /// The timeline of the current trace target, from whatever the collectors have sent: the
    /// one assembly of a trace ([`trace::assemble`]) over the TUI's stores.
    pub fn timeline(&self) -> Option<Timeline> {
        let target = self.trace_target.as_ref()?;
        let pieces = TracePieces {
            rows: self.trace_rows.as_ref(),
            keys: self.trace_keys.as_ref(),
            payments: &self.payments,
            log: &self.trace_log,
            history: self.trace_history.as_deref(),
        };
        Some(trace::assemble(target, &pieces, self.now_ms()))
    }

    /// Rebuild what the views show from the stores, when it changed or aged: called before each
    /// frame, so the (linear) search of the trace log runs at most once per frame and not at all
    /// when nothing changed.
    pub fn refresh_views(&mut self) {
        if self.trace_target.is_none() {
            self.trace_view = None;
            return;
        }
        let aged = !self.paused
            && self
                .trace_built_at
                .is_none_or(|t| t.elapsed() >= TIMELINE_AGES);
        if self.trace_stale || aged || self.trace_view.is_none() {
            self.trace_view = self.timeline();
            self.trace_stale = false;
            self.trace_built_at = Some(Instant::now());
        }
    }

    /// The trace view's rows after its filter: (entry index, cells).
    pub fn timeline_rows(&self) -> Vec<(usize, Vec<String>)> {
        let Some(t) = &self.trace_view else {
            return Vec::new();
        };
        let f = self.filter(View::Trace);
        let needle = f.text.to_lowercase();
        t.entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, columns::timeline_cells(e)))
            .filter(|(_, c)| columns::passes(c, &needle, f.invert))
            .collect()
    }

    /// The rates view's rows after its filter.
    pub fn rate_rows(&self) -> Vec<Vec<String>> {
        let f = self.filter(View::Rates);
        let needle = f.text.to_lowercase();
        self.trace_log
            .rates(self.now_ms())
            .series
            .iter()
            .map(columns::rate_cells)
            .filter(|c| columns::passes(c, &needle, f.invert))
            .collect()
    }
}

/// Tab in the command line: complete a unique command name.
fn complete_command(line: &mut String) {
    if line.contains(' ') {
        return;
    }
    let matches: Vec<&str> = keymap::COMMANDS
        .iter()
        .map(|c| c.name)
        .filter(|n| n.starts_with(line.as_str()))
        .collect();
    if let [one] = matches.as_slice() {
        *line = format!("{one} ");
    }
}
