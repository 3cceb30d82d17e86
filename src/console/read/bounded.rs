//! Bounded reads of the two topics into the stores, within [`TOPIC_READ_DEADLINE`], keeping
//! what [`Keep`] keeps. Every face reads windows of time, never a topic from its beginning:
//! a trace ([`read_topics_for`]: `idemguard trace`, `report --id`, the TUI's read of
//! a trace target's history) only the windows and partitions its IDs name ([`window`]); the
//! rates their last hour and a window report its incident window ([`read_window`]), in every
//! partition. Every read ends within one poll of its cancellation token. The whole-topic reads
//! ([`read_trace_log`], [`read_payments_keeping`], [`read_trace_log_keeping`]) remain only as the
//! baseline the benches and tests measure the windows against.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::contracts::{TraceEvent, TraceTarget};

use crate::console::read::catch_up::{read_to_end, StartAt};
use crate::console::read::kafka::read_windows_when;
use crate::console::read::messages::{not_a_trace_event, trace_event_of, PaymentMessage};
use crate::console::read::records::{TraceIds, TraceRows};
use crate::console::read::sources::blocking;
use crate::console::read::store::{PaymentIndex, TraceLog};
use crate::console::read::window::{self, ReadCost, TimeWindow, TopicCost, TopicPlan, WindowBasis};

/// What a trace says without a trace topic (`kafka.trace_topic = ""`: a team's own system).
pub const NO_TRACE_TOPIC: &str = "no trace topic (kafka.trace_topic is empty): this trace is \
    built from the database rows, Redis, the payment topic and the logs alone";

/// How long reading a topic to its end may take.
pub const TOPIC_READ_DEADLINE: Duration = Duration::from_secs(30);

/// The IDs a read of the topics for one trace keeps: a payment message or trace event is kept
/// when it names one of them, however many other messages the topic holds. Without it a read
/// keeps the newest [`PAYMENT_MESSAGES_KEPT`](crate::console::read::store::PAYMENT_MESSAGES_KEPT) /
/// [`TRACE_EVENTS_KEPT`](crate::console::read::store::TRACE_EVENTS_KEPT), and on a busy system the trace of an
/// order from an hour ago would have lost its Kafka side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Keep {
    ids: BTreeSet<String>,
    /// The order and the request, once known: the keys their messages were produced with.
    order_no: Option<String>,
    request_id: Option<String>,
    /// The eventId typed (a trace event naming only it is keyed by it).
    event_id: Option<String>,
    /// Keep every message (a window report, the rates): no ID to select by.
    all: bool,
}

impl Keep {
    /// The target itself and every ID the database rows link it to.
    pub fn of(target: &TraceTarget, rows: Option<&TraceRows>) -> Keep {
        let mut ids = BTreeSet::from([target.id().to_string()]);
        if let Some(r) = rows {
            ids.extend(
                [
                    r.ids.order_no.clone(),
                    r.ids.request_id.clone(),
                    r.ids.event_id.clone(),
                ]
                .into_iter()
                .flatten(),
            );
            ids.extend(r.event_ids());
        }
        let mut typed = TraceIds::of_target(target);
        if let Some(r) = rows {
            typed.absorb(&r.ids);
        }
        Keep {
            ids,
            order_no: typed.order_no,
            request_id: typed.request_id,
            event_id: typed.event_id,
            all: false,
        }
    }

    /// Every message and event (a read of a window for its rates or a window report).
    pub fn all() -> Keep {
        Keep {
            all: true,
            ..Keep::default()
        }
    }

    /// The keys of the trace's payment messages (key = orderNo): the orderNos kept; none (every
    /// partition) while the order is unknown.
    fn payment_keys(&self, rows: Option<&TraceRows>) -> Vec<String> {
        let mut keys: Vec<String> = rows
            .map(|r| {
                let outbox = r.outbox.iter().map(|o| o.msg_key.clone());
                r.ids.order_no.clone().into_iter().chain(outbox).collect()
            })
            .unwrap_or_default();
        if let Some(o) = self.order_no.clone() {
            keys.push(o);
        }
        keys.sort();
        keys.dedup();
        keys
    }

    /// The keys of the trace's events (key = orderNo, else requestId, else eventId): the order,
    /// the request and the eventId typed, once the order or the request is known; none (every
    /// partition) before — an event of an unknown order is keyed by an orderNo nobody named yet.
    fn trace_keys(&self) -> Vec<String> {
        if self.order_no.is_none() && self.request_id.is_none() {
            return Vec::new();
        }
        [&self.order_no, &self.request_id, &self.event_id]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The order and the request are both known: the trace topic's keys ([`trace_keys`]) can
    /// no longer change, whatever the payment messages say.
    ///
    /// [`trace_keys`]: Keep::trace_keys
    fn names_order_and_request(&self) -> bool {
        self.order_no.is_some() && self.request_id.is_some()
    }

    fn names(&self, id: Option<&str>) -> bool {
        id.is_some_and(|i| self.ids.contains(i))
    }

    /// Keeps a message that names a kept ID, and from then on every ID it names (an eventId the
    /// database does not know yet leads to its order).
    fn message(&mut self, m: &PaymentMessage) -> bool {
        if self.all {
            return true;
        }
        let hit = self.names(m.order_no.as_deref())
            || self.names(m.request_id.as_deref())
            || self.names(m.event_id.as_deref());
        if hit {
            if self.order_no.is_none() {
                self.order_no.clone_from(&m.order_no);
            }
            if self.request_id.is_none() {
                self.request_id.clone_from(&m.request_id);
            }
            self.ids.extend(
                [m.order_no.clone(), m.request_id.clone(), m.event_id.clone()]
                    .into_iter()
                    .flatten(),
            );
        }
        hit
    }

    /// True when the event names one of the kept IDs.
    pub fn keeps(&self, e: &TraceEvent) -> bool {
        self.all
            || self.names(e.order_no.as_deref())
            || self.names(e.request_id.as_deref())
            || self.names(e.event_id.as_deref())
    }
}

/// The payment messages that name what `keep` keeps (growing it), read to the current end;
/// ends early, with an error, when `cancel` is cancelled.
pub async fn read_payments_keeping(
    config: &Config,
    keep: Keep,
    cancel: &CancellationToken,
) -> anyhow::Result<(PaymentIndex, Keep)> {
    let c = config.clone();
    let cancel = cancel.clone();
    blocking(move || {
        let mut keep = keep;
        let mut index = PaymentIndex::default();
        read_to_end(
            &c,
            &c.kafka.payment_topic,
            StartAt::Beginning,
            TOPIC_READ_DEADLINE,
            &cancel,
            |m| {
                let m = PaymentMessage::from_kafka(m, &c.kafka_ids.payment);
                if keep.message(&m) {
                    index.ingest(m);
                }
            },
        )?;
        Ok((index, keep))
    })
    .await
}

/// The trace events of the trace topic from `start` that name what `keep` keeps; ends early,
/// with an error, when `cancel` is cancelled.
pub async fn read_trace_log_keeping(
    config: &Config,
    start: StartAt,
    keep: &Keep,
    cancel: &CancellationToken,
) -> anyhow::Result<TraceLog> {
    let c = config.clone();
    let keep = keep.clone();
    let cancel = cancel.clone();
    blocking(move || {
        let mut log = TraceLog::default();
        read_to_end(
            &c,
            &c.kafka.trace_topic,
            start,
            TOPIC_READ_DEADLINE,
            &cancel,
            |m| match trace_event_of(m) {
                Some(e) if keep.keeps(&e) => log.ingest(e),
                Some(_) => {}
                None => log.note_undecodable(&c.kafka.trace_topic, || not_a_trace_event(m)),
            },
        )?;
        Ok(log)
    })
    .await
}

/// Both topics, read for one trace in the windows its database rows name ([`window`]): the
/// payment messages first (they can lead an eventId to its order), then the trace events that
/// name any ID found so far — at the same time when the rows already name the order and the
/// request ([`ReadCost::concurrent`]: the trace topic's offsets are found meanwhile, its scan
/// keeps what the payment messages added). An ID without rows is searched in `unknown_id_window`. The cost
/// says, per topic, what was read. Ends early, with errors, when `cancel` is cancelled.
pub async fn read_topics_for(
    config: &Config,
    target: &TraceTarget,
    rows: Option<&TraceRows>,
    unknown_id_window: TimeWindow,
    cancel: &CancellationToken,
) -> (
    anyhow::Result<PaymentIndex>,
    anyhow::Result<TraceLog>,
    ReadCost,
) {
    let progress = Scanned::default();
    read_topics_counting(config, target, rows, unknown_id_window, cancel, &progress).await
}

/// Messages scanned so far by a read in flight (both topics): what the TUI shows while a
/// trace's windows are read, so a read that takes a while never looks like "nothing".
pub type Scanned = Arc<AtomicU64>;

/// [`read_topics_for`], counting the messages it scans into `progress` as it goes.
pub async fn read_topics_counting(
    config: &Config,
    target: &TraceTarget,
    rows: Option<&TraceRows>,
    unknown_id_window: TimeWindow,
    cancel: &CancellationToken,
    progress: &Scanned,
) -> (
    anyhow::Result<PaymentIndex>,
    anyhow::Result<TraceLog>,
    ReadCost,
) {
    let keep = Keep::of(target, rows);
    let (basis, windows) = trace_windows(config, rows, unknown_id_window);
    let mut cost = ReadCost {
        topics: Vec::new(),
        unknown_id_window: (basis == WindowBasis::UnknownIdWindow).then_some(unknown_id_window),
        rows_without_time: basis == WindowBasis::UnknownIdWindow
            && rows.is_some_and(|r| !r.is_empty()),
        concurrent: false,
        forward_search: rows.and_then(|r| window::forward_window(r, config.console.forward_search)),
        round_trips: Default::default(),
    };
    let plan = |topic: &str, keys: Vec<String>, known_partitions: Vec<i32>| TopicPlan {
        topic: topic.to_string(),
        basis,
        windows: windows.clone(),
        keys,
        partitioner: config.kafka.partitioner,
        known_partitions,
    };
    let consumed_from = consumed_partitions(config, rows);
    let payment_keys = keep.payment_keys(rows);
    let payment_plan = plan(&config.kafka.payment_topic, payment_keys, consumed_from);
    if config.kafka.trace_topic.is_empty() {
        let read = read_payments_in(config, payment_plan, keep, cancel, progress).await;
        let payments = tally(&mut cost, read.map(|(p, _, c)| (p, c)));
        return (payments, Err(anyhow::anyhow!(NO_TRACE_TOPIC)), cost);
    }
    let trace_plan = |keep: &Keep| plan(&config.kafka.trace_topic, keep.trace_keys(), Vec::new());
    let (payments, log) = if keep.names_order_and_request() {
        let plans = (payment_plan, trace_plan(&keep));
        cost.concurrent = true;
        read_at_once(config, plans, keep, cancel, progress).await
    } else {
        read_in_turn(config, payment_plan, trace_plan, keep, cancel, progress).await
    };
    let payments = tally(&mut cost, payments);
    let log = tally(&mut cost, log);
    (payments, log, cost)
}

/// The partitions of the payment topic the trace's rows say its messages were consumed from.
fn consumed_partitions(config: &Config, rows: Option<&TraceRows>) -> Vec<i32> {
    rows.map_or_else(Vec::new, |r| {
        let of_topic = r
            .processed
            .iter()
            .filter(|p| p.topic == config.kafka.payment_topic);
        of_topic.map(|p| p.kafka_partition as i32).collect()
    })
}

/// What a read of both topics found, each with what its read cost.
type TopicsRead = (
    anyhow::Result<(PaymentIndex, TopicCost)>,
    anyhow::Result<(TraceLog, TopicCost)>,
);

/// A topic's read counted into `cost` (in the order the reads are tallied), its result kept.
fn tally<T>(cost: &mut ReadCost, read: anyhow::Result<(T, TopicCost)>) -> anyhow::Result<T> {
    read.map(|(found, c)| {
        cost.add_topic(c);
        found
    })
}

/// Both topics at once, when the keep names the order and the request.
///
/// The trace topic's partitions are the order's and the request's, both known: its offsets are
/// found while the payment topic is read, and only its scan waits for what the payment messages
/// add to keep.
async fn read_at_once(
    config: &Config,
    (payment_plan, trace_plan): (TopicPlan, TopicPlan),
    keep: Keep,
    cancel: &CancellationToken,
    progress: &Scanned,
) -> TopicsRead {
    let (grown, kept) = tokio::sync::oneshot::channel();
    let payments = async {
        let read = read_payments_in(config, payment_plan, keep.clone(), cancel, progress);
        let read = read.await;
        let k = read
            .as_ref()
            .map_or_else(|_| keep.clone(), |(_, k, _)| k.clone());
        let _ = grown.send(k);
        read
    };
    let log = read_trace_log_after(config, (trace_plan, keep.clone(), kept), cancel, progress);
    let (payments, log) = tokio::join!(payments, log);
    (payments.map(|(p, _, c)| (p, c)), log)
}

/// The payment topic, then the trace topic with what the payment messages added to keep.
async fn read_in_turn(
    config: &Config,
    payment_plan: TopicPlan,
    trace_plan: impl FnOnce(&Keep) -> TopicPlan,
    keep: Keep,
    cancel: &CancellationToken,
    progress: &Scanned,
) -> TopicsRead {
    let read = read_payments_in(config, payment_plan, keep.clone(), cancel, progress);
    let (payments, keep) = match read.await {
        Ok((p, k, c)) => (Ok((p, c)), k),
        Err(e) => (Err(e), keep),
    };
    let log = read_trace_log_in(config, trace_plan(&keep), &keep, cancel, progress).await;
    (payments, log)
}

/// Where a trace reads: around the times of its database rows, `console.trace_margin` on each
/// side, and forward from the last of them when none carries the payment's time
/// ([`window::forward_window`]); `unknown_id_window` when the rows carry no time (the database
/// does not know the ID). The topics and the logs are read in the same windows.
pub fn trace_windows(
    config: &Config,
    rows: Option<&TraceRows>,
    unknown_id_window: TimeWindow,
) -> (WindowBasis, Vec<TimeWindow>) {
    let times = rows.map(window::row_times).unwrap_or_default();
    if times.is_empty() {
        (WindowBasis::UnknownIdWindow, vec![unknown_id_window])
    } else {
        let mut w = window::windows_around(&times, config.console.trace_margin);
        let forward = rows.and_then(|r| window::forward_window(r, config.console.forward_search));
        w.extend(forward);
        (WindowBasis::DatabaseTimes, window::merge_windows(w))
    }
}

/// Both topics in `window`, every partition, everything kept (up to the stores' bounds): a
/// window report's incident window. Ends early, with errors, when `cancel` is cancelled.
pub async fn read_window(
    config: &Config,
    window: TimeWindow,
    cancel: &CancellationToken,
) -> (
    anyhow::Result<PaymentIndex>,
    anyhow::Result<TraceLog>,
    ReadCost,
) {
    let mut cost = ReadCost::default();
    let plan = |topic: &str| window_plan(config, topic, window);
    let payments = read_payments_in(
        config,
        plan(&config.kafka.payment_topic),
        Keep::all(),
        cancel,
        &Scanned::default(),
    )
    .await
    .map(|(index, _, c)| {
        cost.add_topic(c);
        index
    });
    let log = read_whole_trace_log(config, window, cancel)
        .await
        .map(|(log, c)| {
            cost.add_topic(c);
            log
        });
    (payments, log, cost)
}

/// The trace topic in `window`, every partition, every event kept (up to the trace log's
/// bound): the rates' last hour.
pub async fn read_trace_log_window(
    config: &Config,
    window: TimeWindow,
    cancel: &CancellationToken,
) -> anyhow::Result<(TraceLog, TopicCost)> {
    read_whole_trace_log(config, window, cancel).await
}

/// The trace topic in `window`, every partition, every event kept.
async fn read_whole_trace_log(
    config: &Config,
    window: TimeWindow,
    cancel: &CancellationToken,
) -> anyhow::Result<(TraceLog, TopicCost)> {
    let plan = window_plan(config, &config.kafka.trace_topic, window);
    read_trace_log_in(config, plan, &Keep::all(), cancel, &Scanned::default()).await
}

/// The plan of a read of `window` of `topic`, every partition, its edges exact.
pub fn window_plan(config: &Config, topic: &str, window: TimeWindow) -> TopicPlan {
    TopicPlan {
        topic: topic.to_string(),
        basis: WindowBasis::ExplicitWindow,
        windows: vec![window],
        keys: Vec::new(),
        partitioner: config.kafka.partitioner,
        known_partitions: Vec::new(),
    }
}

/// The payment messages of `plan`'s windows that name what `keep` keeps (growing it).
async fn read_payments_in(
    config: &Config,
    plan: TopicPlan,
    keep: Keep,
    cancel: &CancellationToken,
    progress: &Scanned,
) -> anyhow::Result<(PaymentIndex, Keep, TopicCost)> {
    let c = config.clone();
    let (cancel, progress) = (cancel.clone(), progress.clone());
    blocking(move || {
        let mut keep = keep;
        let mut index = PaymentIndex::default();
        let each = |m: &rdkafka::message::BorrowedMessage<'_>| {
            progress.fetch_add(1, Ordering::Relaxed);
            let m = PaymentMessage::from_kafka(m, &c.kafka_ids.payment);
            if keep.message(&m) {
                index.ingest(m);
            }
        };
        let deadline = TOPIC_READ_DEADLINE;
        let cost = read_windows_when(&c, &plan, deadline, &cancel, || each)?;
        Ok((index, keep, cost))
    })
    .await
}

/// The trace events of `plan`'s windows that name what the payment topic's read, running beside
/// it, hands over through `grown` (what it started from, `keep`, should it end without a
/// word): the windows' offsets are found before it is needed.
async fn read_trace_log_after(
    config: &Config,
    (plan, keep, grown): (TopicPlan, Keep, tokio::sync::oneshot::Receiver<Keep>),
    cancel: &CancellationToken,
    progress: &Scanned,
) -> anyhow::Result<(TraceLog, TopicCost)> {
    let c = config.clone();
    let (cancel, progress) = (cancel.clone(), progress.clone());
    blocking(move || {
        let mut log = TraceLog::default();
        let into = &mut log;
        let topic = plan.topic.clone();
        let ready = || {
            let keep = grown.blocking_recv().unwrap_or(keep);
            move |m: &rdkafka::message::BorrowedMessage<'_>| {
                progress.fetch_add(1, Ordering::Relaxed);
                match trace_event_of(m) {
                    Some(e) if keep.keeps(&e) => into.ingest(e),
                    Some(_) => {}
                    None => into.note_undecodable(&topic, || not_a_trace_event(m)),
                }
            }
        };
        let deadline = TOPIC_READ_DEADLINE;
        let cost = read_windows_when(&c, &plan, deadline, &cancel, ready)?;
        Ok((log, cost))
    })
    .await
}

/// The trace events of `plan`'s windows that name what `keep` keeps: [`read_trace_log_after`]
/// with nothing more to wait for.
async fn read_trace_log_in(
    config: &Config,
    plan: TopicPlan,
    keep: &Keep,
    cancel: &CancellationToken,
    progress: &Scanned,
) -> anyhow::Result<(TraceLog, TopicCost)> {
    let (known, kept) = tokio::sync::oneshot::channel();
    let _ = known.send(keep.clone());
    let plan = (plan, keep.clone(), kept);
    read_trace_log_after(config, plan, cancel, progress).await
}

/// The trace events of the trace topic from `start` (bounded read to the current end): the
/// whole-topic read the windows replaced, kept as the baseline of benches and tests.
pub async fn read_trace_log(config: &Config, start: StartAt) -> anyhow::Result<TraceLog> {
    let c = config.clone();
    blocking(move || {
        let mut log = TraceLog::default();
        read_to_end(
            &c,
            &c.kafka.trace_topic,
            start,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| match trace_event_of(m) {
                Some(e) => log.ingest(e),
                None => log.note_undecodable(&c.kafka.trace_topic, || not_a_trace_event(m)),
            },
        )?;
        Ok(log)
    })
    .await
}
