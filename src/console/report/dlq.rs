//! The DLQ messages of a report's orders: each with its reason, source position, age, redrive
//! and what the consumer would do with it now (the DLQ view's read model, [`read_dlq`] and
//! [`look_up`]), listed in a section of their own and placed in their order's timeline, so the
//! review sees the payment event that waited in the DLQ next to the redrive that freed it.

use crate::config::Config;
use crate::console::read::dlq::{look_up, read_dlq, DlqListing, DlqMessage, Verdict};
use crate::console::read::timeline::{Timeline, TimelineEntry};
use crate::console::read::window::TimeWindow;
use crate::contracts::format_ms;
use crate::db::Database;

/// The DLQ messages that name one of `timelines`' orders, requests or events, read from
/// `from_ms` to `now_ms` (a message waits in the DLQ after its order's incident), verdicts
/// looked up now; oldest first.
pub async fn messages_of(
    config: &Config,
    db: &Database,
    timelines: &[Timeline],
    from_ms: i64,
    now_ms: i64,
) -> anyhow::Result<Vec<DlqMessage>> {
    let window = TimeWindow {
        from_ms,
        to_ms: now_ms + 1,
    };
    let never = tokio_util::sync::CancellationToken::new();
    let mut listing: DlqListing = read_dlq(config, window, &never).await?;
    listing
        .messages
        .retain(|m| timelines.iter().any(|t| names(t, m)));
    look_up(config, db, &mut listing).await?;
    let mut messages = listing.messages;
    messages.reverse();
    Ok(messages)
}

/// True when `m` names the order, request or an event of `t`.
fn names(t: &Timeline, m: &DlqMessage) -> bool {
    let same = |a: &Option<String>, b: &Option<String>| a.is_some() && a == b;
    same(&t.order_no, &m.order_no)
        || same(&t.request_id, &m.request_id)
        || m.event_id.as_ref().is_some_and(|e| t.event_ids.contains(e))
}

/// Each message in its order's timeline, in time order with the rest: a Kafka copy of the event
/// in the DLQ, its reason, redrive and verdict in the summary.
pub fn place(timelines: &mut [Timeline], messages: &[DlqMessage], dlq_topic: &str) {
    for t in timelines.iter_mut() {
        let mine: Vec<&DlqMessage> = messages.iter().filter(|m| names(t, m)).collect();
        if mine.is_empty() {
            continue;
        }
        for m in mine {
            t.entries.push(TimelineEntry {
                at_ms: m.timestamp_ms,
                layer: "kafka",
                source: format!("{dlq_topic} p{}@{}", m.partition, m.offset),
                summary: format!(
                    "in the DLQ: {} · {} · now: {}",
                    m.reason,
                    redriven(m),
                    verdict(&m.verdict)
                ),
                stopped_by: None,
                fields: serde_json::to_value(m).unwrap_or_default(),
            });
        }
        t.entries.sort_by_key(|e| e.at_ms.unwrap_or(i64::MAX));
    }
}

/// Whether `m` was redriven: its latest `ops_audit` row, or why it will not be.
pub fn redriven(m: &DlqMessage) -> String {
    match (&m.redriven, &m.returned_from) {
        (Some(r), _) => format!(
            "redriven: {} (ops_audit row {}, {} by {})",
            r.outcome,
            r.audit_id,
            format_ms(r.at_ms),
            r.operator
        ),
        (None, Some(mark)) => format!(
            "returned from the redrive of {}@{} (ops_audit row {}): not redriven again",
            mark.dlq_partition, mark.dlq_offset, mark.audit_id
        ),
        (None, None) => "not redriven".into(),
    }
}

/// What the consumer would do with it now, in words.
pub fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::StillPoison { reason, .. } => format!("still poison ({reason})"),
        Verdict::WouldApply => "would apply (its order is there and unpaid)".into(),
        Verdict::WouldBeRejected { status } => format!("would be rejected (the order is {status})"),
        Verdict::AlreadyApplied { how } => format!("already applied ({how})"),
        Verdict::NotLookedUp { why } => format!("not looked up ({why})"),
    }
}

/// Where the message came from: `topic p@o`, or unknown.
pub fn source(m: &DlqMessage) -> String {
    m.source.as_ref().map_or("unknown".into(), |s| {
        format!("{} p{}@{}", s.topic, s.partition, s.offset)
    })
}
