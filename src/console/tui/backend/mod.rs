//! The console's collectors: one tokio task per backend — the database, Redis, the trace topic,
//! the payment topic — each sending typed [`Update`]s over one bounded channel to the UI task,
//! which alone owns the state. A backend that hangs or dies only stops its own updates; its
//! errors arrive as updates too, so the UI shows it as down and keeps answering keys.
//!
//! The UI tells the collectors what it looks at through a `watch` channel ([`Focus`]): the
//! trace target and the IDs it resolved to, the refresh period, and whether it is paused.
//!
//! Each collector is a file of its own; this one holds what they share — the updates, the
//! focus, the round timer and the bounded wait — and starts and stops them.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
use crate::console::read::messages::PaymentMessage;
use crate::console::read::overview::{self, Leak};
use crate::console::read::records::{self, StuckRecord, TraceIds, TraceRows};
use crate::console::read::store::RATE_WINDOW_MINUTES;
use crate::console::read::topics;
use crate::console::read::window::{ReadCost, TimeWindow};
use crate::lock::{LockInspector, LockScan};
use crate::stream::lag::PartitionLag;

mod database;
mod executor;
mod lock_scan;
mod log_lines;
mod topic_tail;

use database::database_task;
use executor::executor_task;
pub use executor::{BatchProgress, ExecRequest};
use lock_scan::redis_task;
use log_lines::logs_task;
use topic_tail::{topic_task, TopicKind};

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
    /// The IDs it resolved to so far (from any backend), the target's own among them.
    pub ids: TraceIds,
    /// The IDs its log lines are searched for: every ID its timeline shows
    /// ([`Resolved::log_ids`](crate::console::read::trace::Resolved::log_ids), as the one-shot
    /// trace searches them).
    pub log_ids: Vec<String>,
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
            log_ids: Vec::new(),
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
    /// The topic readers' threads still running ([`topic_tail`]'s `Running`).
    readers: Arc<AtomicUsize>,
}

impl Backends {
    /// One task per backend; they connect on their own (and keep retrying), so this never fails
    /// and never waits for a service.
    pub fn spawn(config: &Config) -> Backends {
        let (tx, updates) = mpsc::channel(UPDATE_CHANNEL);
        let (focus, focus_rx) = watch::channel(Focus::new(config.console.refresh));
        let cancel = CancellationToken::new();
        let readers = Arc::new(AtomicUsize::new(0));
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
                readers.clone(),
            )),
        ];
        tasks.push(tokio::spawn(topic_task(
            config.clone(),
            TopicKind::Trace,
            tx.clone(),
            focus_rx.clone(),
            cancel.clone(),
            readers.clone(),
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
            readers,
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
    /// [`SHUTDOWN_GRACE`] is aborted — quitting never waits for a backend. The topic readers'
    /// threads are waited for within the same grace (they see the stop within a poll).
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
        while self.readers.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Dropping stops the collectors as [`Backends::shutdown`] does, waiting (within
/// [`SHUTDOWN_GRACE`]) for the topic readers' threads alone: a reader is a librdkafka client on
/// a thread of its own, which an aborted task or an ended runtime does not stop, and a client
/// that still polls a topic being deleted crashes librdkafka's metadata cache against the
/// stack's broker (a test deletes its topics as it ends).
impl Drop for Backends {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.updates.close();
        let deadline = std::time::Instant::now() + SHUTDOWN_GRACE;
        while self.readers.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
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
