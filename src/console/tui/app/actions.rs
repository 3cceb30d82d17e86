//! The action pipeline of the console: tagged rows → a confirmation popup → the executor →
//! per-view results. Owns nothing else; the executor is a channel ([`ExecRequest`]), so a test
//! attaches a channel of its own and reads what would have run.

use std::collections::{BTreeMap, BTreeSet};

use crossterm::event::{KeyCode, KeyEvent};
use tokio::sync::mpsc;

use crate::config::{Config, Dialect};
use crate::ops::{ActionOutcome, ActionResult, AuditRow};

use tokio_util::sync::CancellationToken;

use crate::console::tui::backend::{BatchProgress, ExecRequest};
use crate::console::tui::confirm::{Confirm, Planned, RowResult};
use crate::console::tui::keymap::{self, PopupKey, View, CONFIRM_KEYS};

/// What a key did to the confirmation popup.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfirmStep {
    /// Typed or deleted: the popup stays.
    Typing,
    Cancelled,
    /// Enter before the phrase or a required reason was typed: what is missing.
    Missing(String),
    /// Confirmed: `n` actions sent to the executor (or why they could not be).
    Sent(Result<usize, String>),
}

pub struct ActionsPane {
    /// `--allow-actions` or `environment.allow_actions`: otherwise the action keys are greyed
    /// out and only say how to enable them.
    pub enabled: bool,
    pub dialect: Dialect,
    /// The team's record in its own terms (the source profile maps a foreign one): the finalize
    /// popup names its status codes.
    pub team: Option<crate::ops::TeamRecord>,
    /// Tagged rows per view (lock keys, requestIds): survive refreshes and re-sorting.
    pub tagged: BTreeMap<View, BTreeSet<String>>,
    /// The confirmation popup, when open: every key goes to it.
    pub confirm: Option<Confirm>,
    /// The result of the last action on each target (lock key / requestId), per view.
    results: BTreeMap<View, BTreeMap<String, RowResult>>,
    /// Each view's last batch, in order (shown under its table).
    last_batch: BTreeMap<View, Vec<ActionResult>>,
    pub audit: Option<Result<Vec<AuditRow>, String>>,
    executor: Option<mpsc::Sender<ExecRequest>>,
    /// The batch the executor is running: Esc cancels its token (it stops between actions).
    running: Option<Running>,
    /// Each view's batch headline: its progress while it runs, then its summary.
    headline: BTreeMap<View, String>,
    /// The targets of each view's last batch, shown whatever the view's filter until the
    /// operator changes it: an action changes the cells a filter matched (a redriven message is
    /// no longer "would apply"), and a row must not leave the view as its result arrives.
    kept_in_view: BTreeMap<View, BTreeSet<String>>,
}

struct Running {
    view: View,
    stop: CancellationToken,
}

/// A batch that ended: what it did, said once — by its view's panel (its rows; a batch of more
/// than one action its summary as the panel's headline), by the bottom line only to an operator
/// looking at another view.
#[derive(Debug)]
pub struct BatchEnd {
    /// The view whose rows it acted on (`None`: nothing was run).
    pub view: Option<View>,
    pub summary: String,
    pub all_done: bool,
}

/// What a batch's headline calls an action that did what it says.
fn done_word(action: &str) -> &'static str {
    match action {
        "redrive" => "published",
        _ => "done",
    }
}

/// The view whose rows an action acts on.
pub fn view_of(action: &str) -> View {
    match action {
        "finalize" => View::Stuck,
        "redrive" => View::Dlq,
        _ => View::Locks,
    }
}

impl ActionsPane {
    pub fn new(config: &Config) -> ActionsPane {
        ActionsPane {
            enabled: config.environment.allow_actions,
            dialect: config.dialect(),
            team: crate::ops::TeamRecord::of(config),
            tagged: BTreeMap::new(),
            confirm: None,
            results: BTreeMap::new(),
            last_batch: BTreeMap::new(),
            audit: None,
            executor: None,
            running: None,
            headline: BTreeMap::new(),
            kept_in_view: BTreeMap::new(),
        }
    }

    pub fn attach(&mut self, tx: mpsc::Sender<ExecRequest>) {
        self.executor = Some(tx);
    }

    pub fn has_executor(&self) -> bool {
        self.executor.is_some()
    }

    /// Hand a request to the executor; the error says what was not sent.
    pub fn request(&mut self, req: ExecRequest) -> Result<(), String> {
        let what = match &req {
            ExecRequest::Run(..) => "the batch",
            ExecRequest::LoadAudit => "the audit reload",
            ExecRequest::LoadDlq => "the DLQ reload",
            ExecRequest::Report(..) => "the report",
        };
        let Some(tx) = &self.executor else {
            return match req {
                // Nothing to read the audit from: not an error the operator must see.
                ExecRequest::LoadAudit => Ok(()),
                _ => Err(format!("no executor is running: {what} was not sent")),
            };
        };
        tx.try_send(req)
            .map_err(|_| format!("the executor is busy; {what} was not sent — try again"))
    }

    /// A key while the confirmation is open ([`CONFIRM_KEYS`]; other characters are typed).
    pub fn confirm_key(&mut self, key: &KeyEvent) -> ConfirmStep {
        let Some(c) = &mut self.confirm else {
            return ConfirmStep::Cancelled;
        };
        match keymap::popup_key(CONFIRM_KEYS, key) {
            Some(PopupKey::Cancel) => {
                self.confirm = None;
                ConfirmStep::Cancelled
            }
            Some(PopupKey::Submit) => match c.missing() {
                Some(m) => ConfirmStep::Missing(m),
                None => {
                    let batch = c.confirmed();
                    let n = batch.len();
                    if let Some(p) = batch.first() {
                        self.tagged.remove(&view_of(p.action.name()));
                    }
                    self.confirm = None;
                    let run = self.begin(batch);
                    ConfirmStep::Sent(self.request(run).map(|_| n))
                }
            },
            Some(PopupKey::DeleteChar) => {
                c.typed.pop();
                ConfirmStep::Typing
            }
            Some(PopupKey::ClearLine) => {
                c.typed.clear();
                ConfirmStep::Typing
            }
            Some(_) => ConfirmStep::Typing,
            None => {
                if let KeyCode::Char(ch) = key.code {
                    c.typed.push(ch);
                }
                ConfirmStep::Typing
            }
        }
    }

    /// Results that came all at once (a batch with RedLock actions, or one the executor could
    /// not start): the batch is over.
    pub fn batch_results(&mut self, results: Vec<ActionResult>) -> BatchEnd {
        let running = self.running.take().map(|r| r.view);
        let view = running.or_else(|| results.first().map(|r| view_of(r.action)));
        let one = results.len() == 1;
        let (summary, all_done) = self.apply_results(results);
        if let Some(view) = view {
            self.headline_of_end(view, one, &summary);
        }
        BatchEnd {
            view,
            summary,
            all_done,
        }
    }

    /// The panel's headline once a batch ended: a batch of one has none (its row says it all),
    /// a longer one its summary.
    fn headline_of_end(&mut self, view: View, one: bool, summary: &str) {
        if one {
            self.headline.remove(&view);
        } else {
            self.headline.insert(view, summary.to_string());
        }
    }

    /// The executor's results: kept per row and per view; returns the one-line summary.
    pub fn apply_results(&mut self, results: Vec<ActionResult>) -> (String, bool) {
        let done = results
            .iter()
            .filter(|r| r.outcome == ActionOutcome::Done)
            .count();
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
        let all_done = done == results.len();
        let mut by_view: BTreeMap<View, Vec<ActionResult>> = BTreeMap::new();
        for r in results {
            let view = view_of(r.action);
            self.keep_result(view, &r);
            by_view.entry(view).or_default().push(r);
        }
        self.last_batch.extend(by_view);
        (summary, all_done)
    }

    /// The request that runs `batch`, its stop token kept for Esc; the view's panel starts
    /// empty (each result is added as it comes).
    pub fn begin(&mut self, batch: Vec<Planned>) -> ExecRequest {
        let stop = CancellationToken::new();
        if let Some(p) = batch.first() {
            let view = view_of(p.action.name());
            self.last_batch.insert(view, Vec::new());
            let headline = format!(
                "{} 0 of {} — Esc stops between actions",
                p.action.name(),
                batch.len()
            );
            self.headline.insert(view, headline);
            let targets = batch.iter().map(|p| p.action.target().to_string());
            self.kept_in_view.insert(view, targets.collect());
            self.running = Some(Running {
                view,
                stop: stop.clone(),
            });
        }
        ExecRequest::Run(batch, stop)
    }

    /// True while a batch runs (a second one waits for it: none is offered meanwhile).
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Esc: the running batch stops after the action in flight; false when none runs.
    pub fn stop(&mut self) -> bool {
        let Some(r) = &self.running else { return false };
        r.stop.cancel();
        if let Some(h) = self.headline.get_mut(&r.view) {
            h.push_str(" · stopping after the action in flight");
        }
        true
    }

    /// One action of the running batch ended: its row's result and the headline's counts.
    pub fn progress(&mut self, p: BatchProgress) {
        let Some(last) = p.last else { return };
        let view = view_of(last.action);
        let stopping = self.running.as_ref().is_some_and(|r| r.stop.is_cancelled());
        let headline = format!(
            "{} {} of {}: {} {}, {} refused, {} failed so far — {}",
            last.action,
            p.ended,
            p.total,
            p.done,
            done_word(last.action),
            p.refused,
            p.failed,
            if stopping {
                "stopping after the action in flight"
            } else {
                "Esc stops between actions"
            }
        );
        self.headline.insert(view, headline);
        self.keep_result(view, &last);
        let batch = self.last_batch.entry(view).or_default();
        batch.retain(|r| r.target != last.target);
        batch.push(last);
    }

    /// The batch ended (finished or stopped): its rows' results and the summary line.
    pub fn ended(&mut self, s: crate::ops::BatchSummary) -> BatchEnd {
        let view = self.running.take().map(|r| r.view);
        let Some(view) = view.or_else(|| s.results.first().map(|r| view_of(r.action))) else {
            return BatchEnd {
                view: None,
                summary: "nothing was run".into(),
                all_done: true,
            };
        };
        let name = s.results.first().map_or("action", |r| r.action);
        let total = s.results.len() + s.not_attempted;
        if total == 1 && s.results.len() == 1 {
            // One action: its own result (target, outcome, detail) says more than counts.
            let (summary, all_done) = self.apply_results(s.results);
            self.headline_of_end(view, true, &summary);
            return BatchEnd {
                view: Some(view),
                summary,
                all_done,
            };
        }
        let summary = format!(
            "{name}: {}{} of {total} run — {} {}, {} refused, {} failed, {} not attempted{}",
            if s.cancelled {
                "stopped (Esc) after "
            } else {
                ""
            },
            s.results.len(),
            s.done,
            done_word(name),
            s.refused,
            s.errors + s.changed,
            s.not_attempted,
            if s.cancelled {
                " (nothing written for those, not audited)"
            } else {
                ""
            }
        );
        self.headline_of_end(view, false, &summary);
        let all_done = s.done == total;
        self.apply_results(s.results);
        BatchEnd {
            view: Some(view),
            summary,
            all_done,
        }
    }

    /// The headline of `view`'s last batch: its progress, then its summary.
    pub fn headline(&self, view: View) -> Option<&str> {
        self.headline.get(&view).map(String::as_str)
    }

    fn keep_result(&mut self, view: View, r: &ActionResult) {
        let row = RowResult {
            outcome: r.outcome,
            detail: r.detail.clone(),
        };
        self.results
            .entry(view)
            .or_default()
            .insert(r.target.clone(), row);
    }

    /// The last batch run on `view`'s rows.
    pub fn last_batch(&self, view: View) -> &[ActionResult] {
        self.last_batch.get(&view).map_or(&[], Vec::as_slice)
    }

    /// The result of the last action on `id` in `view`.
    pub fn result(&self, view: View, id: &str) -> Option<&RowResult> {
        self.results.get(&view)?.get(id)
    }

    /// True when `id` was acted on in `view`'s last batch and the filter is still the one it
    /// was acted on under: the row stays on screen whatever its cells now say.
    pub fn is_kept_in_view(&self, view: View, id: &str) -> bool {
        self.kept_in_view.get(&view).is_some_and(|k| k.contains(id))
    }

    /// The operator changed `view`'s filter: its rows are what the new filter matches.
    pub fn filter_changed(&mut self, view: View) {
        self.kept_in_view.remove(&view);
    }

    pub fn is_tagged(&self, view: View, id: &str) -> bool {
        self.tagged.get(&view).is_some_and(|t| t.contains(id))
    }

    /// Tag or untag `id`; returns how many rows of the view are tagged.
    pub fn toggle_tag(&mut self, view: View, id: String) -> usize {
        let set = self.tagged.entry(view).or_default();
        if !set.remove(&id) {
            set.insert(id);
        }
        set.len()
    }

    /// Tag every one of `ids`; returns how many rows of the view are tagged.
    pub fn tag_all(&mut self, view: View, ids: Vec<String>) -> usize {
        let set = self.tagged.entry(view).or_default();
        set.extend(ids);
        set.len()
    }

    /// The rows an action applies to: the tagged rows of the view, else the selected one.
    pub fn action_rows<T>(
        &self,
        view: View,
        all: &[T],
        id: impl Fn(&T) -> &str,
        selected: Option<&T>,
    ) -> Vec<usize> {
        match self.tagged.get(&view).filter(|t| !t.is_empty()) {
            Some(t) => (0..all.len())
                .filter(|i| t.contains(id(&all[*i])))
                .collect(),
            None => selected
                .and_then(|s| all.iter().position(|r| std::ptr::eq(r, s)))
                .into_iter()
                .collect(),
        }
    }
}
