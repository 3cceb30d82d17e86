//! The console's collectors: one tokio task per backend — the database, Redis, the trace topic,
//! the payment topic — each sending typed [`Update`]s over one bounded channel to the UI task,
//! which alone owns the state. A backend that hangs or dies only stops its own updates; its
//! errors arrive as updates too, so the UI shows it as down and keeps answering keys.
//!
//! The UI tells the collectors what it looks at through a `watch` channel ([`Focus`]): the
//! trace target and the IDs it resolved to, the refresh period, and whether it is paused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{host_port, redact_url, Config, LockMode};
use crate::contracts::{now_ms, Instance, TraceEvent, TraceTarget};
use crate::db::Database;
use crate::lock::Locks;
use crate::trace::Tracer;

use crate::console::report::ReportFormat;
use crate::console::tui::confirm::Planned;
use crate::ops::{self, ActionOutcome, ActionResult, Actions, AuditRow};

use crate::console::read::bounded;
use crate::console::read::dlq::{look_up, read_dlq, DlqListing, DEFAULT_DLQ_WINDOW};
use crate::console::read::locks::{self, TraceKeys};
use crate::console::read::logs::{self, LogRead};
use crate::console::read::overview::{self, Leak};
use crate::console::read::records::{self, StuckRecord, TraceIds, TraceRows};
use crate::console::read::store::RATE_WINDOW_MINUTES;
use crate::console::read::topics::{self, LiveStart, PartitionLag, PaymentMessage};
use crate::console::read::window::{ReadCost, TimeWindow};
use crate::lock::{LockInspector, LockScan};

/// Capacity of the update channel. A collector that gets ahead of the UI waits (it never drops
/// data and never grows memory).
pub const UPDATE_CHANNEL: usize = 64;
/// Trace events or payment messages sent in one update at most.
pub const BATCH: usize = 500;
/// How long [`Backends::shutdown`] lets the collectors finish before aborting them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);
// The sources are named in `read/` (the CLI twins name them too); re-exported for the TUI.
pub use crate::console::read::sources::{BackendId, DB_CONNECTIONS, POLL_TIMEOUT};

/// What the UI looks at; the collectors follow it.
#[derive(Debug, Clone, PartialEq)]
pub struct Focus {
    /// The trace target, when the trace view has one.
    pub target: Option<TraceTarget>,
    /// The IDs it resolved to so far (from any backend).
    pub ids: TraceIds,
    /// The target's database rows, once read: their times are where the read of the target's
    /// history looks in the topics (`None` before, and while the database is down).
    pub rows: Option<TraceRows>,
    /// The Trace view is on screen: a read of the trace topic's history is wanted only then.
    pub tracing: bool,
    pub paused: bool,
    pub refresh: Duration,
}

impl Focus {
    pub fn new(refresh: Duration) -> Focus {
        Focus {
            target: None,
            ids: TraceIds::default(),
            rows: None,
            tracing: true,
            paused: false,
            refresh,
        }
    }
}

/// Position of a followed topic: how far the reader is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicProgress {
    pub topic: String,
    pub partitions: usize,
    /// Sum of the partitions' high watermarks.
    pub end_offsets: i64,
    /// The live reader's catch-up with the last hour; `None` before it has looked up where to
    /// start.
    pub catch_up: Option<CatchUp>,
}

/// How far the live reader of a topic is in the last hour it reads before following the tail
/// (every figure computed from the topic is incomplete until `done`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// Messages the reader has read (the hour, then the tail).
    pub scanned: u64,
    /// Messages of the hour between its starts and the ends seen when it began.
    pub to_read: u64,
    /// Every partition reached the end it had when the reader began.
    pub done: bool,
}

/// How far back the live readers start: the Rates view's window.
pub const LIVE_WINDOW_MS: i64 = RATE_WINDOW_MINUTES as i64 * 60_000;

/// The reader thread's progress, read by the probe loop (see [`CatchUp`]).
#[derive(Debug, Default)]
struct LiveProgress {
    started: AtomicBool,
    scanned: AtomicU64,
    to_read: AtomicU64,
    done: AtomicBool,
}

impl LiveProgress {
    fn snapshot(&self) -> Option<CatchUp> {
        self.started.load(Ordering::Acquire).then(|| CatchUp {
            scanned: self.scanned.load(Ordering::Relaxed),
            to_read: self.to_read.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Acquire),
        })
    }
}

/// Everything a collector can tell the UI.
#[derive(Debug, Clone)]
pub enum Update {
    Stuck(Result<Vec<StuckRecord>, String>),
    /// Duplicates that got through in the Overview's window ([`overview::LEAK_WINDOW_MS`]).
    Leaks(Result<Vec<Leak>, String>),
    TraceRows {
        target: TraceTarget,
        result: Result<TraceRows, String>,
    },
    Locks(LockScan),
    TraceKeys {
        ids: TraceIds,
        result: Result<TraceKeys, String>,
    },
    TraceEvents(Vec<TraceEvent>),
    /// Messages of the trace topic that were not trace events: how many since the last batch,
    /// and why the first was not (counted in the Rates view and the Overview, never dropped in
    /// silence).
    UndecodableTraceMessages {
        topic: String,
        count: u64,
        first: String,
    },
    /// The trace events that name `ids`, read from the windows of the trace topic its rows name
    /// when the trace target changed: an order older than the last hour the live reader reads
    /// still has them.
    TraceHistory {
        ids: TraceIds,
        result: Result<Vec<TraceEvent>, String>,
    },
    /// The payment messages that name `ids`, read from the payment topic's windows at the same
    /// moment: an order older than the last hour still has its Kafka copies.
    PaymentHistory {
        ids: TraceIds,
        result: Result<Vec<PaymentMessage>, String>,
    },
    /// The read of the trace target's windows: `cost` is `None` while it runs (`scanned`: the
    /// messages read so far, sent a few times a second), then says what it read (per topic:
    /// windows, partitions, messages scanned).
    TraceRead {
        ids: TraceIds,
        cost: Option<ReadCost>,
        scanned: u64,
    },
    TraceTopic(Result<TopicProgress, String>),
    /// A read of `backend` has not answered for [`SLOW_AFTER`], or was ended for taking too long
    /// (the table it waited for and where to look): shown as slow at once, and not as ok again
    /// until a round of its reads answered in time (`reason` = `None`).
    Slow {
        backend: BackendId,
        reason: Option<String>,
    },
    /// The log lines of `target` (files and/or the shipped-logs topic, `read/logs.rs`); a log
    /// source that failed is named in the read and shown in the timeline.
    TraceLogs {
        target: TraceTarget,
        read: LogRead,
    },
    PaymentMessages(Vec<PaymentMessage>),
    PaymentTopic {
        progress: Result<TopicProgress, String>,
        lag: Result<Vec<PartitionLag>, String>,
    },
    /// The executor ran a confirmed batch: one result per action, in order.
    ActionResults(Vec<ActionResult>),
    /// One action of a running batch ended: its result and the batch's counts so far (each
    /// update carries the counts, so one dropped on a full channel loses nothing).
    BatchProgress(BatchProgress),
    /// A batch run by [`Actions::run_batch`] ended, finished or stopped between actions.
    BatchEnded(ops::BatchSummary),
    /// `ops_audit`, newest first (the Audit view).
    Audit(Result<Vec<AuditRow>, String>),
    /// `:report`: the file written, or why not.
    ReportWritten(Result<String, String>),
    /// The DLQ view's listing, verdicts looked up (or why not).
    Dlq(Result<Box<DlqListing>, String>),
}

impl Update {
    pub fn backend(&self) -> BackendId {
        match self {
            Update::Stuck(_)
            | Update::Leaks(_)
            | Update::TraceRows { .. }
            | Update::ActionResults(_)
            | Update::BatchProgress(_)
            | Update::BatchEnded(_)
            | Update::Audit(_)
            | Update::ReportWritten(_) => BackendId::Database,
            Update::Dlq(_) => BackendId::DlqTopic,
            Update::Locks(_) | Update::TraceKeys { .. } => BackendId::Redis,
            Update::TraceEvents(_)
            | Update::UndecodableTraceMessages { .. }
            | Update::TraceHistory { .. }
            | Update::TraceRead { .. }
            | Update::TraceTopic(_) => BackendId::TraceTopic,
            // Not a backend of its own: a log source that failed is an entry of the timeline.
            Update::TraceLogs { .. } => BackendId::TraceTopic,
            Update::PaymentMessages(_)
            | Update::PaymentHistory { .. }
            | Update::PaymentTopic { .. } => BackendId::PaymentTopic,
            Update::Slow { backend, .. } => *backend,
        }
    }
}

/// The running collectors. Dropping it stops them.
pub struct Backends {
    pub updates: mpsc::Receiver<Update>,
    pub focus: watch::Sender<Focus>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// For the action executor's results.
    tx: mpsc::Sender<Update>,
}

impl Backends {
    /// One task per backend; they connect on their own (and keep retrying), so this never fails
    /// and never waits for a service.
    pub fn spawn(config: &Config) -> Backends {
        let (tx, updates) = mpsc::channel(UPDATE_CHANNEL);
        let (focus, focus_rx) = watch::channel(Focus::new(config.console.refresh));
        let cancel = CancellationToken::new();
        let mut tasks = vec![
            tokio::spawn(database_task(
                config.clone(),
                tx.clone(),
                focus_rx.clone(),
                cancel.clone(),
            )),
            tokio::spawn(redis_task(
                config.clone(),
                tx.clone(),
                focus_rx.clone(),
                cancel.clone(),
            )),
            tokio::spawn(topic_task(
                config.clone(),
                TopicKind::Payments,
                tx.clone(),
                focus_rx.clone(),
                cancel.clone(),
            )),
        ];
        tasks.push(tokio::spawn(topic_task(
            config.clone(),
            TopicKind::Trace,
            tx.clone(),
            focus_rx.clone(),
            cancel.clone(),
        )));
        if logs::configured(config) {
            tasks.push(tokio::spawn(logs_task(
                config.clone(),
                tx.clone(),
                focus_rx,
                cancel.clone(),
            )));
        }
        Backends {
            updates,
            focus,
            cancel,
            tasks,
            tx,
        }
    }

    /// Start the task that runs confirmed actions (and reads `ops_audit` for the Audit view);
    /// its results come back as [`Update::ActionResults`] / [`Update::Audit`]. The UI never
    /// awaits it: a slow backend only delays the results.
    pub fn spawn_executor(
        &mut self,
        config: &Config,
        allow_actions: bool,
    ) -> mpsc::Sender<ExecRequest> {
        let (req_tx, req_rx) = mpsc::channel(8);
        self.tasks.push(tokio::spawn(executor_task(
            config.clone(),
            allow_actions,
            self.tx.clone(),
            req_rx,
            self.cancel.clone(),
        )));
        req_tx
    }

    /// Stop every collector: each ends at its next await or poll; one still busy after
    /// [`SHUTDOWN_GRACE`] is aborted — quitting never waits for a backend.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        // A collector waiting for room in the channel is answered at once.
        self.updates.close();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        for mut t in self.tasks.drain(..) {
            if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
                t.abort();
            }
        }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// What the UI asks the executor.
#[derive(Debug, Clone)]
pub enum ExecRequest {
    /// A confirmed batch: each action individually conditional, run in order; the token (Esc)
    /// stops it between actions.
    Run(Vec<Planned>, CancellationToken),
    LoadAudit,
    /// Read the DLQ (its last 7 days) and look up what the consumer would do with each message.
    LoadDlq,
    /// Write the post-incident report of this target (the order on screen) to a Markdown or
    /// HTML file in `console.report_dir`.
    Report(TraceTarget, ReportFormat),
}

/// How often the database collector looks for duplicates that got through.
pub const LEAK_PERIOD: Duration = Duration::from_secs(5);

/// Rows of `ops_audit` the Audit view shows.
pub const AUDIT_ROWS: i64 = 500;

/// The executor: one request at a time, in order. The actions are built on the first request
/// that needs them (a database that is down is said in the results, and tried again next time);
/// after each batch the Audit view is reloaded.
async fn executor_task(
    config: Config,
    allow: bool,
    tx: mpsc::Sender<Update>,
    mut rx: mpsc::Receiver<ExecRequest>,
    cancel: CancellationToken,
) {
    let mut ready: Option<(Actions, Option<Actions>)> = None;
    loop {
        let req = tokio::select! {
            r = rx.recv() => match r { Some(r) => r, None => return },
            _ = cancel.cancelled() => return,
        };
        if let ExecRequest::Report(target, format) = req {
            let written = crate::console::report::write(&config, &target, format)
                .await
                .map(|w| w.to_string())
                .map_err(|e| format!("{e:#}"));
            if tx.send(Update::ReportWritten(written)).await.is_err() {
                return;
            }
            continue;
        }
        if let ExecRequest::LoadDlq = req {
            if tx
                .send(Update::Dlq(load_dlq(&config, &cancel).await))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        if ready.is_none() {
            match executors(&config, allow).await {
                Ok(r) => ready = Some(r),
                Err(e) => {
                    let e = format!("{e:#}");
                    let update = match req {
                        ExecRequest::Run(batch, _) => Update::ActionResults(
                            batch
                                .iter()
                                .map(|p| not_performed(p, format!("not performed: {e}")))
                                .collect(),
                        ),
                        ExecRequest::LoadAudit | ExecRequest::LoadDlq | ExecRequest::Report(..) => {
                            Update::Audit(Err(e))
                        }
                    };
                    let _ = tx.send(update).await;
                    continue;
                }
            }
        }
        let (single, redlock) = ready.as_ref().expect("built above");
        if let ExecRequest::Run(batch, stop) = req {
            let ended = if batch.iter().all(|p| p.scope != LockMode::Redlock) {
                Update::BatchEnded(run_with_progress(&batch, single, &stop, &tx).await)
            } else {
                Update::ActionResults(run_batch(&batch, single, redlock.as_ref()).await)
            };
            if tx.send(ended).await.is_err() {
                return;
            }
            // A redrive changes the DLQ view's rows: it is read again.
            if batch
                .iter()
                .any(|p| matches!(p.action, ops::Action::Redrive { .. }))
                && tx
                    .send(Update::Dlq(load_dlq(&config, &cancel).await))
                    .await
                    .is_err()
            {
                return;
            }
        }
        let audit = ops::audit_rows(single.database(), 0, i64::MAX, AUDIT_ROWS)
            .await
            .map_err(|e| format!("reading ops_audit: {e}"));
        if tx.send(Update::Audit(audit)).await.is_err() {
            return;
        }
    }
}

/// The DLQ view's listing: the last [`DEFAULT_DLQ_WINDOW`] of the DLQ, verdicts looked up.
async fn load_dlq(config: &Config, cancel: &CancellationToken) -> Result<Box<DlqListing>, String> {
    let until = crate::contracts::now_ms();
    let window = crate::console::read::window::TimeWindow {
        from_ms: until - DEFAULT_DLQ_WINDOW.as_millis() as i64,
        to_ms: until,
    };
    let mut listing = read_dlq(config, window, cancel)
        .await
        .map_err(|e| format!("reading the DLQ: {e:#}"))?;
    let db = crate::console::read::sources::connect_database(config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let looked = look_up(config, &db, &mut listing).await;
    db.pool.close().await;
    looked.map_err(|e| format!("looking up the DLQ's verdicts: {e:#}"))?;
    Ok(Box::new(listing))
}

/// Where a running batch is: `ended` of `total` actions, and their outcomes so far.
#[derive(Debug, Clone, Default)]
pub struct BatchProgress {
    pub ended: usize,
    pub total: usize,
    pub done: usize,
    pub refused: usize,
    /// Errors, and actions that found the row changed (nothing written).
    pub failed: usize,
    pub last: Option<ActionResult>,
}

/// A batch on the main Redis's actions through the executor the CLI's bulk redrive uses
/// ([`Actions::run_batch`]), each result reported as it comes; `stop` ends it between actions.
async fn run_with_progress(
    batch: &[Planned],
    single: &Actions,
    stop: &CancellationToken,
    tx: &mpsc::Sender<Update>,
) -> ops::BatchSummary {
    let actions: Vec<ops::Action> = batch.iter().map(|p| p.action.clone()).collect();
    let mut so_far = BatchProgress {
        total: actions.len(),
        ..BatchProgress::default()
    };
    single
        .run_batch(&actions, stop, |i, r| {
            so_far.ended = i + 1;
            match r.outcome {
                ActionOutcome::Done => so_far.done += 1,
                ActionOutcome::Refused => so_far.refused += 1,
                ActionOutcome::Changed | ActionOutcome::Error => so_far.failed += 1,
            }
            so_far.last = Some(r.clone());
            // Best effort: the next update (or the summary) carries the same counts.
            let _ = tx.try_send(Update::BatchProgress(so_far.clone()));
        })
        .await
}

/// A batch with RedLock actions, in order, each action on the actions of its lock scope.
async fn run_batch(
    batch: &[Planned],
    single: &Actions,
    redlock: Option<&Actions>,
) -> Vec<ActionResult> {
    let mut results = Vec::with_capacity(batch.len());
    for p in batch {
        results.push(match (p.scope, redlock) {
            (LockMode::Redlock, Some(r)) => r.run(&p.action).await,
            (LockMode::Redlock, None) => not_performed(
                p,
                "not performed: redis.redlock_nodes lists fewer than 3 nodes".into(),
            ),
            _ => single.run(&p.action).await,
        });
    }
    results
}

/// The result of an action the executor could not run.
fn not_performed(p: &Planned, detail: String) -> ActionResult {
    ActionResult {
        action: p.action.name(),
        target: p.action.target().to_string(),
        outcome: ActionOutcome::Error,
        before: None,
        after: None,
        detail,
        audit_id: None,
    }
}

/// The actions over the main Redis (single mode) and, when configured, the RedLock nodes.
async fn executors(config: &Config, allow: bool) -> anyhow::Result<(Actions, Option<Actions>)> {
    let mut c = config.for_actions();
    c.database.max_connections = c.database.max_connections.min(2);
    let db = tokio::time::timeout(POLL_TIMEOUT, Database::connect_for_actions(&c))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the database {} did not answer within {POLL_TIMEOUT:?}",
                redact_url(&c.database.url)
            )
        })??;
    let instance = Instance::current();
    let tracer =
        Tracer::from_config(config, &instance).unwrap_or_else(|_| Tracer::log_only(&instance));
    c.lock.mode = LockMode::Single;
    let single = Actions::new(
        &c,
        db.clone(),
        Locks::from_config(&c, &instance, tracer.clone())?,
        tracer.clone(),
        allow,
    )
    .await;
    let redlock = if config.redis.redlock_nodes.len() >= 3 {
        c.lock.mode = LockMode::Redlock;
        Some(
            Actions::new(
                &c,
                db,
                Locks::from_config(&c, &instance, tracer.clone())?,
                tracer,
                allow,
            )
            .await,
        )
    } else {
        None
    };
    Ok((single, redlock))
}

/// Waits for the next round: the refresh period, a change of focus, or the end.
/// Returns false when the collector should stop.
async fn next_round(
    focus: &mut watch::Receiver<Focus>,
    period: Duration,
    cancel: &CancellationToken,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(period) => true,
        r = focus.changed() => r.is_ok(),
        _ = cancel.cancelled() => false,
    }
}

async fn database_task(
    config: Config,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let mut config = config;
    config.database.max_connections = config.database.max_connections.min(DB_CONNECTIONS);
    let mut db: Option<Database> = None;
    let mut next_leaks = tokio::time::Instant::now();
    // The last round had a slow read ([`RoundReads`]).
    let mut slow = false;
    loop {
        let f = focus.borrow_and_update().clone();
        if !f.paused {
            if db.is_none() {
                match tokio::time::timeout(POLL_TIMEOUT, Database::connect_for_reads(&config)).await
                {
                    Ok(Ok(d)) => db = Some(d),
                    Ok(Err(e)) => {
                        if !send_db_error(&tx, &f, format!("{e:#}")).await {
                            return;
                        }
                    }
                    Err(_) => {
                        let e = format!(
                            "database {} did not answer within {POLL_TIMEOUT:?}",
                            BackendId::Database.target(&config)
                        );
                        if !send_db_error(&tx, &f, e).await {
                            return;
                        }
                    }
                }
            }
            if let Some(d) = &db {
                if !database_round(d, &config, &f, &tx, &mut next_leaks, &mut slow).await {
                    return;
                }
            }
        }
        if !next_round(&mut focus, f.refresh, &cancel).await {
            return;
        }
    }
}

/// One round of the database collector's reads: the stuck records, the leaks (at most every
/// [`LEAK_PERIOD`]) and the rows of the trace in focus, each through [`RoundReads::read`]; a
/// round whose every read answered in time says so (the database is no longer slow). False when
/// the console has gone.
async fn database_round(
    d: &Database,
    config: &Config,
    f: &Focus,
    tx: &mpsc::Sender<Update>,
    next_leaks: &mut tokio::time::Instant,
    slow: &mut bool,
) -> bool {
    let mut reads = RoundReads {
        tx,
        slow: false,
        was_slow: *slow,
    };
    let stuck = records::stuck_records(d, now_ms(), config.console.stuck_threshold);
    if let Some(stuck) = reads.read("the stuck records", stuck).await {
        if tx.send(Update::Stuck(stuck)).await.is_err() {
            return false;
        }
    }
    // The leak query groups a day of rows: at most every LEAK_PERIOD.
    if tokio::time::Instant::now() >= *next_leaks {
        *next_leaks = tokio::time::Instant::now() + LEAK_PERIOD.max(f.refresh);
        let now = now_ms();
        let leaks = overview::leaks(d, now - overview::LEAK_WINDOW_MS, now + 1);
        if let Some(leaks) = reads.read("the leak queries", leaks).await {
            if tx.send(Update::Leaks(leaks)).await.is_err() {
                return false;
            }
        }
    }
    if let Some(target) = &f.target {
        let mut start = TraceIds::of_target(target);
        start.absorb(&f.ids);
        let rows = records::trace_rows(d, &start);
        if let Some(result) = reads.read("the trace's rows", rows).await {
            let target = target.clone();
            if tx.send(Update::TraceRows { target, result }).await.is_err() {
                return false;
            }
        }
    }
    *slow = reads.slow;
    let answered = Update::Slow {
        backend: BackendId::Database,
        reason: None,
    };
    reads.slow || tx.send(answered).await.is_ok()
}

/// How long a database read may take before the header says the database is slow (its bound,
/// `database.read_timeout`, is longer: the server ends the statement then).
pub const SLOW_AFTER: Duration = Duration::from_secs(1);

/// The reads of one round of the database collector, and whether one of them was slow.
struct RoundReads<'a> {
    tx: &'a mpsc::Sender<Update>,
    slow: bool,
    /// The last round was slow: the header says so already, with the table a read waited for,
    /// which a read of this round that is only late must not replace.
    was_slow: bool,
}

impl RoundReads<'_> {
    /// One read. Each of its statements is bounded on both sides (the server ends it at
    /// `database.read_timeout`, [`crate::db::bounds`]), so it always ends; until it does, the
    /// database is said to be slow once [`SLOW_AFTER`] has passed. A read ended for taking too
    /// long is said as slow too, naming the table and where to look, and gives no update of its
    /// own (`None`): the view keeps what it last read.
    async fn read<T>(
        &mut self,
        what: &str,
        read: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> Option<Result<T, String>> {
        tokio::pin!(read);
        let result = tokio::select! {
            r = &mut read => r,
            _ = tokio::time::sleep(SLOW_AFTER) => {
                if self.was_slow {
                    self.slow = true;
                } else {
                    self.slow(format!("{what}: no answer for {SLOW_AFTER:?} yet")).await;
                }
                read.await
            }
        };
        match result {
            Err(e) if e.is::<crate::db::bounds::NoAnswer>() => {
                self.slow(format!("{e:#}")).await;
                None
            }
            r => Some(r.map_err(|e| format!("{e:#}"))),
        }
    }

    async fn slow(&mut self, reason: String) {
        self.slow = true;
        let update = Update::Slow {
            backend: BackendId::Database,
            reason: Some(reason),
        };
        let _ = self.tx.send(update).await;
    }
}

async fn send_db_error(tx: &mpsc::Sender<Update>, f: &Focus, e: String) -> bool {
    if let Some(target) = &f.target {
        if tx
            .send(Update::TraceRows {
                target: target.clone(),
                result: Err(e.clone()),
            })
            .await
            .is_err()
        {
            return false;
        }
    }
    tx.send(Update::Stuck(Err(e))).await.is_ok()
}

async fn with_timeout<T>(
    f: impl std::future::Future<Output = anyhow::Result<T>>,
    what: &str,
) -> Result<T, String> {
    match tokio::time::timeout(POLL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!("{what} did not answer within {POLL_TIMEOUT:?}")),
    }
}

/// A lock scan that could not read the main node.
fn main_node_down(node: String, error: String) -> LockScan {
    LockScan::failed(node, "main", error)
}

/// How often the log lines of an unchanged trace are read again (a file is read whole, within
/// the trace's windows, each time).
const LOGS_PERIOD: Duration = Duration::from_secs(15);

/// The log lines of the trace in focus (`logs.files` and/or `logs.topic`): read when its IDs or
/// rows change, and again every [`LOGS_PERIOD`]; a read that is no longer wanted is dropped.
async fn logs_task(
    config: Config,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let mut last: Option<(TraceTarget, TraceIds, bool)> = None;
    let mut next_read = tokio::time::Instant::now();
    loop {
        let f = focus.borrow_and_update().clone();
        if let (Some(target), false) = (&f.target, f.paused) {
            let key = (target.clone(), f.ids.clone(), f.rows.is_some());
            if last.as_ref() != Some(&key) || tokio::time::Instant::now() >= next_read {
                let mut ids = TraceIds::of_target(target);
                ids.absorb(&f.ids);
                let list: Vec<String> = [
                    Some(target.id().to_string()),
                    ids.order_no,
                    ids.request_id,
                    ids.event_id,
                ]
                .into_iter()
                .flatten()
                .collect();
                let window = TimeWindow::last_day(now_ms());
                let read = tokio::select! {
                    r = logs::read_for_trace(&config, &list, f.rows.as_ref(), window) => r,
                    _ = cancel.cancelled() => return,
                };
                let update = Update::TraceLogs {
                    target: target.clone(),
                    read,
                };
                if tx.send(update).await.is_err() {
                    return;
                }
                last = Some(key);
                next_read = tokio::time::Instant::now() + LOGS_PERIOD;
            }
        }
        if !next_round(&mut focus, f.refresh, &cancel).await {
            return;
        }
    }
}

/// The Redis collector's database, for linking token locks to their requests
/// ([`locks::link_tokens`]): connected on first need, never waited for longer than a poll.
/// A database that could not be reached is tried again after this long, so a hung one never
/// holds the lock scan up more than once in a while.
const LINK_RETRY: Duration = Duration::from_secs(30);

#[derive(Default)]
struct TokenLinks {
    db: Option<Database>,
    failed_at: Option<tokio::time::Instant>,
}

impl TokenLinks {
    async fn database(&mut self, config: &Config) -> Option<&Database> {
        let waiting = self.failed_at.is_some_and(|t| t.elapsed() < LINK_RETRY);
        if self.db.is_none() && !waiting {
            let connect = Database::connect_for_reads(config);
            match tokio::time::timeout(POLL_TIMEOUT, connect).await {
                Ok(Ok(db)) => self.db = Some(db),
                _ => self.failed_at = Some(tokio::time::Instant::now()),
            }
        }
        self.db.as_ref()
    }

    /// Link the scan's token locks (left raw when the database cannot answer; then not asked
    /// again for [`LINK_RETRY`], so a hung database never slows every lock scan).
    async fn link(&mut self, config: &Config, found: &mut [crate::lock::LockView]) {
        let has_token = found
            .iter()
            .any(|l| matches!(l.format, crate::lock::formats::LockFormat::Token { .. }));
        if !has_token || self.failed_at.is_some_and(|t| t.elapsed() < LINK_RETRY) {
            return;
        }
        let Some(db) = self.database(config).await else {
            return;
        };
        let linked = tokio::time::timeout(POLL_TIMEOUT, locks::link_tokens(db, found)).await;
        if !matches!(linked, Ok(Ok(()))) {
            self.failed_at = Some(tokio::time::Instant::now());
        }
    }
}

async fn redis_task(
    config: Config,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let inspector = match LockInspector::from_config(&config) {
        Ok(n) => n,
        Err(e) => {
            let scan = main_node_down(host_port(&config.redis.url), format!("{e:#}"));
            let _ = tx.send(Update::Locks(scan)).await;
            return;
        }
    };
    // The full lock scan runs at most every refresh period and never more than a third of the
    // time (a scan of 100,000 keys takes about a second): the console must not become the load on
    // the Redis it watches. The keys of the trace in focus are read every period.
    let mut next_scan = tokio::time::Instant::now();
    // Token locks are linked to their requests through the database (connected when one is
    // first seen; a database that is down leaves them raw and is tried again next round).
    let mut links = TokenLinks::default();
    // When each Redisson or token value was first seen, so a lock renewed for ever is flagged.
    let mut first_seen = crate::lock::FirstSeen::default();
    let held_warning = crate::lock::lock_held_warning(&config);
    loop {
        let f = focus.borrow_and_update().clone();
        if !f.paused {
            if tokio::time::Instant::now() >= next_scan {
                let started = tokio::time::Instant::now();
                let mut scan = match tokio::time::timeout(
                    POLL_TIMEOUT * 6,
                    inspector.scan(locks::LOCK_LIST_LIMIT),
                )
                .await
                {
                    Ok(s) => s,
                    Err(_) => {
                        let main = inspector.main_node().to_string();
                        let error = format!(
                            "redis node {main}: the lock scan did not finish within {:?}",
                            POLL_TIMEOUT * 6
                        );
                        main_node_down(main, error)
                    }
                };
                links.link(&config, &mut scan.locks).await;
                first_seen.judge(&mut scan.locks, held_warning);
                next_scan = tokio::time::Instant::now() + f.refresh.max(started.elapsed() * 2);
                if tx.send(Update::Locks(scan)).await.is_err() {
                    return;
                }
            }
            if f.ids.order_no.is_some() || f.ids.request_id.is_some() {
                let ids = f.ids.clone();
                let name = inspector.main_node().to_string();
                // Only a database the lock scan already connected: a trace never waits for one.
                let db = links.db.as_ref();
                let result = with_timeout(
                    locks::trace_keys(
                        &inspector,
                        &config.foreign_locks.patterns,
                        ids.order_no.as_deref(),
                        ids.request_id.as_deref(),
                        db,
                    ),
                    &name,
                )
                .await;
                if tx.send(Update::TraceKeys { ids, result }).await.is_err() {
                    return;
                }
            }
        }
        if !next_round(&mut focus, f.refresh, &cancel).await {
            return;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopicKind {
    Trace,
    Payments,
}

impl TopicKind {
    fn purpose(self) -> &'static str {
        match self {
            TopicKind::Trace => "trace",
            TopicKind::Payments => "payments",
        }
    }
}

/// Follows one topic from the last hour on (every partition assigned, no group). A reader thread
/// polls the topic and sends what it reads in batches; this task probes the broker every refresh
/// with a client of its own (watermarks; for payments, the consumer group's lag), which is how a
/// dead broker shows up — the client library itself retries silently. The reader and the probe
/// never share a client, so a probe can never disturb the reader's fetches.
async fn topic_task(
    config: Config,
    kind: TopicKind,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let topic = match kind {
        TopicKind::Trace => config.kafka.trace_topic.clone(),
        TopicKind::Payments => config.kafka.payment_topic.clone(),
    };
    let mut reader: Option<std::thread::JoinHandle<()>> = None;
    let stop_reader = cancel.child_token();
    let mut history = HistoryRead::default();
    let live = Arc::new(LiveProgress::default());
    if kind == TopicKind::Trace && topic.is_empty() {
        // A team's system without idemguard's trace topic: nothing to follow or probe (the
        // header says so, `Stores::new`); the trace target's payment history is still read.
        loop {
            let f = focus.borrow_and_update().clone();
            history.follow(&f, &config, &tx, &cancel);
            if !next_round(&mut focus, f.refresh, &cancel).await {
                return;
            }
        }
    }
    loop {
        let f = focus.borrow_and_update().clone();
        if kind == TopicKind::Trace {
            history.follow(&f, &config, &tx, &cancel);
        }
        let probe = tokio::select! {
            p = probe_topic(&config, &topic, kind) => p,
            _ = cancel.cancelled() => break,
        };
        let u = match probe {
            Ok((mut progress, lag)) => {
                // A reader whose start could not be found has reported why: start another.
                if reader.as_ref().is_some_and(|h| h.is_finished()) {
                    reader = None;
                }
                progress.catch_up = live.snapshot();
                if reader.is_none() {
                    match start_reader(
                        &config,
                        &topic,
                        kind,
                        tx.clone(),
                        focus.clone(),
                        stop_reader.clone(),
                        live.clone(),
                    ) {
                        Ok(h) => reader = Some(h),
                        Err(e) => {
                            if tx.send(topic_error(kind, e)).await.is_err() {
                                break;
                            }
                            if !next_round(&mut focus, f.refresh, &cancel).await {
                                break;
                            }
                            continue;
                        }
                    }
                }
                match kind {
                    TopicKind::Trace => Update::TraceTopic(Ok(progress)),
                    TopicKind::Payments => Update::PaymentTopic {
                        progress: Ok(progress),
                        lag,
                    },
                }
            }
            Err(e) => {
                let e = crate::kafka_client::explain_read_failure(&config.kafka, e).await;
                topic_error(kind, e)
            }
        };
        if tx.send(u).await.is_err() || !next_round(&mut focus, f.refresh, &cancel).await {
            break;
        }
    }
    stop_reader.cancel();
    if let Some(h) = reader {
        let _ = tokio::task::spawn_blocking(move || h.join()).await;
    }
}

/// The read of the trace target's history: the windows of both topics around the times of its
/// database rows (an ID the database does not know: the last 24 h), in the partitions of its
/// keys — an order older than the live readers' hour still has its Kafka side. At most one at
/// a time, on a task of its own so the probe keeps its pace; cancelled as soon as nobody wants
/// it (another trace, another view, quitting), so it never holds the console up. One that has
/// answered is kept: coming back to the same trace, or a refresh that reads the same rows, does
/// not read the topics again.
#[derive(Default)]
struct HistoryRead {
    /// The IDs and windows read (or being read) for.
    of: Option<(TraceIds, Vec<TimeWindow>)>,
    running: Option<(CancellationToken, JoinHandle<()>)>,
}

impl HistoryRead {
    fn follow(
        &mut self,
        f: &Focus,
        config: &Config,
        tx: &mpsc::Sender<Update>,
        cancel: &CancellationToken,
    ) {
        let wanted = f.tracing && f.target.is_some() && f.rows.is_some();
        let key = f.rows.as_ref().map(|rows| {
            let (_, windows) = bounded::trace_windows(config, Some(rows), TimeWindow::last_day(0));
            (f.ids.clone(), windows)
        });
        let in_flight = self.running.as_ref().is_some_and(|(_, h)| !h.is_finished());
        if self.of != key || (!wanted && in_flight) {
            if let Some((stop, _)) = self.running.take() {
                stop.cancel();
            }
            self.of = None;
        }
        let (Some(target), Some(rows)) = (f.target.clone(), f.rows.clone()) else {
            return;
        };
        if !wanted || self.of.is_some() {
            return;
        }
        self.of = key;
        let stop = cancel.child_token();
        let (config, tx, ids) = (config.clone(), tx.clone(), f.ids.clone());
        let cancelled = stop.clone();
        let task = tokio::spawn(async move {
            let progress = bounded::Scanned::default();
            let window = TimeWindow::last_day(crate::contracts::now_ms());
            let read = bounded::read_topics_counting(
                &config,
                &target,
                Some(&rows),
                window,
                &cancelled,
                &progress,
            );
            tokio::pin!(read);
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let (payments, events, cost) = loop {
                tokio::select! {
                    done = &mut read => break done,
                    _ = tick.tick() => {
                        let scanned = progress.load(std::sync::atomic::Ordering::Relaxed);
                        let reading = Update::TraceRead { ids: ids.clone(), cost: None, scanned };
                        if tx.send(reading).await.is_err() {
                            return;
                        }
                    }
                }
            };
            if cancelled.is_cancelled() {
                return;
            }
            send_history(&tx, ids, payments, events, cost).await;
        });
        self.running = Some((stop, task));
    }
}

/// The answers of a read of the trace target's history; the app keeps them only while the IDs
/// are still the ones it traces.
async fn send_history(
    tx: &mpsc::Sender<Update>,
    ids: TraceIds,
    payments: anyhow::Result<crate::console::read::store::PaymentIndex>,
    events: anyhow::Result<crate::console::read::store::TraceLog>,
    cost: ReadCost,
) {
    let result = events
        .map(|log| log.oldest_first())
        .map_err(|e| format!("{e:#}"));
    let history = Update::TraceHistory {
        ids: ids.clone(),
        result,
    };
    let result = payments
        .map(|index| index.messages())
        .map_err(|e| format!("{e:#}"));
    let read = Update::TraceRead {
        ids: ids.clone(),
        scanned: cost.messages_scanned(),
        cost: Some(cost),
    };
    for u in [history, Update::PaymentHistory { ids, result }, read] {
        if tx.send(u).await.is_err() {
            return;
        }
    }
}

fn topic_error(kind: TopicKind, e: String) -> Update {
    match kind {
        TopicKind::Trace => Update::TraceTopic(Err(e)),
        TopicKind::Payments => Update::PaymentTopic {
            progress: Err(e.clone()),
            lag: Err(e),
        },
    }
}

/// A thread that reads the topic from the last hour ([`LIVE_WINDOW_MS`]) on, then follows its
/// tail, and sends batches: full ones at once, others 100 ms after their first message — live
/// enough for the trace view, few enough updates for the UI. It waits (never drops) when the UI
/// is behind, and stops reading while paused. Reading from the beginning instead took minutes
/// on a topic of millions of events, and the Rates view said 0 meanwhile.
fn start_reader(
    config: &Config,
    topic: &str,
    kind: TopicKind,
    tx: mpsc::Sender<Update>,
    focus: watch::Receiver<Focus>,
    stop: CancellationToken,
    live: Arc<LiveProgress>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let servers = config.kafka.bootstrap_servers.clone();
    let consumer = topics::create_reader(&topics::reader_config(config, kind.purpose()))
        .map_err(|e| format!("cannot create a Kafka reader for {servers}: {e}"))?;
    let (config, topic) = (config.clone(), topic.to_string());
    let failure = format!("cannot start the {topic} reader thread");
    std::thread::Builder::new()
        .name(format!("console-{}", kind.purpose()))
        .spawn(move || {
            let since = now_ms() - LIVE_WINDOW_MS;
            let starts = match topics::live_starts(&config, &topic, since)
                .and_then(|s| assign_from(&consumer, &topic, &s).map(|()| s))
            {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.blocking_send(topic_error(kind, format!("{e:#}")));
                    return;
                }
            };
            let to_read = starts.iter().map(|s| (s.end - s.start).max(0) as u64).sum();
            live.to_read.store(to_read, Ordering::Relaxed);
            live.started.store(true, Ordering::Release);
            let r = Reader {
                consumer,
                kind,
                servers: &servers,
                topic: &topic,
                live: &live,
                ids: &config.kafka_ids.payment,
            };
            r.read_batches(&starts, &tx, &focus, &stop)
        })
        .map_err(|e| format!("{failure}: {e}"))
}

/// Assigns every partition of `topic` at its live start (its beginning when all of it is in
/// the hour: the order partitions are read in then stays what it was before the live start).
fn assign_from(consumer: &topics::Reader, topic: &str, starts: &[LiveStart]) -> anyhow::Result<()> {
    let mut tpl = TopicPartitionList::new();
    for s in starts {
        let at = if s.whole {
            Offset::Beginning
        } else {
            Offset::Offset(s.start)
        };
        tpl.add_partition_offset(topic, s.partition, at)?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| anyhow::anyhow!("kafka: assign {topic}: {e}"))
}

/// The reader thread's state (see [`start_reader`]).
struct Reader<'a> {
    consumer: topics::Reader,
    kind: TopicKind,
    servers: &'a str,
    topic: &'a str,
    live: &'a LiveProgress,
    /// Where a payment message carries its IDs (`kafka_ids.payment`).
    ids: &'a crate::config::TopicIds,
}

impl Reader<'_> {
    /// The reader thread's loop; ends on `stop` or when the UI is gone. The catch-up is done
    /// when every partition reached the end it had at the start and a poll came back empty
    /// (as in [`topics::read_to_end`]).
    fn read_batches(
        &self,
        starts: &[LiveStart],
        tx: &mpsc::Sender<Update>,
        focus: &watch::Receiver<Focus>,
        stop: &CancellationToken,
    ) {
        let flush_after = Duration::from_millis(100);
        let mut remaining: std::collections::BTreeMap<i32, i64> = starts
            .iter()
            .filter(|s| s.end > s.start)
            .map(|s| (s.partition, s.end))
            .collect();
        let mut events: Vec<TraceEvent> = Vec::new();
        let mut undecodable: (u64, Option<String>) = (0, None);
        let mut payments: Vec<PaymentMessage> = Vec::new();
        let mut first: Option<std::time::Instant> = None;
        while !stop.is_cancelled() {
            let mut caught_up = false;
            if focus.borrow().paused {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => {
                    self.live.scanned.fetch_add(1, Ordering::Relaxed);
                    if remaining
                        .get(&m.partition())
                        .is_some_and(|end| m.offset() + 1 >= *end)
                    {
                        remaining.remove(&m.partition());
                    }
                    match self.kind {
                        TopicKind::Trace => match topics::trace_event_of(&m) {
                            Some(e) => events.push(e),
                            None => {
                                undecodable.0 += 1;
                                undecodable
                                    .1
                                    .get_or_insert_with(|| topics::not_a_trace_event(&m));
                            }
                        },
                        TopicKind::Payments => {
                            payments.push(PaymentMessage::from_kafka(&m, self.ids))
                        }
                    }
                    first.get_or_insert_with(std::time::Instant::now);
                }
                Some(Err(e)) => {
                    let e = format!("kafka {}: reading {}: {e}", self.servers, self.topic);
                    if tx.blocking_send(topic_error(self.kind, e)).is_err() {
                        return;
                    }
                }
                None => {
                    // A partition whose position already passed its end is caught up (an
                    // offset gap, such as a transaction marker, before the end).
                    if let Ok(pos) = self.consumer.position() {
                        for e in pos.elements() {
                            if let Offset::Offset(o) = e.offset() {
                                if remaining.get(&e.partition()).is_some_and(|end| o >= *end) {
                                    remaining.remove(&e.partition());
                                }
                            }
                        }
                    }
                    caught_up = remaining.is_empty();
                }
            }
            // Caught up: what is in hand goes now, and only then is the catch-up said done — the
            // Rates view counts from what was sent, and must not say "done" short of it.
            let due = events.len() >= BATCH
                || payments.len() >= BATCH
                || first.is_some_and(|t| caught_up || t.elapsed() >= flush_after);
            if due {
                first = None;
                if !events.is_empty()
                    && tx
                        .blocking_send(Update::TraceEvents(std::mem::take(&mut events)))
                        .is_err()
                {
                    return;
                }
                if let (count @ 1.., Some(first)) = std::mem::take(&mut undecodable) {
                    let topic = self.topic.to_string();
                    let update = Update::UndecodableTraceMessages {
                        topic,
                        count,
                        first,
                    };
                    if tx.blocking_send(update).is_err() {
                        return;
                    }
                }
                if !payments.is_empty()
                    && tx
                        .blocking_send(Update::PaymentMessages(std::mem::take(&mut payments)))
                        .is_err()
                {
                    return;
                }
            }
            if caught_up {
                self.live.done.store(true, Ordering::Release);
            }
        }
    }
}

type Probe = (TopicProgress, Result<Vec<PartitionLag>, String>);

/// The topic's partitions and watermarks (the broker's health); for payments also the consumer
/// group's lag. A client of its own each time: probing is rare and must not share state with the
/// reader.
async fn probe_topic(config: &Config, topic: &str, kind: TopicKind) -> Result<Probe, String> {
    let config = config.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let servers = config.kafka.bootstrap_servers.clone();
        let prober = topics::reader(&config, "probe").map_err(|e| format!("{e:#}"))?;
        let marks = topics::watermarks(&prober, &servers, &topic).map_err(|e| format!("{e:#}"))?;
        let progress = TopicProgress {
            topic: topic.clone(),
            partitions: marks.len(),
            end_offsets: marks.iter().map(|(_, _, h)| h).sum(),
            catch_up: None,
        };
        let lag = match kind {
            TopicKind::Payments => {
                topics::consumer_lag(&config, &topic, &config.kafka.consumer_group)
                    .map_err(|e| format!("{e:#}"))
            }
            TopicKind::Trace => Ok(Vec::new()),
        };
        Ok((progress, lag))
    })
    .await
    .map_err(|e| format!("kafka probe failed: {e}"))?
}
