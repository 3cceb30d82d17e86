//! One trace, assembled in one place for every face: the TUI's Trace view, `idemguard trace ID`
//! and the post-incident report.
//!
//! A trace target is parsed once where it enters ([`TraceTarget::classify`] on the command line,
//! the `:trace` command, the report's scope) and travels typed. From it:
//!
//! 1. the database rows link requestId ↔ orderNo ↔ eventId ([`records::trace_rows`]);
//! 2. the topics are read for those IDs ([`bounded::read_topics_for`]) — or, in the TUI, its
//!    stores are what the collectors have read so far;
//! 3. the IDs are resolved from the rows and the topics ([`Resolved::of`]); an eventId only Kafka
//!    knows yet leads to its order, and the database is asked again;
//! 4. the Redis keys of the order and request are read (not for a report: the keys of then are
//!    gone), and the log lines of every ID the timeline shows ([`Resolved::log_ids`]), in the
//!    trace's windows ([`logs::read_for_trace`]);
//! 5. [`assemble`] picks the messages and events of the IDs and builds the [`Timeline`].
//!
//! Steps 1–4 are [`read_trace`] for the one-shot faces. The TUI's collectors do them
//! continuously (each on its own backend, following the TUI's `Focus`, which carries what
//! [`Resolved::of`] its stores gave: the IDs and the log IDs), and the TUI calls [`assemble`]
//! over its stores: the same step 5, the same [`TracePieces`]. So every face reads the same log
//! lines for a trace.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::config::Config;
use crate::contracts::{now_ms, TraceEvent, TraceTarget};
use crate::db::Database;

use crate::console::read::bounded;
use crate::console::read::locks::{self, TraceKeys};
use crate::console::read::logs::{self, LogRead};
use crate::console::read::messages::PaymentMessage;
use crate::console::read::records::{self, TraceIds, TraceRows};
use crate::console::read::sources::{BackendId, BackendStatus, POLL_TIMEOUT};
use crate::console::read::store::{event_ms, PaymentIndex, TraceLog};
use crate::console::read::timeline::{self, Timeline, TimelineInputs};
use crate::console::read::window::{ReadCost, TimeWindow};
use crate::lock::LockInspector;

/// What a trace is assembled from; any piece may be missing (its source is down or not read).
pub struct TracePieces<'a> {
    pub rows: Option<&'a TraceRows>,
    pub keys: Option<&'a TraceKeys>,
    pub payments: &'a PaymentIndex,
    pub log: &'a TraceLog,
    /// Older events of the target that `log` no longer keeps (the TUI's read of the trace
    /// topic's history); `None` for a one-shot read, whose `log` was read for the target.
    pub history: Option<&'a [TraceEvent]>,
    /// The fields no face shows (`[mask]`), masked as the timeline is built.
    pub mask: &'a crate::mask::Mask,
    /// The log lines of the trace's IDs ([`Resolved::log_ids`]), when a log source was read.
    pub log_lines: Option<&'a LogRead>,
    /// What reading the topics' windows for this trace cost, when they were read for it: kept
    /// in the timeline, and a partition shortcut that did not hold becomes a warning.
    pub cost: Option<&'a ReadCost>,
    /// No trace topic is configured: the timeline says so in an entry of its own.
    pub no_trace_topic: bool,
}

/// The IDs a trace target resolves to, from every source: the database rows first (they link
/// requestId ↔ orderNo ↔ eventId), then the payment messages and the trace events for an eventId
/// the database does not know yet.
fn resolve_ids(
    target: &TraceTarget,
    rows: Option<&TraceRows>,
    payments: &PaymentIndex,
    log: &TraceLog,
) -> TraceIds {
    let mut ids = TraceIds::of_target(target);
    if let Some(rows) = rows {
        ids.absorb(&rows.ids);
    }
    if let Some(e) = ids.event_id.clone() {
        if ids.order_no.is_none() {
            ids.order_no = payments.order_of_event(&e).map(str::to_string);
        }
        if ids.order_no.is_none() || ids.request_id.is_none() {
            if let Some((o, r)) = log.order_of_event(&e) {
                ids.absorb(&TraceIds {
                    order_no: o,
                    request_id: r,
                    event_id: None,
                });
            }
        }
    }
    ids
}

/// What a trace target resolves to from its rows and the topics' stores, worked out once: its
/// IDs, the payment messages that name them, and every eventId of both. The trace's rows are
/// read again, and its keys and log lines read, for it, and its timeline built from it — by the
/// one-shot faces over what they read, by the TUI over its stores.
pub struct Resolved {
    pub ids: TraceIds,
    messages: Vec<PaymentMessage>,
    event_ids: BTreeSet<String>,
}

impl Resolved {
    pub fn of(
        target: &TraceTarget,
        rows: Option<&TraceRows>,
        payments: &PaymentIndex,
        log: &TraceLog,
    ) -> Resolved {
        let ids = resolve_ids(target, rows, payments, log);
        let messages = payments.messages_for(ids.order_no.as_deref(), ids.event_id.as_deref());
        let event_ids = timeline::event_ids_of(target, rows, &messages);
        Resolved {
            ids,
            messages,
            event_ids,
        }
    }

    /// The IDs a trace's log lines are searched for: the target, the orderNo and requestId it
    /// resolved to, and every eventId — the IDs its timeline shows.
    pub fn log_ids(&self, target: &TraceTarget) -> Vec<String> {
        let mut out = BTreeSet::from([target.id().to_string()]);
        out.extend(self.ids.order_no.clone());
        out.extend(self.ids.request_id.clone());
        out.extend(self.event_ids.iter().cloned());
        out.into_iter().collect()
    }
}

/// The timeline of `target` from `pieces` and what they resolved to ([`Resolved::of`] the same
/// rows and stores), finished: the payment messages and trace events that name its IDs, merged
/// with its rows, keys and log lines; what the read cost and found wrong; an entry saying there
/// is no trace topic when there is none (pure). Every face shows this.
pub fn assemble(
    target: &TraceTarget,
    pieces: &TracePieces<'_>,
    resolved: &Resolved,
    now_ms: i64,
) -> Timeline {
    let (ids, messages, event_ids) = (&resolved.ids, &resolved.messages, &resolved.event_ids);
    let mut events = pieces.log.matching(
        ids.order_no.as_deref(),
        ids.request_id.as_deref(),
        event_ids,
    );
    if let Some(history) = pieces.history {
        let missing: Vec<TraceEvent> = history
            .iter()
            .filter(|e| !events.contains(e))
            .cloned()
            .collect();
        if !missing.is_empty() {
            events.extend(missing);
            events.sort_by_key(|e| event_ms(e).unwrap_or(0));
        }
    }
    let mut t = timeline::build(TimelineInputs {
        target,
        rows: pieces.rows,
        keys: pieces.keys,
        messages,
        events: &events,
        now_ms,
        mask: pieces.mask,
    });
    t.warnings.extend(pieces.log.undecodable_warning());
    if let Some(cost) = pieces.cost {
        warn_of_cost(&mut t, cost);
        t.read_cost = Some(cost.clone());
    }
    if let Some(read) = pieces.log_lines {
        t.add_log_lines(read, pieces.mask);
    }
    if pieces.no_trace_topic {
        t.entries.push(timeline::TimelineEntry {
            at_ms: None,
            layer: "kafka",
            source: "kafka.trace_topic".into(),
            summary: bounded::NO_TRACE_TOPIC.into(),
            stopped_by: None,
            fields: serde_json::Value::Null,
        });
    }
    t
}

/// Where [`read_trace`] takes the topics from.
pub enum TopicsFrom<'a> {
    /// Read both topics for this trace's IDs, in the windows its database rows name; an ID the
    /// database does not know is searched in the last [`DEFAULT_UNKNOWN_WINDOW`](crate::console::read::window::DEFAULT_UNKNOWN_WINDOW) (24 h).
    ReadForTarget,
    /// The same, an ID the database does not know searched in this window (`--since/--until`).
    ReadForTargetIn(TimeWindow),
    /// Stores already read, whole (a window report traces many orders from one read).
    Stores {
        payments: &'a PaymentIndex,
        log: &'a TraceLog,
    },
}

/// The sources a one-shot trace reads.
pub struct TraceSources<'a> {
    /// `None`: the database could not be reached (its status is the caller's).
    pub database: Option<&'a Database>,
    pub topics: TopicsFrom<'a>,
    /// Read the Redis keys of the order and the request (the headless twin; not a report).
    pub redis: bool,
}

/// A one-shot trace and how each source it read answered (database, Redis, trace topic,
/// payment topic, in that order; a source not read has no status).
pub struct TraceRead {
    pub timeline: Timeline,
    pub statuses: Vec<BackendStatus>,
}

/// Steps 1–5 of the module docs, once. The timeline's `read_cost` says what the topics cost
/// (`None` when they came from stores already read).
pub async fn read_trace(
    config: &Config,
    target: &TraceTarget,
    sources: TraceSources<'_>,
) -> TraceRead {
    let mut statuses = Vec::new();
    let t_db = Instant::now();
    let (mut rows, mut db_error) = match sources.database {
        Some(db) => match records::trace_rows(db, &TraceIds::of_target(target)).await {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        },
        None => (None, None),
    };
    let t_kafka = Instant::now();
    let logs_window = match &sources.topics {
        TopicsFrom::ReadForTargetIn(w) => *w,
        _ => TimeWindow::last_day(now_ms()),
    };
    let read: (PaymentIndex, TraceLog);
    let mut cost = None;
    let (payments, log) = match sources.topics {
        TopicsFrom::Stores { payments, log } => (payments, log),
        TopicsFrom::ReadForTarget | TopicsFrom::ReadForTargetIn(_) => {
            let window = match sources.topics {
                TopicsFrom::ReadForTargetIn(w) => w,
                _ => TimeWindow::last_day(now_ms()),
            };
            let never = tokio_util::sync::CancellationToken::new();
            let (payments, log, c) =
                bounded::read_topics_for(config, target, rows.as_ref(), window, &never).await;
            cost = Some(c);
            let (trace_error, payment_error) =
                explained(config, failed(&log), failed(&payments)).await;
            read = (payments.unwrap_or_default(), log.unwrap_or_default());
            let status = |b, error| BackendStatus::of(config, b, t_kafka, error);
            // No trace topic is a configuration, not a failure: the timeline says so instead.
            if !config.kafka.trace_topic.is_empty() {
                statuses.push(status(BackendId::TraceTopic, trace_error));
            }
            statuses.push(status(BackendId::PaymentTopic, payment_error));
            (&read.0, &read.1)
        }
    };
    let mut resolved = Resolved::of(target, rows.as_ref(), payments, log);
    if let Some(db) = sources.database {
        if let Some(r) = &mut rows {
            match reread_rows(db, &resolved.ids, r).await {
                Ok(true) => resolved = Resolved::of(target, rows.as_ref(), payments, log),
                Ok(false) => {}
                Err(e) => db_error = Some(e),
            }
        }
        let status = BackendStatus::of(config, BackendId::Database, t_db, db_error);
        statuses.insert(0, status);
    }
    let keys = if sources.redis {
        let (keys, status) = read_keys(config, &resolved.ids, sources.database).await;
        // After the database, before the topics: the order every document lists them in.
        statuses.insert(usize::from(sources.database.is_some()), status);
        keys
    } else {
        None
    };
    let mask = crate::mask::Mask::of(config);
    let log_lines = if logs::configured(config) {
        let ids = resolved.log_ids(target);
        Some(logs::read_for_trace(config, &ids, rows.as_ref(), logs_window).await)
    } else {
        None
    };
    let pieces = TracePieces {
        rows: rows.as_ref(),
        keys: keys.as_ref(),
        payments,
        log,
        history: None,
        mask: &mask,
        log_lines: log_lines.as_ref(),
        cost: cost.as_ref(),
        no_trace_topic: config.kafka.trace_topic.is_empty(),
    };
    let mut timeline = assemble(target, &pieces, &resolved, now_ms());
    let unsearched = rows.as_ref().and_then(|r| {
        crate::console::read::window::forward_window(r, std::time::Duration::from_secs(3600))
    });
    if unsearched.is_some() && config.console.forward_search.is_zero() {
        timeline.warn(
            "no row carries the payment's own time and console.forward_search is 0s: payment \
             events and log lines later than console.trace_margin after the order were not \
             searched",
        );
    }
    note_unanswered(&mut timeline, &statuses);
    TraceRead { timeline, statuses }
}

/// Every source in `statuses` that failed makes `timeline` partial: the one place a trace learns
/// that "not found" is only "not found where it could look".
pub fn note_unanswered(timeline: &mut Timeline, statuses: &[BackendStatus]) {
    for s in statuses.iter().filter(|s| !s.ok) {
        let error = s.error.as_deref().unwrap_or("no answer");
        timeline.not_answered(s.name, error);
    }
}

/// What reading the topics found wrong with the partition shortcut, as warnings (the one-shot
/// trace and the TUI's read of a trace's windows alike).
fn warn_of_cost(timeline: &mut Timeline, cost: &ReadCost) {
    for t in &cost.topics {
        if let Some(why) = &t.partitions_widened {
            timeline.warn(format!(
                "{}: the partition shortcut did not hold — {why}; every partition was read",
                t.topic
            ));
        }
    }
}

/// Step 3: an eventId only Kafka knows yet leads to its order — the database is asked again
/// when the IDs resolved name more than the rows did (on failure the rows read first stay).
/// True when `rows` were read again.
async fn reread_rows(
    db: &Database,
    resolved: &TraceIds,
    rows: &mut TraceRows,
) -> Result<bool, String> {
    if *resolved == rows.ids {
        return Ok(false);
    }
    *rows = records::trace_rows(db, resolved)
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(true)
}

fn failed<T>(r: &anyhow::Result<T>) -> Option<String> {
    r.as_ref().err().map(|e| format!("{e:#}"))
}

/// The topic reads' errors, said as the brokers' refusal of our TLS or SASL when they refused
/// (one question to the brokers for both).
async fn explained(
    config: &Config,
    trace: Option<String>,
    payments: Option<String>,
) -> (Option<String>, Option<String>) {
    let Some(first) = trace.clone().or_else(|| payments.clone()) else {
        return (None, None);
    };
    let said = crate::kafka_client::explain_read_failure(&config.kafka, first.clone()).await;
    if said == first {
        return (trace, payments);
    }
    (trace.map(|_| said.clone()), payments.map(|_| said))
}

/// The lock and fast-path keys of the order and the request (idemguard's own and those the
/// configured lock patterns give), bounded by [`POLL_TIMEOUT`]; a token lock linked to its
/// request through `db`.
async fn read_keys(
    config: &Config,
    ids: &TraceIds,
    db: Option<&Database>,
) -> (Option<TraceKeys>, BackendStatus) {
    let started = Instant::now();
    let keys = async {
        let inspector = LockInspector::from_config(config)?;
        locks::trace_keys(&inspector, &config.foreign_locks.patterns, ids, db).await
    };
    let (keys, error) = match tokio::time::timeout(POLL_TIMEOUT, keys).await {
        Ok(Ok(k)) => {
            let err = (!k.node_errors.is_empty()).then(|| k.node_errors.join("; "));
            (Some(k), err)
        }
        Ok(Err(e)) => (None, Some(format!("{e:#}"))),
        Err(_) => (
            None,
            Some(format!("redis did not answer within {POLL_TIMEOUT:?}")),
        ),
    };
    (
        keys,
        BackendStatus::of(config, BackendId::Redis, started, error),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::read::messages::PaymentMessage;
    use crate::contracts::{format_ms, Layer, Outcome};

    fn at(e: TraceEvent, ms: i64) -> TraceEvent {
        TraceEvent {
            ts: format_ms(ms),
            ..e
        }
    }

    /// An eventId only Kafka knows leads to its order; the order's events come from the log and
    /// from the history the log no longer keeps, oldest first; another order's events stay out.
    #[test]
    fn an_event_id_is_assembled_from_the_stores_and_the_history() {
        let (event, order) = (
            "0193a1c2-7f3e-7c1a-9d2b-5e8f6a7b8c9d",
            "20261130000000000abc",
        );
        let target = TraceTarget::classify(event);
        let mut payments = PaymentIndex::default();
        payments.ingest(PaymentMessage {
            topic: "payment.succeeded".into(),
            partition: 1,
            offset: 17,
            timestamp_ms: Some(2_000),
            order_no: Some(order.into()),
            request_id: None,
            event_id: Some(event.into()),
            pay_no: Some("P1".into()),
            payload_ok: true,
        });
        let mut log = TraceLog::default();
        let hit = TraceEvent::new(Layer::Stream, Outcome::DedupHit).event_id(event);
        log.ingest(at(hit.order_no(order), 3_000));
        log.ingest(at(
            TraceEvent::new(Layer::Api, Outcome::Replayed).order_no("other"),
            3_500,
        ));
        let older = at(
            TraceEvent::new(Layer::Api, Outcome::Replayed).order_no(order),
            1_000,
        );
        let history = vec![older];
        let pieces = TracePieces {
            rows: None,
            keys: None,
            payments: &payments,
            log: &log,
            history: Some(&history),
            mask: &crate::mask::Mask::none(),
            log_lines: None,
            cost: None,
            no_trace_topic: false,
        };
        let resolved = Resolved::of(&target, None, &payments, &log);
        let t = assemble(&target, &pieces, &resolved, 10_000);
        assert_eq!((t.kind, t.query.as_str()), ("event_id", event));
        assert_eq!(t.order_no.as_deref(), Some(order));
        let times: Vec<_> = t.entries.iter().map(|e| (e.layer, e.at_ms)).collect();
        assert_eq!(
            times,
            [
                ("api", Some(1_000)),
                ("kafka", Some(2_000)),
                ("stream", Some(3_000))
            ]
        );
        assert_eq!(t.stopped_count(), 2);
    }

    /// Every face's timeline is finished by `assemble`: the log lines of the IDs in time order
    /// with the rest, and the entry saying there is no trace topic.
    #[test]
    fn log_lines_and_the_missing_trace_topic_are_in_the_one_assembly() {
        let (payments, log) = (PaymentIndex::default(), TraceLog::default());
        let target =
            TraceTarget::classify("APP:ORDER:20261129:0193a1c2-1111-7222-8333-444455556666");
        let line = crate::console::read::logs::LogLine {
            at_ms: 5_000,
            service: Some("order-api".into()),
            level: Some("INFO".into()),
            message: "created".into(),
            order_no: None,
            request_id: Some(target.id().to_string()),
            event_id: None,
            source: "app.log:1".into(),
        };
        let read = LogRead {
            lines: vec![line],
            files_read: 1,
            ..LogRead::default()
        };
        let pieces = TracePieces {
            rows: None,
            keys: None,
            payments: &payments,
            log: &log,
            history: None,
            mask: &crate::mask::Mask::none(),
            log_lines: Some(&read),
            cost: None,
            no_trace_topic: true,
        };
        let resolved = Resolved::of(&target, None, &payments, &log);
        assert_eq!(resolved.log_ids(&target), [target.id().to_string()]);
        let t = assemble(&target, &pieces, &resolved, 10_000);
        let entries: Vec<_> = t
            .entries
            .iter()
            .map(|e| (e.layer, e.source.as_str()))
            .collect();
        assert_eq!(
            entries,
            [("log", "app.log:1"), ("kafka", "kafka.trace_topic")]
        );
    }
}
