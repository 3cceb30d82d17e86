//! What the collectors sent, and the views derived from it: each [`Update`] of data lands here
//! ([`Stores::apply`]), the backends' health follows from it, and the rows each table view
//! shows after its filter are recomputed on new data only. No channel, no service: a test feeds
//! it updates by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::contracts::{now_ms, TraceEvent, TraceTarget};

use crate::console::columns;
use crate::console::read::locks::TraceKeys;
use crate::console::read::logs::LogRead;
use crate::console::read::messages::PaymentMessage;
use crate::console::read::overview::{self, Finding, Leak, OverviewInput};
use crate::console::read::records::{annotate_stuck, StuckRecord, TraceIds, TraceRows};
use crate::console::read::store::{PaymentIndex, TraceLog};
use crate::console::read::timeline::Timeline;
use crate::console::read::trace::{self, TracePieces};
use crate::console::read::window::ReadCost;
use crate::console::tui::app::ui_state::Filter;
use crate::console::tui::backend::{BackendId, TopicProgress, Update};
use crate::console::tui::keymap::View;
use crate::lock::LockScan;
use crate::stream::lag::PartitionLag;

/// How often the timeline's relative times (ages, PTTLs) are recomputed without new data.
const TIMELINE_AGES: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Connecting,
    Up,
    /// Answering, but part of it is not (a RedLock node).
    Degraded(String),
    /// Connected, but a read has not answered for a while or was ended for taking too long
    /// (a table locked by another session): why, and where to look.
    Slow(String),
    Down(String),
}

#[derive(Debug, Clone)]
pub struct BackendState {
    pub health: Health,
    /// When it last delivered good data (epoch ms).
    pub last_ok_ms: Option<i64>,
    /// How its connection falls short in production ([`BackendId::insecurity`]).
    pub insecurity: Option<&'static str>,
}

/// What [`Stores::apply`] changed that the rest of the app must follow.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The IDs a trace resolved to may have changed: tell the collectors.
    pub focus_changed: bool,
    /// A table view got new rows: its filtered row count (the selection must stay inside).
    pub refiltered: Option<(View, usize)>,
}

pub struct Stores {
    pub backends: BTreeMap<BackendId, BackendState>,
    pub backend_targets: BTreeMap<BackendId, String>,
    pub stuck_threshold: Duration,
    /// `foreign_locks.patterns`: where a lock key names its order or request (Enter on a lock).
    pub lock_patterns: Vec<String>,
    /// What the Trace view traces, parsed where it was typed.
    pub trace_target: Option<TraceTarget>,
    pub trace_rows: Option<TraceRows>,
    pub trace_keys: Option<TraceKeys>,
    /// The log lines of the trace target (`read/logs.rs`), when log sources are configured.
    pub trace_logs: Option<LogRead>,
    /// `kafka.trace_topic` is empty (a team's own system): the trace says so and its history's
    /// missing trace events are no failure.
    no_trace_topic: bool,
    pub trace_log: TraceLog,
    /// The trace target's events read from the whole trace topic ([`Update::TraceHistory`]).
    trace_history: Option<Vec<crate::contracts::TraceEvent>>,
    /// The read of the trace target's windows ([`Update::TraceRead`]): for which IDs, and its
    /// cost once done (`None` while it runs).
    pub trace_read: Option<(TraceIds, Option<ReadCost>)>,
    /// Messages the read in flight has scanned so far (its progress).
    pub trace_read_scanned: u64,
    pub payments: PaymentIndex,
    pub trace_topic: Option<TopicProgress>,
    pub payment_topic: Option<TopicProgress>,
    pub lag: Option<Result<Vec<PartitionLag>, String>>,
    pub locks: Option<LockScan>,
    pub stuck: Option<Vec<StuckRecord>>,
    /// The DLQ view's listing, read by the executor when the view is shown and after a redrive.
    pub dlq: Option<Result<Box<crate::console::read::dlq::DlqListing>, String>>,
    /// Duplicates that got through in the Overview's window ([`overview::LEAK_WINDOW_MS`]).
    pub leaks: Option<Result<Vec<Leak>, String>>,
    pub live_instances: Option<BTreeSet<String>>,
    /// Rows of the Locks and Stuck views that pass their filter (indices into the data).
    pub filtered: BTreeMap<View, Vec<usize>>,
    /// The trace view's timeline as last built ([`Stores::refresh_trace`]): rebuilt when its
    /// data changed or its relative times aged, never more than once per frame.
    pub trace_view: Option<Timeline>,
    trace_stale: bool,
    trace_built_at: Option<Instant>,
    /// The fields no face shows (`[mask]`): masked in the timeline as it is built, and in the
    /// stuck records as they are drawn (their liveness is judged on the clear owner).
    pub mask: crate::mask::Mask,
}

impl Stores {
    pub fn new(config: &Config) -> Stores {
        let backends = BackendId::ALL
            .iter()
            .map(|b| {
                let state = BackendState {
                    health: Health::Connecting,
                    last_ok_ms: None,
                    insecurity: b.insecurity(config),
                };
                (*b, state)
            })
            .collect();
        let mut backends: BTreeMap<BackendId, BackendState> = backends;
        if config.kafka.trace_topic.is_empty() {
            let absent = Health::Degraded(crate::console::read::bounded::NO_TRACE_TOPIC.into());
            if let Some(s) = backends.get_mut(&BackendId::TraceTopic) {
                s.health = absent;
            }
        }
        Stores {
            backends,
            backend_targets: BackendId::ALL
                .iter()
                .map(|b| (*b, b.target(config)))
                .collect(),
            stuck_threshold: config.console.stuck_threshold,
            mask: crate::mask::Mask::of(config),
            lock_patterns: config.foreign_locks.patterns.clone(),
            trace_target: None,
            trace_rows: None,
            trace_keys: None,
            trace_logs: None,
            no_trace_topic: config.kafka.trace_topic.is_empty(),
            trace_log: TraceLog::default(),
            trace_history: None,
            trace_read: None,
            trace_read_scanned: 0,
            payments: PaymentIndex::default(),
            trace_topic: None,
            payment_topic: None,
            lag: None,
            locks: None,
            stuck: None,
            dlq: None,
            leaks: None,
            live_instances: None,
            filtered: BTreeMap::new(),
            trace_view: None,
            trace_stale: true,
            trace_built_at: None,
        }
    }

    /// Take in what a collector read — one arm per kind of update, each the whole story of its
    /// data (hence the length). The executor's updates are not data: they go to the
    /// actions pane ([`crate::console::tui::app::actions::ActionsPane::apply_results`]).
    pub fn apply(&mut self, update: Update, filters: &BTreeMap<View, Filter>, now: i64) -> Applied {
        let backend = update.backend();
        let mut applied = Applied::default();
        let table = match &update {
            Update::Stuck(_) => Some(View::Stuck),
            Update::Locks(_) => Some(View::Locks),
            _ => None,
        };
        match update {
            Update::Stuck(result) => self.apply_stuck(backend, result),
            Update::Leaks(result) => self.apply_leaks(backend, result),
            Update::TraceRows { target, result } => {
                applied.focus_changed = self.apply_trace_rows(backend, target, result)
            }
            Update::Locks(scan) => self.apply_locks(backend, scan),
            Update::TraceKeys { ids, result } => self.apply_trace_keys(backend, ids, result),
            Update::UndecodableTraceMessages {
                topic,
                count,
                first,
            } => self.apply_undecodable(topic, count, first),
            Update::TraceEvents(events) => {
                self.apply_trace_events(backend, events);
                applied.focus_changed = true;
            }
            Update::TraceLogs { target, read } => self.apply_trace_logs(target, read),
            Update::TraceHistory { ids, result } => self.apply_trace_history(backend, ids, result),
            Update::TraceRead { ids, cost, scanned } => self.apply_trace_read(ids, cost, scanned),
            Update::PaymentHistory { ids, result } => {
                self.apply_payment_history(backend, ids, result)
            }
            Update::TraceTopic(Ok(p)) => {
                self.ok(backend);
                self.trace_topic = Some(p);
            }
            Update::TraceTopic(Err(e)) => self.down(backend, e),
            Update::PaymentMessages(msgs) => {
                self.apply_payment_messages(backend, msgs);
                applied.focus_changed = true;
            }
            Update::PaymentTopic { progress, lag } => {
                self.apply_payment_topic(backend, progress, lag)
            }
            Update::Slow { reason, .. } => self.apply_slow(backend, reason),
            Update::Dlq(listing) => self.dlq = Some(listing),
            Update::ActionResults(_)
            | Update::BatchProgress(_)
            | Update::BatchEnded(_)
            | Update::Audit(_)
            | Update::ReportWritten(_) => {}
        }
        if let Some(view) = table {
            let f = filters.get(&view).cloned().unwrap_or_default();
            applied.refiltered = Some((view, self.refilter(view, &f, now)));
        }
        applied
    }

    fn apply_stuck(&mut self, backend: BackendId, result: Result<Vec<StuckRecord>, String>) {
        match result {
            Ok(rows) => {
                self.ok(backend);
                self.stuck = Some(rows);
                self.annotate_stuck();
            }
            Err(e) => self.down(backend, e),
        }
    }

    fn apply_leaks(&mut self, backend: BackendId, result: Result<Vec<Leak>, String>) {
        match result {
            Ok(l) => {
                self.ok(backend);
                self.leaks = Some(Ok(l));
            }
            Err(e) => {
                self.leaks = Some(Err(e.clone()));
                self.down(backend, e);
            }
        }
    }

    /// Whether the rows were the trace target's (the IDs it resolves to may have changed).
    fn apply_trace_rows(
        &mut self,
        backend: BackendId,
        target: TraceTarget,
        result: Result<TraceRows, String>,
    ) -> bool {
        match result {
            Ok(rows) => {
                self.ok(backend);
                if self.trace_target.as_ref() == Some(&target) {
                    self.trace_rows = Some(rows);
                    self.trace_stale = true;
                    return true;
                }
                false
            }
            Err(e) => {
                self.down(backend, e);
                false
            }
        }
    }

    fn apply_trace_keys(
        &mut self,
        backend: BackendId,
        ids: TraceIds,
        result: Result<TraceKeys, String>,
    ) {
        match result {
            Ok(k) if ids == self.resolved_ids() => {
                self.trace_keys = Some(k);
                self.trace_stale = true;
            }
            Ok(_) => {}
            Err(e) => self.down(backend, e),
        }
    }

    fn apply_undecodable(&mut self, topic: String, count: u64, first: String) {
        self.trace_log.note_undecodable(&topic, || first);
        self.trace_log.undecodable += count - 1;
        self.trace_stale = true;
    }

    fn apply_trace_events(&mut self, backend: BackendId, events: Vec<TraceEvent>) {
        self.ok(backend);
        for e in events {
            self.trace_log.ingest(e);
        }
        self.trace_stale = true;
    }

    fn apply_trace_logs(&mut self, target: TraceTarget, read: LogRead) {
        if self.trace_target.as_ref() == Some(&target) {
            self.trace_logs = Some(read);
            self.trace_stale = true;
        }
    }

    fn apply_trace_history(
        &mut self,
        backend: BackendId,
        ids: TraceIds,
        result: Result<Vec<TraceEvent>, String>,
    ) {
        match result {
            // No trace topic is a configuration: its history is empty, not failed.
            Err(_) if self.no_trace_topic => {
                if ids == self.resolved_ids() {
                    self.trace_history = Some(Vec::new());
                }
            }
            Ok(events) => {
                self.ok(backend);
                if ids == self.resolved_ids() {
                    self.trace_history = Some(events);
                    self.trace_stale = true;
                }
            }
            Err(e) => self.down(backend, e),
        }
    }

    fn apply_trace_read(&mut self, ids: TraceIds, cost: Option<ReadCost>, scanned: u64) {
        if ids == self.resolved_ids() {
            self.trace_read = Some((ids, cost));
            self.trace_read_scanned = scanned;
        }
    }

    fn apply_payment_history(
        &mut self,
        backend: BackendId,
        ids: TraceIds,
        result: Result<Vec<PaymentMessage>, String>,
    ) {
        match result {
            Ok(history) => {
                self.ok(backend);
                if ids == self.resolved_ids() {
                    self.payments.absorb(history);
                    self.trace_stale = true;
                }
            }
            Err(e) => self.down(backend, e),
        }
    }

    fn apply_payment_messages(&mut self, backend: BackendId, msgs: Vec<PaymentMessage>) {
        self.ok(backend);
        for m in msgs {
            self.payments.ingest(m);
        }
        self.trace_stale = true;
    }

    /// A slow read shows at once; a round answered in time clears a slowness, not a `Down`.
    fn apply_slow(&mut self, backend: BackendId, reason: Option<String>) {
        let s = self
            .backends
            .get_mut(&backend)
            .expect("every backend has a state");
        match reason {
            Some(why) => s.health = Health::Slow(why),
            None if matches!(s.health, Health::Slow(_)) => s.health = Health::Up,
            None => {}
        }
    }

    fn apply_locks(&mut self, backend: BackendId, scan: LockScan) {
        match scan.nodes.iter().find(|n| n.role == "main") {
            Some(m) if !m.ok => {
                let e = m.error.clone().unwrap_or_default();
                self.down(backend, e);
                // The RedLock nodes may still have answered: keep what they said.
                if scan.nodes.iter().any(|n| n.role == "redlock" && n.ok) {
                    self.locks = Some(scan);
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
            }
        }
    }

    fn apply_payment_topic(
        &mut self,
        backend: BackendId,
        progress: Result<TopicProgress, String>,
        lag: Result<Vec<PartitionLag>, String>,
    ) {
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

    /// `b` delivered good data. A slow backend stays slow: one read answering says nothing of
    /// the others (a locked table's reads still time out); a round that answered in time clears
    /// it ([`Update::Slow`]).
    fn ok(&mut self, b: BackendId) {
        let s = self
            .backends
            .get_mut(&b)
            .expect("every backend has a state");
        if !matches!(s.health, Health::Slow(_)) {
            s.health = Health::Up;
        }
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
    /// never per frame: a 10,000-row view stays cheap to draw). Returns the number of rows.
    pub fn refilter(&mut self, view: View, f: &Filter, now: i64) -> usize {
        let needle = f.text.to_lowercase();
        let keep = |cells: Vec<String>| columns::passes(&cells, &needle, f.invert);
        let rows: Vec<usize> = match view {
            View::Locks => self.locks.as_ref().map_or_else(Vec::new, |s| {
                (0..s.locks.len())
                    .filter(|i| keep(columns::lock_cells(&s.locks[*i], now)))
                    .collect()
            }),
            View::Stuck => self.stuck.as_ref().map_or_else(Vec::new, |s| {
                (0..s.len())
                    .filter(|i| keep(columns::stuck_cells(&s[*i].shown(&self.mask), now)))
                    .collect()
            }),
            _ => return 0,
        };
        let n = rows.len();
        self.filtered.insert(view, rows);
        n
    }

    /// The row of a filtered table view at `selected`.
    pub fn selected_lock(&self, selected: usize) -> Option<&crate::lock::LockView> {
        let i = *self.filtered.get(&View::Locks)?.get(selected)?;
        self.locks.as_ref()?.locks.get(i)
    }

    pub fn selected_stuck(&self, selected: usize) -> Option<&StuckRecord> {
        let i = *self.filtered.get(&View::Stuck)?.get(selected)?;
        self.stuck.as_ref()?.get(i)
    }

    /// Trace a new target: what was read for the last one is dropped. False if it is the same.
    pub fn set_trace_target(&mut self, target: TraceTarget) -> bool {
        self.trace_stale = true;
        if self.trace_target.as_ref() == Some(&target) {
            return false;
        }
        self.trace_target = Some(target);
        self.trace_rows = None;
        self.trace_keys = None;
        self.trace_logs = None;
        self.trace_history = None;
        self.trace_read = None;
        self.trace_read_scanned = 0;
        true
    }

    /// What the trace target resolved to, from every source that answered ([`trace::Resolved`]:
    /// what the one-shot faces resolve from what they read).
    pub fn resolved(&self) -> Option<trace::Resolved> {
        let target = self.trace_target.as_ref()?;
        let rows = self.trace_rows.as_ref();
        Some(trace::Resolved::of(
            target,
            rows,
            &self.payments,
            &self.trace_log,
        ))
    }

    /// The IDs the trace target resolved to, from every source that answered.
    pub fn resolved_ids(&self) -> TraceIds {
        self.resolved().map(|r| r.ids).unwrap_or_default()
    }

    /// The timeline of the current trace target, from whatever the collectors have sent: the
    /// one assembly of a trace ([`trace::assemble`]) over the TUI's stores.
    pub fn timeline(&self, now: i64) -> Option<Timeline> {
        let target = self.trace_target.as_ref()?;
        let pieces = TracePieces {
            rows: self.trace_rows.as_ref(),
            keys: self.trace_keys.as_ref(),
            payments: &self.payments,
            log: &self.trace_log,
            history: self.trace_history.as_deref(),
            mask: &self.mask,
            log_lines: self.trace_logs.as_ref(),
            cost: self.trace_read.as_ref().and_then(|(_, cost)| cost.as_ref()),
            no_trace_topic: self.no_trace_topic,
        };
        let resolved = self.resolved()?;
        let mut t = trace::assemble(target, &pieces, &resolved, now);
        for (id, state) in &self.backends {
            // The DLQ is not a trace source; no trace topic is a configuration, not a failure.
            let skipped = !BackendId::ALL.contains(id)
                || (*id == BackendId::TraceTopic && self.no_trace_topic);
            if let (Health::Down(e), false) = (&state.health, skipped) {
                t.not_answered(id.name(), e.clone());
            }
        }
        Some(t)
    }

    /// Rebuild the trace view when it changed or aged: called before each frame, so the
    /// (linear) search of the trace log runs at most once per frame and not at all when nothing
    /// changed.
    pub fn refresh_trace(&mut self, paused: bool, now: i64) {
        if self.trace_target.is_none() {
            self.trace_view = None;
            return;
        }
        let aged = !paused
            && self
                .trace_built_at
                .is_none_or(|t| t.elapsed() >= TIMELINE_AGES);
        if self.trace_stale || aged || self.trace_view.is_none() {
            self.trace_view = self.timeline(now);
            self.trace_stale = false;
            self.trace_built_at = Some(Instant::now());
        }
    }

    /// What the rates still wait for, while the trace topic's last hour is being read: the
    /// rates computed so far would look like "nothing happened". `None` once read.
    pub fn rates_reading(&self) -> Option<String> {
        let minutes = crate::console::read::store::RATE_WINDOW_MINUTES;
        if self.no_trace_topic {
            return Some("no rates: kafka.trace_topic is empty (a team's own system)".into());
        }
        let head = format!("reading the last {minutes} minutes of the trace topic");
        match self.trace_topic.as_ref().and_then(|p| p.catch_up) {
            Some(c) if c.done => None,
            Some(c) => {
                let pct = (c.scanned.min(c.to_read) * 100)
                    .checked_div(c.to_read)
                    .unwrap_or(0);
                Some(format!(
                    "{head}: {} of {} messages ({pct}%) …",
                    c.scanned, c.to_read
                ))
            }
            None => Some(format!("{head} …")),
        }
    }

    /// The Overview's lines ([`overview::findings`] over what the collectors read).
    pub fn findings(&self, now: i64) -> Vec<Finding> {
        let rates = self.trace_log.rates(now);
        let reading = self.rates_reading();
        // The Overview lists stuck records' owners too: as the Stuck view shows them (masked).
        let masked: Option<Vec<StuckRecord>> = self.stuck.as_ref().and_then(|s| {
            let shown: Vec<_> = s.iter().map(|r| r.shown(&self.mask)).collect();
            shown
                .iter()
                .any(|r| matches!(r, std::borrow::Cow::Owned(_)))
                .then(|| shown.into_iter().map(|r| r.into_owned()).collect())
        });
        overview::findings(&OverviewInput {
            rates_reading: reading.as_deref(),
            leaks: self.leaks.as_ref(),
            stuck: masked.as_deref().or(self.stuck.as_deref()),
            locks: self.locks.as_ref(),
            lag: self.lag.as_ref(),
            rates: &rates,
            lock_patterns: &self.lock_patterns,
            now_ms: now,
        })
    }
}
