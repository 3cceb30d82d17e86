//! Bounded reads of the two topics into the stores, for the one-shot faces (the CLI twins and
//! the post-incident report) and for the TUI's read of a trace target's history: each reads a
//! topic from its start to the end it had when the read began, within
//! [`TOPIC_READ_DEADLINE`], and keeps what [`Keep`] keeps.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::contracts::{TraceEvent, TraceTarget};

use crate::console::read::records::{TraceIds, TraceRows};
use crate::console::read::sources::blocking;
use crate::console::read::store::{PaymentIndex, TraceLog};
use crate::console::read::timeline;
use crate::console::read::topics::{self, PaymentMessage, StartAt};

/// How long reading a topic to its end may take.
pub const TOPIC_READ_DEADLINE: Duration = Duration::from_secs(30);

/// Every payment message of the payment topic, indexed (bounded read to the current end).
pub async fn read_payments(config: &Config) -> anyhow::Result<PaymentIndex> {
    let c = config.clone();
    blocking(move || {
        let mut index = PaymentIndex::default();
        topics::read_to_end(
            &c,
            &c.kafka.payment_topic,
            StartAt::Beginning,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| index.ingest(PaymentMessage::from_kafka(m)),
        )?;
        Ok(index)
    })
    .await
}

/// The IDs a read of the topics for one trace keeps: a payment message or trace event is kept
/// when it names one of them, however many other messages the topic holds. Without it a read
/// keeps the newest [`PAYMENT_MESSAGES_KEPT`](crate::console::read::store::PAYMENT_MESSAGES_KEPT) /
/// [`TRACE_EVENTS_KEPT`](crate::console::read::store::TRACE_EVENTS_KEPT), and on a busy system the trace of an
/// order from an hour ago would have lost its Kafka side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Keep {
    ids: BTreeSet<String>,
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
            ids.extend(timeline::event_ids_of(target, Some(r), &[]));
        }
        Keep { ids }
    }

    /// The target and the IDs it resolved to (the live console's trace target).
    pub fn of_ids(target: &TraceTarget, ids: &TraceIds) -> Keep {
        let mut keep = BTreeSet::from([target.id().to_string()]);
        keep.extend(
            [
                ids.order_no.clone(),
                ids.request_id.clone(),
                ids.event_id.clone(),
            ]
            .into_iter()
            .flatten(),
        );
        Keep { ids: keep }
    }

    fn names(&self, id: Option<&str>) -> bool {
        id.is_some_and(|i| self.ids.contains(i))
    }

    /// Keeps a message that names a kept ID, and from then on every ID it names (an eventId the
    /// database does not know yet leads to its order).
    fn message(&mut self, m: &PaymentMessage) -> bool {
        let hit = self.names(m.order_no.as_deref())
            || self.names(m.request_id.as_deref())
            || self.names(m.event_id.as_deref());
        if hit {
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
        self.names(e.order_no.as_deref())
            || self.names(e.request_id.as_deref())
            || self.names(e.event_id.as_deref())
    }
}

/// The payment messages that name what `keep` keeps (growing it), read to the current end.
pub async fn read_payments_keeping(
    config: &Config,
    keep: Keep,
) -> anyhow::Result<(PaymentIndex, Keep)> {
    let c = config.clone();
    blocking(move || {
        let mut keep = keep;
        let mut index = PaymentIndex::default();
        topics::read_to_end(
            &c,
            &c.kafka.payment_topic,
            StartAt::Beginning,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| {
                let m = PaymentMessage::from_kafka(m);
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
        topics::read_to_end(
            &c,
            &c.kafka.trace_topic,
            start,
            TOPIC_READ_DEADLINE,
            &cancel,
            |m| match topics::trace_event_of(m) {
                Some(e) if keep.keeps(&e) => log.ingest(e),
                Some(_) => {}
                None => log.undecodable += 1,
            },
        )?;
        Ok(log)
    })
    .await
}

/// Both topics, read for one trace: the payment messages first (they can lead an eventId to
/// its order), then the trace events that name any ID found so far.
pub async fn read_topics_for(
    config: &Config,
    target: &TraceTarget,
    rows: Option<&TraceRows>,
) -> (anyhow::Result<PaymentIndex>, anyhow::Result<TraceLog>) {
    let keep = Keep::of(target, rows);
    let (payments, keep) = match read_payments_keeping(config, keep.clone()).await {
        Ok((p, k)) => (Ok(p), k),
        Err(e) => (Err(e), keep),
    };
    (
        payments,
        read_trace_log_keeping(config, StartAt::Beginning, &keep, &CancellationToken::new()).await,
    )
}

/// The trace events of the trace topic from `start` (bounded read to the current end).
pub async fn read_trace_log(config: &Config, start: StartAt) -> anyhow::Result<TraceLog> {
    let c = config.clone();
    blocking(move || {
        let mut log = TraceLog::default();
        topics::read_to_end(
            &c,
            &c.kafka.trace_topic,
            start,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| match topics::trace_event_of(m) {
                Some(e) => log.ingest(e),
                None => log.undecodable += 1,
            },
        )?;
        Ok(log)
    })
    .await
}
