//! The console's state, owned by the UI task alone, in three parts with one owner each:
//! - [`UiState`] ([`ui_state`]): what the operator sees and steers — view, selection, filters,
//!   the help's scroll, the bottom line, the status message;
//! - [`Stores`] ([`stores`]): what the collectors sent and the views derived from it;
//! - [`ActionsPane`] ([`actions`]): tags → confirmation → executor → per-view results.
//!
//! [`App`] only routes: keys ([`App::handle_key`], looked up in [`crate::console::tui::keymap`])
//! and updates ([`App::apply`]) to the part that owns them, and tells the collectors what the UI
//! looks at. No locks, no shared mutable state. Drawing reads it
//! ([`crate::console::tui::ui::draw`]).

pub mod actions;
pub mod stores;
#[cfg(test)]
mod tests;
pub mod ui_state;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, EnvironmentConfig};
use crate::contracts::TraceTarget;

use crate::console::columns;
use crate::console::read::overview::{Finding, Jump};
use crate::console::read::records::TraceIds;
use crate::console::read::timeline::{self, Timeline};
use crate::console::report::ReportFormat;
use crate::console::tui::backend::{ExecRequest, Focus, Update};
use crate::console::tui::confirm;
use crate::console::tui::keymap::{self, Command, PopupKey, UiAction, View, HELP_KEYS, LINE_KEYS};
use crate::ops::AuditRow;

pub use actions::{ActionsPane, BatchEnd, ConfirmStep};
pub use stores::{BackendState, Health, Stores};
pub use ui_state::{Filter, Input, Level, UiState};

/// Where the console opens: an alert or a ticket names the view or the ID, and the engineer
/// lands on the answer without typing (`idemguard console --view dlq`, `--trace ORDER`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Opening {
    #[default]
    Overview,
    View(View),
    /// An orderNo, requestId or eventId as given on the command line.
    Trace(String),
}

pub struct App {
    pub env: EnvironmentConfig,
    /// The config file's context open (`--context`), when it has contexts.
    pub context: Option<String>,
    /// The context `:ctx` asked for: the loop ends and the console reopens on it.
    pub switch_to: Option<String>,
    pub ui: UiState,
    pub stores: Stores,
    pub actions: ActionsPane,
    focus: Option<watch::Sender<Focus>>,
}

impl App {
    /// `focus`: the collectors' watch channel (`None` in tests that feed updates by hand).
    pub fn new(config: &Config, focus: Option<watch::Sender<Focus>>) -> App {
        App {
            env: config.environment.clone(),
            context: config.context.clone(),
            switch_to: None,
            ui: UiState::new(config.console.refresh),
            stores: Stores::new(config),
            actions: ActionsPane::new(config),
            focus,
        }
    }

    /// Enable the action keys (`--allow-actions`; `environment.allow_actions` already does).
    pub fn allow_actions(&mut self, allow: bool) {
        self.actions.enabled |= allow;
    }

    /// Where confirmed batches go (see [`crate::console::tui::backend::Backends::spawn_executor`]).
    pub fn attach_executor(&mut self, tx: mpsc::Sender<ExecRequest>) {
        self.actions.attach(tx);
        self.request(ExecRequest::LoadAudit);
    }

    /// Open on what the command line asked for; after [`App::attach_executor`], which reads the
    /// DLQ and the audit a view may show.
    pub fn open(&mut self, opening: &Opening) {
        match opening {
            Opening::Overview => {}
            Opening::View(v) => self.show_view(*v),
            Opening::Trace(id) => self.trace(id),
        }
    }

    fn request(&mut self, req: ExecRequest) {
        if let Err(e) = self.actions.request(req) {
            self.ui.say(e, Level::Error);
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.ui.now_ms()
    }

    pub fn filter(&self, view: View) -> Filter {
        self.ui.filter(view)
    }

    pub fn selected(&self, view: View) -> usize {
        self.ui.selected(view)
    }

    // -----------------------------------------------------------------------------------------
    // Input
    // -----------------------------------------------------------------------------------------

    pub fn handle_event(&mut self, ev: Event) {
        match ev {
            Event::Key(k) if k.kind != KeyEventKind::Release => self.handle_key(k),
            Event::Resize(w, h) => {
                self.ui.size = (w, h);
                self.ui.scroll_help(0);
                self.ui.dirty = true;
            }
            Event::Paste(text) => {
                if let Input::Command(s) | Input::Filter(s) = &mut self.ui.input {
                    s.push_str(text.trim());
                    self.ui.dirty = true;
                }
            }
            _ => {}
        }
    }

    /// A key goes to what has the keyboard: the confirmation, the bottom line, the help, else
    /// the keymap — each looked up in its table in [`keymap`].
    pub fn handle_key(&mut self, key: KeyEvent) {
        self.ui.dirty = true;
        if self.actions.confirm.is_some() {
            return self.confirm_key(&key);
        }
        if self.ui.input != Input::Normal {
            return self.line_key(&key);
        }
        if self.ui.help.is_some() {
            return self.help_key(&key);
        }
        if let Some(action) = keymap::action_for(&key) {
            self.act(action);
        }
    }

    fn confirm_key(&mut self, key: &KeyEvent) {
        match self.actions.confirm_key(key) {
            ConfirmStep::Typing => {}
            ConfirmStep::Cancelled => self.ui.say("cancelled: nothing was done", Level::Info),
            ConfirmStep::Missing(m) => self.ui.say(m, Level::Error),
            // The view's panel shows the batch from here on ("redrive 0 of 1 — Esc stops …").
            ConfirmStep::Sent(Ok(_)) => self.ui.message = None,
            ConfirmStep::Sent(Err(e)) => self.ui.say(e, Level::Error),
        }
    }

    /// The command and filter lines take every key until Enter or Esc ([`LINE_KEYS`]).
    fn line_key(&mut self, key: &KeyEvent) {
        let (Input::Command(line) | Input::Filter(line)) = &mut self.ui.input else {
            return;
        };
        match keymap::popup_key(LINE_KEYS, key) {
            Some(PopupKey::Cancel) => self.ui.input = Input::Normal,
            Some(PopupKey::Submit) => {
                let line = std::mem::take(line);
                match std::mem::replace(&mut self.ui.input, Input::Normal) {
                    Input::Command(_) => self.run_command(&line),
                    Input::Filter(_) => self.set_filter(Filter::parse(line.trim())),
                    Input::Normal => {}
                }
            }
            Some(PopupKey::DeleteChar) if line.pop().is_none() => self.ui.input = Input::Normal,
            Some(PopupKey::ClearLine) => line.clear(),
            Some(PopupKey::Quit) => self.ui.quit = true,
            Some(PopupKey::Complete) => {
                if let Input::Command(l) = &mut self.ui.input {
                    complete_command(l);
                }
            }
            Some(_) => {}
            None => {
                if let KeyCode::Char(c) = key.code {
                    line.push(c);
                }
            }
        }
    }

    /// The help scrolls with [`HELP_KEYS`]; any other key closes it.
    fn help_key(&mut self, key: &KeyEvent) {
        let page = ui_state::help_visible(self.ui.size) as i64;
        match keymap::popup_key(HELP_KEYS, key) {
            Some(PopupKey::ScrollDown) => self.ui.scroll_help(1),
            Some(PopupKey::ScrollUp) => self.ui.scroll_help(-1),
            Some(PopupKey::PageDown) => self.ui.scroll_help(page),
            Some(PopupKey::PageUp) => self.ui.scroll_help(-page),
            Some(PopupKey::Top) => self.ui.scroll_help(i64::MIN / 2),
            Some(PopupKey::Bottom) => self.ui.scroll_help(i64::MAX / 2),
            Some(PopupKey::Quit) => self.ui.quit = true,
            _ => self.ui.help = None,
        }
    }

    pub fn act(&mut self, action: UiAction) {
        self.ui.dirty = true;
        let n = View::ALL.len();
        match action {
            UiAction::Quit => self.ui.quit = true,
            UiAction::Help => self.ui.help = Some(0),
            UiAction::CommandLine => self.ui.input = Input::Command(String::new()),
            UiAction::Filter => self.ui.input = Input::Filter(String::new()),
            UiAction::TagOrPause
                if matches!(self.ui.view, View::Locks | View::Stuck | View::Dlq) =>
            {
                self.toggle_tag()
            }
            UiAction::TagShown => self.tag_shown(),
            UiAction::Release => self.propose_release(),
            UiAction::Finalize => self.propose_finalize(),
            UiAction::Redrive => self.propose_redrive(),
            UiAction::Pause | UiAction::TagOrPause => {
                self.ui.toggle_pause();
                self.publish_focus();
            }
            UiAction::Faster | UiAction::Slower => {
                self.set_refresh(self.ui.stepped_refresh(action == UiAction::Faster))
            }
            UiAction::Copy => self.copy(),
            UiAction::Up => self.move_selection(-1),
            UiAction::Down => self.move_selection(1),
            UiAction::PageUp => self.move_selection(-20),
            UiAction::PageDown => self.move_selection(20),
            UiAction::Top => self.move_selection(i64::MIN / 2),
            UiAction::Bottom => self.move_selection(i64::MAX / 2),
            UiAction::NextView => self.show_view(View::ALL[(self.ui.view.index() + 1) % n]),
            UiAction::PrevView => self.show_view(View::ALL[(self.ui.view.index() + n - 1) % n]),
            UiAction::Show(v) => self.show_view(v),
            UiAction::Drill => self.drill(),
            UiAction::Back if self.actions.stop() => self.ui.say(
                "stopping after the action in flight: the rest is not run (nor audited)",
                Level::Info,
            ),
            UiAction::Back => {
                if !self.filter(self.ui.view).is_empty() {
                    self.set_filter(Filter::default());
                }
            }
        }
    }

    fn show_view(&mut self, v: View) {
        self.ui.view = v;
        self.publish_focus();
        if v == View::Audit {
            self.request(ExecRequest::LoadAudit);
        }
        if v == View::Dlq {
            self.request(ExecRequest::LoadDlq);
        }
    }

    /// Runs a `:` command line.
    pub fn run_command(&mut self, line: &str) {
        match keymap::parse_command(line) {
            Ok(Command::Trace(id)) => self.trace(&id),
            Ok(Command::Show(v)) => self.show_view(v),
            Ok(Command::Refresh(d)) => self.set_refresh(d),
            Ok(Command::Report { id, format }) => self.report(id, format),
            Ok(Command::Help) => self.ui.help = Some(0),
            Ok(Command::Quit) => self.ui.quit = true,
            Ok(Command::Context(name)) => {
                self.ui
                    .say(format!("opening the context {name}…"), Level::Info);
                self.switch_to = Some(name);
            }
            Err(e) => self.ui.say(e, Level::Error),
        }
    }

    /// `:report [html] [ID]`: the typed ID, else the order (or request) on screen.
    fn report(&mut self, id: Option<String>, format: ReportFormat) {
        let ids = self.stores.resolved_ids();
        // The typed ID is parsed here, at the edge; the resolved IDs are typed already.
        let target = id
            .map(|id| TraceTarget::classify(&id))
            .or(ids.order_no.map(TraceTarget::OrderNo))
            .or(ids.request_id.map(TraceTarget::RequestId))
            .or_else(|| self.stores.trace_target.clone());
        match target {
            Some(target) if self.actions.has_executor() => {
                let text = format!("writing the report of {}…", target.id());
                self.ui.say(text, Level::Info);
                self.request(ExecRequest::Report(target, format));
            }
            Some(_) => self.ui.say(
                "no executor: reports are written by `idemguard report --id ID`",
                Level::Error,
            ),
            None => self.ui.say(
                ":report needs an ID (or trace an order first)",
                Level::Error,
            ),
        }
    }

    /// Trace an orderNo, requestId or eventId as typed: parsed here, once.
    pub fn trace(&mut self, id: &str) {
        self.trace_target(TraceTarget::classify(id));
    }

    /// Trace a parsed target.
    pub fn trace_target(&mut self, target: TraceTarget) {
        self.ui.view = View::Trace;
        if self.stores.set_trace_target(target.clone()) {
            self.ui.selected.insert(View::Trace, 0);
        }
        let kind = timeline::kind_of(&target).replace('_', " ");
        self.ui
            .say(format!("tracing {kind} {}", target.id()), Level::Info);
        self.publish_focus();
    }

    fn set_refresh(&mut self, d: std::time::Duration) {
        self.ui.refresh = d;
        let text = format!("refresh every {}", humantime::format_duration(d));
        self.ui.say(text, Level::Info);
        self.publish_focus();
    }

    fn set_filter(&mut self, f: Filter) {
        let view = self.ui.view;
        if f.is_empty() {
            self.ui.filters.remove(&view);
        } else {
            self.ui.filters.insert(view, f.clone());
        }
        self.ui.selected.insert(view, 0);
        self.actions.filter_changed(view);
        self.stores.refilter(view, &f, self.ui.now_ms());
    }

    fn move_selection(&mut self, delta: i64) {
        let rows = self.row_count(self.ui.view);
        self.ui.move_selection(delta, rows);
    }

    /// Rows the view lists after its filter.
    pub fn row_count(&self, view: View) -> usize {
        match view {
            View::Overview => self.findings().len(),
            View::Trace => self.timeline_rows().len(),
            View::Locks | View::Stuck => self.stores.filtered.get(&view).map_or(0, Vec::len),
            View::Rates => self.rate_rows().len(),
            View::Audit => self.audit_rows().len(),
            View::Dlq => self.dlq_rows().len(),
        }
    }

    /// Enter: open what the selected row names.
    fn drill(&mut self) {
        match self.ui.view {
            View::Overview => {
                let selected = self.selected(View::Overview);
                match self
                    .findings()
                    .into_iter()
                    .nth(selected)
                    .and_then(|f| f.jump)
                {
                    Some(Jump::Trace(t)) => self.trace_target(t),
                    Some(jump) => self.show_view(view_of(&jump)),
                    None => self.ui.say("nothing to open on this line", Level::Info),
                }
            }
            View::Locks => {
                let Some(row) = self.selected_lock() else {
                    return;
                };
                let ids = crate::console::read::locks::ids_of(row, &self.stores.lock_patterns);
                match ids {
                    (_, Some(r)) => self.trace(&r),
                    (Some(o), _) => self.trace(&o),
                    _ => {
                        let text = format!("{} names no order or request to trace", row.key);
                        self.ui.say(text, Level::Error)
                    }
                }
            }
            View::Stuck => {
                if let Some(r) = self.selected_stuck() {
                    let id = r.request_id.clone();
                    self.trace(&id);
                }
            }
            View::Dlq => {
                let Some(m) = self.selected_dlq() else { return };
                let id = m.order_no.clone().or_else(|| m.event_id.clone());
                match id {
                    Some(id) => self.trace(&id),
                    None => self
                        .ui
                        .say("this DLQ message names no order or event", Level::Error),
                }
            }
            View::Trace if self.stores.trace_target.is_none() => {
                self.ui.input = Input::Command("trace ".into())
            }
            _ => {}
        }
    }

    /// `y`: the selected row's ID (the Trace: the traced ID); else the command that opens the
    /// console on this view — on an Overview line, on the view it points to — so the answer
    /// can be handed on.
    fn copy(&mut self) {
        let text = self
            .selected_id()
            .unwrap_or_else(|| self.view_to_open().opening_command());
        self.ui.copy(text);
    }

    /// The view the screen answers with: the current one, or the one the selected Overview line
    /// opens.
    fn view_to_open(&self) -> View {
        if self.ui.view != View::Overview {
            return self.ui.view;
        }
        let line = self
            .findings()
            .into_iter()
            .nth(self.selected(View::Overview));
        line.and_then(|f| f.jump)
            .map_or(View::Overview, |j| view_of(&j))
    }

    /// The ID of the current view's selected row (the Trace: the traced ID), if it has one.
    fn selected_id(&self) -> Option<String> {
        match self.ui.view {
            View::Trace => {
                let ids = self.stores.resolved_ids();
                ids.order_no
                    .or(ids.request_id)
                    .or(ids.event_id)
                    .or_else(|| {
                        self.stores
                            .trace_target
                            .as_ref()
                            .map(|t| t.id().to_string())
                    })
            }
            View::Locks => self.selected_lock().map(|l| l.key.clone()),
            View::Stuck => self.selected_stuck().map(|s| s.request_id.clone()),
            View::Audit => self
                .audit_rows()
                .get(self.selected(View::Audit))
                .map(|r| r.target.clone()),
            View::Overview => {
                let f = self
                    .findings()
                    .into_iter()
                    .nth(self.selected(View::Overview));
                match f.and_then(|f| f.jump) {
                    Some(Jump::Trace(t)) => Some(t.id().to_string()),
                    _ => None,
                }
            }
            View::Rates => None,
            View::Dlq => self.selected_dlq().map(|m| m.target.clone()),
        }
    }

    /// Text to put on the clipboard (written by the terminal loop as OSC 52).
    pub fn take_clipboard(&mut self) -> Option<String> {
        self.ui.take_clipboard()
    }

    pub fn selected_lock(&self) -> Option<&crate::lock::LockView> {
        self.stores.selected_lock(self.selected(View::Locks))
    }

    pub fn selected_stuck(&self) -> Option<&crate::console::read::records::StuckRecord> {
        self.stores.selected_stuck(self.selected(View::Stuck))
    }

    /// Open the confirmation — or, read-only, send the attempt straight to the executor, which
    /// refuses it and audits the refusal (every attempt is in `ops_audit`), and say how to
    /// enable actions.
    fn offer(&mut self, c: confirm::Confirm, what: &str) {
        if self.actions.is_running() {
            let text = "a batch is running: wait for its summary, or stop it with Esc";
            return self.ui.say(text, Level::Error);
        }
        if self.actions.enabled {
            self.actions.confirm = Some(c);
            return;
        }
        let run = self.actions.begin(c.planned);
        let _ = self.actions.request(run);
        self.ui.say(
            format!("read-only: {what} is off — restart with `idemguard console --allow-actions` or set environment.allow_actions = true"),
            Level::Error,
        );
    }

    fn toggle_tag(&mut self) {
        let view = self.ui.view;
        let Some(id) = self.selected_id() else { return };
        let n = self.actions.toggle_tag(view, id);
        self.ui.say(format!("{n} row(s) tagged"), Level::Info);
        self.move_selection(1);
    }

    /// Tags every row the view shows (its filter applied): `/` and a DLQ reason, then `T`,
    /// tag the whole reason.
    fn tag_shown(&mut self) {
        let view = self.ui.view;
        let ids: Vec<String> = match view {
            View::Dlq => self.dlq_rows().iter().map(|m| m.target.clone()).collect(),
            _ => {
                let text =
                    "T tags every row shown in the DLQ view (7); elsewhere tag rows with space";
                return self.ui.say(text, Level::Error);
            }
        };
        let n = self.actions.tag_all(view, ids);
        self.ui.say(format!("{n} row(s) tagged"), Level::Info);
    }

    fn propose_release(&mut self) {
        if self.ui.view != View::Locks {
            let text = "x releases locks: open the Locks view (3)";
            return self.ui.say(text, Level::Error);
        }
        let Some(scan) = &self.stores.locks else {
            return;
        };
        let selected = self.selected_lock();
        let idx = self
            .actions
            .action_rows(View::Locks, &scan.locks, |l| l.key.as_str(), selected);
        if idx.is_empty() {
            return self.ui.say("no lock selected", Level::Error);
        }
        let rows: Vec<&crate::lock::LockView> = idx.iter().map(|i| &scan.locks[*i]).collect();
        let c = confirm::release(&rows, self.now_ms(), &self.env.name, self.env.production);
        self.offer(c, "releasing a lock");
    }

    fn propose_finalize(&mut self) {
        if self.ui.view != View::Stuck {
            let text = "f finalizes stuck records: open the Stuck view (5)";
            return self.ui.say(text, Level::Error);
        }
        let Some(stuck) = &self.stores.stuck else {
            return;
        };
        let selected = self.selected_stuck();
        let idx = self
            .actions
            .action_rows(View::Stuck, stuck, |s| s.request_id.as_str(), selected);
        if idx.is_empty() {
            return self.ui.say("no record selected", Level::Error);
        }
        let rows: Vec<_> = idx.iter().map(|i| &stuck[*i]).collect();
        let (env, production) = (&self.env.name, self.env.production);
        let how = confirm::FinalizeIn {
            dialect: self.actions.dialect,
            team: self.actions.team.as_ref(),
        };
        let c = confirm::finalize(&rows, how, env, production);
        self.offer(c, "finalizing a record");
    }

    fn propose_redrive(&mut self) {
        if self.ui.view != View::Dlq {
            let text = "r redrives DLQ messages: open the DLQ view (7)";
            return self.ui.say(text, Level::Error);
        }
        let Some(Ok(listing)) = &self.stores.dlq else {
            return;
        };
        let selected = self.selected_dlq();
        let topic = listing.topic.clone();
        let idx = self.actions.action_rows(
            View::Dlq,
            &listing.messages,
            |m| m.target.as_str(),
            selected,
        );
        if idx.is_empty() {
            return self.ui.say("no DLQ message selected", Level::Error);
        }
        let rows: Vec<_> = idx.iter().map(|i| &listing.messages[*i]).collect();
        let c = confirm::redrive(&rows, &topic, &self.env.name, self.env.production);
        self.offer(c, "redriving a DLQ message");
    }

    /// The DLQ view's rows after its filter (reason, IDs and every other cell), and the rows
    /// of the last redrive under that filter whatever their cells now say.
    pub fn dlq_rows(&self) -> Vec<&crate::console::read::dlq::DlqMessage> {
        let f = self.filter(View::Dlq);
        let needle = f.text.to_lowercase();
        let now = self.now_ms();
        let shown = |m: &crate::console::read::dlq::DlqMessage| {
            self.actions.is_kept_in_view(View::Dlq, &m.target)
                || columns::passes(&columns::dlq_cells(m, now), &needle, f.invert)
        };
        match &self.stores.dlq {
            Some(Ok(l)) => l.messages.iter().filter(|m| shown(m)).collect(),
            _ => Vec::new(),
        }
    }

    pub fn selected_dlq(&self) -> Option<&crate::console::read::dlq::DlqMessage> {
        self.dlq_rows().get(self.selected(View::Dlq)).copied()
    }

    /// The Audit view's rows after its filter.
    pub fn audit_rows(&self) -> Vec<&AuditRow> {
        let f = self.filter(View::Audit);
        let needle = f.text.to_lowercase();
        match &self.actions.audit {
            Some(Ok(rows)) => rows
                .iter()
                .filter(|r| columns::passes(&columns::audit_cells(r), &needle, f.invert))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Periodic: expire the status message; relative times move on, so draw again.
    pub fn on_tick(&mut self) {
        self.ui.on_tick();
    }

    // -----------------------------------------------------------------------------------------
    // Updates
    // -----------------------------------------------------------------------------------------

    /// An update from a collector or the executor, to the part that owns it.
    pub fn apply(&mut self, update: Update) {
        self.ui.dirty = true;
        match update {
            Update::ActionResults(results) => {
                let end = self.actions.batch_results(results);
                self.say_batch_end(end);
            }
            Update::BatchProgress(p) => self.actions.progress(p),
            Update::BatchEnded(summary) => {
                let end = self.actions.ended(summary);
                self.say_batch_end(end);
            }
            Update::Audit(rows) => self.actions.audit = Some(rows),
            Update::ReportWritten(Ok(m)) => self.ui.say(m, Level::Info),
            Update::ReportWritten(Err(e)) => self
                .ui
                .say(format!("report not written: {e}"), Level::Error),
            data => {
                let applied = self.stores.apply(data, &self.ui.filters, self.ui.now_ms());
                if let Some((view, rows)) = applied.refiltered {
                    if self.selected(view) >= rows {
                        self.ui.selected.insert(view, rows.saturating_sub(1));
                    }
                }
                if applied.focus_changed {
                    self.publish_focus();
                }
            }
        }
    }

    /// A batch's end is shown by its view's panel; the bottom line says it only to an operator
    /// looking at another view (once is enough: the panel stays, the bottom line fades).
    fn say_batch_end(&mut self, end: actions::BatchEnd) {
        if end.view != Some(self.ui.view) {
            let level = if end.all_done {
                Level::Info
            } else {
                Level::Error
            };
            self.ui.say(end.summary, level);
        }
    }

    /// The IDs the trace target resolved to, from every source that answered.
    pub fn resolved_ids(&self) -> TraceIds {
        self.stores.resolved_ids()
    }

    /// Tell the collectors what the UI looks at (only when it changed).
    fn publish_focus(&mut self) {
        let Some(tx) = &self.focus else { return };
        let resolved = self.stores.resolved();
        let target = self.stores.trace_target.clone();
        let log_ids = match (&resolved, &target) {
            (Some(r), Some(t)) => r.log_ids(t),
            _ => Vec::new(),
        };
        let next = Focus {
            ids: resolved.map(|r| r.ids).unwrap_or_default(),
            log_ids,
            target,
            rows: self.stores.trace_rows.clone(),
            tracing: self.ui.view == View::Trace,
            paused: self.ui.paused,
            refresh: self.ui.refresh,
        };
        tx.send_if_modified(|f| {
            let changed = *f != next;
            if changed {
                *f = next;
            }
            changed
        });
    }

    /// The timeline of the current trace target, from whatever the collectors have sent.
    pub fn timeline(&self) -> Option<Timeline> {
        self.stores.timeline(self.now_ms())
    }

    /// Rebuild what the views show from the stores, when it changed or aged (before each frame).
    pub fn refresh_views(&mut self) {
        self.stores.refresh_trace(self.ui.paused, self.ui.now_ms());
    }

    /// The Overview's lines.
    pub fn findings(&self) -> Vec<Finding> {
        self.stores.findings(self.now_ms())
    }

    /// The trace view's rows after its filter: (entry index, cells).
    pub fn timeline_rows(&self) -> Vec<(usize, Vec<String>)> {
        let Some(t) = &self.stores.trace_view else {
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
        self.stores
            .trace_log
            .rates(self.now_ms())
            .series
            .iter()
            .map(columns::rate_cells)
            .filter(|c| columns::passes(c, &needle, f.invert))
            .collect()
    }
}

/// The view an Overview line opens (a trace opens the Trace view).
fn view_of(jump: &Jump) -> View {
    match jump {
        Jump::Trace(_) => View::Trace,
        Jump::Locks => View::Locks,
        Jump::Stuck => View::Stuck,
        Jump::Rates => View::Rates,
        Jump::Dlq => View::Dlq,
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
