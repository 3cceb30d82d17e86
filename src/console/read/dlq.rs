//! The DLQ view's read model, below every face (`idemguard dlq`, the TUI's `:dlq`): the
//! messages of `kafka.dlq_topic` in a window of time, newest first, each with why it is there,
//! where it came from, which consumer sent it there (`dlq.by.*`), its IDs, whether it was
//! redriven — and, looked up now, what the consumer would do with it today. Ops see why a payment
//! event was refused, by which consumer, and whether the cause is gone (the order arrived late,
//! a field was backfilled) before they redrive it.
//!
//! The topic is read like a trace's windows ([`read_windows`]): the offsets of the
//! window found by time, only those read, within [`DLQ_READ_DEADLINE`], at most
//! [`DLQ_MESSAGES_KEPT`] kept (the newest). The verdict asks the consumer's own parser
//! ([`crate::stream::poison::parse`]), this group's `processed_event` and the order.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::console::read::bounded::window_plan;
use crate::console::read::kafka::read_windows;
use crate::console::read::messages::id_at;
use crate::console::read::sources::blocking;
use crate::console::read::window::{TimeWindow, TopicCost};
use crate::contracts::PaymentSucceeded;
use crate::db::orders::{find_order, OrderKey};
use crate::db::state_machine::OrderStatus;
use crate::db::Database;
use crate::ops::AuditRow;
use crate::stream::poison::DeadLetteredBy;
use crate::stream::redrive::{
    audit_row_is_of, audit_target, DlqEntry, RedriveMark, SourcePosition,
};

/// The window read when `--since` is not given: the last 7 days before `--until` (a DLQ
/// message waits for a person, not for a retry).
pub const DEFAULT_DLQ_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// At most this many messages are kept, the newest: the view is for a person.
pub const DLQ_MESSAGES_KEPT: usize = 500;
/// How long the read of the DLQ's window may take.
pub const DLQ_READ_DEADLINE: Duration = Duration::from_secs(30);

/// What the consumer would do with a DLQ message today.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Poison still: `same_reason` when for the reason it was dead-lettered.
    StillPoison { reason: String, same_reason: bool },
    /// Its order is there and unpaid: a redrive pays it once.
    WouldApply,
    /// Its order is in a status PAID may not follow: a redrive is recorded as rejected.
    WouldBeRejected { status: String },
    /// A redrive changes nothing: this group processed the event, or the order is PAID.
    AlreadyApplied { how: String },
    /// Not looked up: the database did not answer.
    NotLookedUp { why: String },
}

/// The latest redrive of a DLQ message, from `ops_audit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedriveRecord {
    pub audit_id: i64,
    /// `done`, `attempt` (running, or interrupted: never retried by itself), `error` (the
    /// publish failed: may be retried).
    pub outcome: String,
    pub operator: String,
    pub at_ms: i64,
}

/// One DLQ message as the view shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DlqMessage {
    /// Its `ops_audit` target, `dlq:TOPIC:PARTITION:OFFSET` (what a redrive names).
    pub target: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub reason: String,
    pub source: Option<SourcePosition>,
    /// Who sent it to the DLQ (its `dlq.by.*` headers); `None` (JSON `null`) for a message
    /// dead-lettered by an idemguard older than them, or put there by someone else.
    pub dead_lettered_by: Option<DeadLetteredBy>,
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    pub event_id: Option<String>,
    /// A record of a message too large for the DLQ: not redrivable.
    pub cut: bool,
    /// It came back from a redrive still poison: not redriven again.
    pub returned_from: Option<RedriveMark>,
    pub redriven: Option<RedriveRecord>,
    pub verdict: Verdict,
    /// The consumer's parse of it, today; the verdict is built from it.
    #[serde(skip)]
    parsed: Result<PaymentSucceeded, String>,
}

impl DlqMessage {
    fn of(entry: &DlqEntry, config: &Config) -> DlqMessage {
        let m = &entry.message;
        use rdkafka::Message;
        let body: Option<serde_json::Value> =
            m.payload().and_then(|p| serde_json::from_slice(p).ok());
        let ids = &config.kafka_ids.payment;
        let at = |places: &[String]| id_at(m, body.as_ref(), places);
        DlqMessage {
            target: audit_target(&config.kafka.dlq_topic, entry.partition, entry.offset),
            partition: entry.partition,
            offset: entry.offset,
            timestamp_ms: entry.timestamp_ms,
            reason: entry.reason.clone(),
            source: entry.source.clone(),
            dead_lettered_by: DeadLetteredBy::of(m),
            order_no: at(&ids.order_no),
            request_id: at(&ids.request_id),
            event_id: at(&ids.event_id),
            cut: entry.cut,
            returned_from: entry.returned_from.clone(),
            redriven: None,
            verdict: Verdict::NotLookedUp {
                why: "not looked up yet".into(),
            },
            parsed: crate::stream::poison::parse(m),
        }
    }

    /// A message as a test draws it: its position, IDs and reason; not parsed.
    #[cfg(test)]
    pub fn for_test(partition: i32, offset: i64, order_no: &str, event_id: &str) -> DlqMessage {
        DlqMessage {
            target: format!("dlq:test-dlq:{partition}:{offset}"),
            partition,
            offset,
            timestamp_ms: Some(crate::contracts::now_ms() - 60_000),
            reason: "unparseable: eventId is not a UUID".into(),
            source: None,
            dead_lettered_by: None,
            order_no: Some(order_no.into()),
            request_id: None,
            event_id: Some(event_id.into()),
            cut: false,
            returned_from: None,
            redriven: None,
            verdict: Verdict::StillPoison {
                reason: "unparseable".into(),
                same_reason: true,
            },
            parsed: Err("unparseable".into()),
        }
    }

    /// True when one filter term matches its reason or one of its IDs (case-insensitive).
    pub fn matches(&self, term: &str) -> bool {
        let term = term.to_lowercase();
        [
            Some(&self.reason),
            self.order_no.as_ref(),
            self.request_id.as_ref(),
            self.event_id.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|v| v.to_lowercase().contains(&term))
    }
}

/// The DLQ in one window: its messages newest first, how it was read.
#[derive(Debug, Clone, Serialize)]
pub struct DlqListing {
    pub topic: String,
    pub window: TimeWindow,
    pub messages: Vec<DlqMessage>,
    /// More than [`DLQ_MESSAGES_KEPT`] in the window: the older ones are not shown.
    pub truncated: bool,
    pub read_cost: Option<TopicCost>,
}

/// The messages of the DLQ in `window`, newest first, at most [`DLQ_MESSAGES_KEPT`], without
/// verdicts ([`look_up`] adds them).
pub async fn read_dlq(
    config: &Config,
    window: TimeWindow,
    cancel: &CancellationToken,
) -> anyhow::Result<DlqListing> {
    let (c, cancel) = (config.clone(), cancel.clone());
    let (mut messages, truncated, cost) = blocking(move || {
        let plan = window_plan(&c, &c.kafka.dlq_topic, window);
        let mut kept: Vec<DlqMessage> = Vec::new();
        let mut truncated = false;
        let cost = read_windows(&c, &plan, DLQ_READ_DEADLINE, &cancel, |m| {
            kept.push(DlqMessage::of(&DlqEntry::of(m.detach()), &c));
            if kept.len() >= 2 * DLQ_MESSAGES_KEPT {
                newest_kept(&mut kept);
                truncated = true;
            }
        })?;
        Ok((kept, truncated, cost))
    })
    .await?;
    let truncated = truncated || messages.len() > DLQ_MESSAGES_KEPT;
    newest_kept(&mut messages);
    Ok(DlqListing {
        topic: config.kafka.dlq_topic.clone(),
        window,
        messages,
        truncated,
        read_cost: Some(cost),
    })
}

/// Newest first (by time, then position), the first [`DLQ_MESSAGES_KEPT`].
fn newest_kept(messages: &mut Vec<DlqMessage>) {
    messages
        .sort_by_key(|m| std::cmp::Reverse((m.timestamp_ms.unwrap_or(0), m.offset, m.partition)));
    messages.truncate(DLQ_MESSAGES_KEPT);
}

/// Adds to each message its latest redrive and its verdict, looked up now: one query for this
/// group's `processed_event`, one for the redrives, one per order.
pub async fn look_up(
    config: &Config,
    db: &Database,
    listing: &mut DlqListing,
) -> anyhow::Result<()> {
    let redrives = redrives_since(db, listing.window.from_ms).await?;
    let ids: Vec<&str> = listing
        .messages
        .iter()
        .filter_map(|m| m.parsed.as_ref().ok().map(|e| e.event_id.as_str()))
        .collect();
    let group = &config.kafka.consumer_group;
    let processed = crate::stream::sinks::already_processed(db, group, &ids).await?;
    for m in &mut listing.messages {
        m.redriven = latest_redrive_of(&redrives, m);
        m.verdict = verdict_of(db, m, &processed).await?;
    }
    Ok(())
}

/// What the consumer would do with `m` today (see [`Verdict`]).
async fn verdict_of(
    db: &Database,
    m: &DlqMessage,
    processed: &std::collections::HashSet<String>,
) -> anyhow::Result<Verdict> {
    let event = match &m.parsed {
        Err(reason) => {
            let same_reason = m.reason.starts_with(reason.as_str());
            return Ok(Verdict::StillPoison {
                reason: reason.clone(),
                same_reason,
            });
        }
        Ok(e) => e,
    };
    if processed.contains(&event.event_id) {
        return Ok(Verdict::AlreadyApplied {
            how: "its eventId is in processed_event".into(),
        });
    }
    let poison = |reason: String| {
        let same_reason = m.reason.starts_with(reason.as_str());
        Verdict::StillPoison {
            reason,
            same_reason,
        }
    };
    let Some(order) = find_order(db, OrderKey::OrderNo(&event.order_no)).await? else {
        return Ok(poison(format!("unknown order {}", event.order_no)));
    };
    let paid_elsewhere = find_order(db, OrderKey::PaymentEventId(&event.event_id)).await?;
    if let Some(other) = paid_elsewhere.filter(|o| o.order_no != order.order_no) {
        return Ok(poison(format!(
            "event {} already paid another order, so it cannot pay order {}",
            event.event_id, other.order_no
        )));
    }
    Ok(match order.status {
        OrderStatus::Created => Verdict::WouldApply,
        OrderStatus::Paid => Verdict::AlreadyApplied {
            how: match order.payment_event_id.as_deref() {
                Some(by) if by == event.event_id => "the order is PAID by this event".into(),
                Some(by) => format!("the order is already PAID by event {by}"),
                None => "the order is already PAID".into(),
            },
        },
        status => Verdict::WouldBeRejected {
            status: status.as_str().into(),
        },
    })
}

/// The redrives of each DLQ target since `since_ms` (a redrive follows its message, so the
/// window's start bounds them), oldest first: refusals are not redrives and are left out.
async fn redrives_since(
    db: &Database,
    since_ms: i64,
) -> anyhow::Result<HashMap<String, Vec<AuditRow>>> {
    let rows = sqlx::query_as::<_, AuditRow>(db.sql("console_audit_redrives"))
        .bind(since_ms)
        .bind(REDRIVES_READ)
        .fetch_all(&db.pool);
    let rows = db.bounded(rows).await?;
    let mut out: HashMap<String, Vec<AuditRow>> = HashMap::new();
    for r in rows.into_iter().filter(|r| r.outcome != "refused") {
        out.entry(r.target.clone()).or_default().push(r);
    }
    Ok(out)
}

/// The latest redrive of `m` among its target's rows (a row of an earlier message that held the
/// same position is not of it).
fn latest_redrive_of(
    redrives: &HashMap<String, Vec<AuditRow>>,
    m: &DlqMessage,
) -> Option<RedriveRecord> {
    let r = redrives
        .get(&m.target)?
        .iter()
        .rev()
        .find(|r| audit_row_is_of(r.before_state.as_deref(), m.timestamp_ms))?;
    Some(RedriveRecord {
        audit_id: r.id,
        outcome: r.outcome.clone(),
        operator: r.operator.clone(),
        at_ms: r.created_at,
    })
}

/// At most this many redrive rows are read for one listing.
const REDRIVES_READ: i64 = 10_000;

/// The DLQ message at `partition`@`offset` with its redrive and verdict looked up now (a
/// redrive's `--dry-run`, the TUI's confirmation); `None` when the DLQ holds no message there.
pub async fn one(
    config: &Config,
    db: &Database,
    partition: i32,
    offset: i64,
) -> anyhow::Result<Option<DlqMessage>> {
    let c = config.clone();
    let entry = blocking(move || crate::stream::redrive::read_entry(&c, partition, offset)).await?;
    let Some(entry) = entry else {
        return Ok(None);
    };
    let mut listing = DlqListing {
        topic: config.kafka.dlq_topic.clone(),
        window: TimeWindow {
            from_ms: entry.timestamp_ms.unwrap_or(0),
            to_ms: crate::contracts::now_ms(),
        },
        messages: vec![DlqMessage::of(&entry, config)],
        truncated: false,
        read_cost: None,
    };
    look_up(config, db, &mut listing).await?;
    Ok(listing.messages.pop())
}
