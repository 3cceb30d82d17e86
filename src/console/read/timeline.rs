//! One orderNo / requestId / eventId traced across every layer: the rows, keys, messages and
//! decisions the console read, merged into one timeline, oldest first — and for every duplicate,
//! the layer that stopped it (seed §6.5: "string the whole chain together with one ID").
//!
//! Pure: it only arranges what the readers returned, so the TUI and `idemguard trace` show the
//! same thing.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::json;

use crate::contracts::{TraceEvent, TraceTarget};

use crate::console::format::{age, pttl, short};
use crate::console::read::locks::TraceKeys;
use crate::console::read::records::{TraceIds, TraceRows};
use crate::console::read::store::{event_ms, PaymentIndex, TraceLog};
use crate::console::read::topics::PaymentMessage;
use crate::lock::LockView;

/// One thing that happened (or is, for Redis keys) to the traced order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// Epoch ms; `null` for state without a time of its own (sorted last: "now").
    pub at_ms: Option<i64>,
    /// `api`, `lock`, `db`, `kafka`, `stream` or `sink`.
    pub layer: &'static str,
    /// Where it was read: a table, a Redis key, `payment.succeeded p1@17`, `trace`.
    pub source: String,
    /// One line for people.
    pub summary: String,
    /// For a decision that stopped a duplicate: the layer that stopped it.
    pub stopped_by: Option<String>,
    /// Every field of the row, key, message or event.
    pub fields: serde_json::Value,
}

/// A duplicate stopped: which layer, how, when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interception {
    pub at_ms: Option<i64>,
    pub layer: String,
    pub outcome: String,
    pub detail: String,
    pub instance: String,
}

/// What became of one payment event: copies delivered against effects written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventEffects {
    pub event_id: String,
    pub kafka_copies: usize,
    pub processed_rows: usize,
    pub dedup_hits: usize,
    pub points_rows: usize,
    pub notification_rows: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// What the operator typed.
    pub query: String,
    /// `order_no`, `request_id` or `event_id`.
    pub kind: &'static str,
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    pub event_ids: Vec<String>,
    /// False when no source knows the ID.
    pub found: bool,
    pub entries: Vec<TimelineEntry>,
    pub interceptions: Vec<Interception>,
    pub events: Vec<EventEffects>,
}

impl Timeline {
    pub fn stopped_count(&self) -> usize {
        self.interceptions.len()
    }
}

/// The pieces a timeline is built from; any may be missing (its backend is down).
pub struct TimelineInputs<'a> {
    pub query: &'a str,
    pub rows: Option<&'a TraceRows>,
    pub keys: Option<&'a TraceKeys>,
    pub messages: &'a [PaymentMessage],
    pub events: &'a [TraceEvent],
    pub now_ms: i64,
}

pub fn kind_of(target: &TraceTarget) -> &'static str {
    match target {
        TraceTarget::OrderNo(_) => "order_no",
        TraceTarget::RequestId(_) => "request_id",
        TraceTarget::EventId(_) => "event_id",
    }
}

/// Every eventId the pieces name.
pub fn event_ids_of(
    target: &TraceTarget,
    rows: Option<&TraceRows>,
    messages: &[PaymentMessage],
) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    if let TraceTarget::EventId(e) = target {
        ids.insert(e.clone());
    }
    if let Some(r) = rows {
        ids.extend(r.payments.iter().map(|p| p.event_id.clone()));
        ids.extend(r.processed.iter().map(|p| p.event_id.clone()));
        ids.extend(r.orders.iter().filter_map(|o| o.payment_event_id.clone()));
        ids.extend(r.points.iter().map(|p| p.source_event_no.clone()));
        ids.extend(r.notifications.iter().map(|n| n.event_id.clone()));
        ids.extend(r.outbox.iter().map(|o| o.event_id.clone()));
    }
    ids.extend(messages.iter().filter_map(|m| m.event_id.clone()));
    ids
}

/// The IDs a trace target resolves to, from every source: the database rows first (they link
/// requestId ↔ orderNo ↔ eventId), then the payment messages and the trace events for an eventId
/// the database does not know yet.
pub fn resolve_ids(
    query: &str,
    rows: Option<&TraceRows>,
    payments: &PaymentIndex,
    log: &TraceLog,
) -> TraceIds {
    let mut ids = TraceIds::of_target(&TraceTarget::classify(query));
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

pub fn build(input: TimelineInputs<'_>) -> Timeline {
    let target = TraceTarget::classify(input.query);
    let now = input.now_ms;
    let mut entries: Vec<TimelineEntry> = Vec::new();
    let ids = input.rows.map(|r| r.ids.clone()).unwrap_or_default();
    let mut order_no = ids.order_no.clone();
    let mut request_id = ids.request_id.clone();
    match &target {
        TraceTarget::OrderNo(o) => order_no = order_no.or(Some(o.clone())),
        TraceTarget::RequestId(r) => request_id = request_id.or(Some(r.clone())),
        TraceTarget::EventId(_) => {}
    }
    if order_no.is_none() {
        order_no = input
            .messages
            .iter()
            .find_map(|m| m.order_no.clone())
            .or_else(|| input.events.iter().find_map(|e| e.order_no.clone()));
    }
    if request_id.is_none() {
        request_id = input
            .messages
            .iter()
            .find_map(|m| m.request_id.clone())
            .or_else(|| input.events.iter().find_map(|e| e.request_id.clone()));
    }
    let event_ids = event_ids_of(&target, input.rows, input.messages);

    if let Some(rows) = input.rows {
        for r in &rows.idempotency {
            let lease = if r.status == "PROCESSING" {
                let left = r.lease_until - now;
                if left >= 0 {
                    format!("lease {} left", age(left))
                } else {
                    format!("lease expired {} ago", age(-left))
                }
            } else {
                format!(
                    "response {}",
                    r.response_code.map_or("-".into(), |c| c.to_string())
                )
            };
            entries.push(TimelineEntry {
                at_ms: Some(r.created_at),
                layer: "api",
                source: "idempotency_record".into(),
                summary: format!(
                    "{} owner {} {} · replays {} · hash {} · age {}",
                    r.status,
                    r.owner,
                    lease,
                    r.replay_count,
                    short(&r.request_hash, 8),
                    age(now - r.created_at)
                ),
                stopped_by: None,
                fields: serde_json::to_value(r).unwrap_or_default(),
            });
        }
        for o in &rows.orders {
            entries.push(TimelineEntry {
                at_ms: Some(o.created_at),
                layer: "db",
                source: "order_record".into(),
                summary: format!(
                    "{} v{} fence {} · user {} sku {} ×{} amount {}{}",
                    o.status,
                    o.version,
                    o.fence,
                    o.user_id,
                    o.sku_id,
                    o.quantity,
                    o.amount,
                    o.payment_event_id
                        .as_ref()
                        .map(|e| format!(" · paid by event {e}"))
                        .unwrap_or_default()
                ),
                stopped_by: None,
                fields: serde_json::to_value(o).unwrap_or_default(),
            });
        }
        for s in &rows.stock_movements {
            entries.push(TimelineEntry {
                at_ms: Some(s.created_at),
                layer: "db",
                source: "stock_movement".into(),
                summary: format!("sku {} delta {}", s.sku_id, s.delta),
                stopped_by: None,
                fields: serde_json::to_value(s).unwrap_or_default(),
            });
        }
        for p in &rows.payments {
            entries.push(TimelineEntry {
                at_ms: Some(p.created_at),
                layer: "db",
                source: "payment_flow".into(),
                summary: format!(
                    "pay_no {} {} amount {} · event {}",
                    p.pay_no, p.status, p.amount, p.event_id
                ),
                stopped_by: None,
                fields: serde_json::to_value(p).unwrap_or_default(),
            });
        }
        for o in &rows.outbox {
            entries.push(TimelineEntry {
                at_ms: Some(o.created_at),
                layer: "db",
                source: "outbox".into(),
                summary: format!(
                    "{} → {} · event {}{}",
                    o.status,
                    o.topic,
                    o.event_id,
                    o.sent_at
                        .map(|s| format!(" · sent after {}", age(s - o.created_at)))
                        .unwrap_or_default()
                ),
                stopped_by: None,
                fields: serde_json::to_value(o).unwrap_or_default(),
            });
        }
        for p in &rows.processed {
            entries.push(TimelineEntry {
                at_ms: Some(p.processed_at),
                layer: "stream",
                source: "processed_event".into(),
                summary: format!(
                    "{} by {} · event {} from p{}@{}",
                    p.outcome, p.consumer_group, p.event_id, p.kafka_partition, p.kafka_offset
                ),
                stopped_by: None,
                fields: serde_json::to_value(p).unwrap_or_default(),
            });
        }
        for p in &rows.points {
            entries.push(TimelineEntry {
                at_ms: Some(p.created_at),
                layer: "sink",
                source: "points_ledger".into(),
                summary: format!(
                    "+{} points to user {} · event {}",
                    p.points, p.user_id, p.source_event_no
                ),
                stopped_by: None,
                fields: serde_json::to_value(p).unwrap_or_default(),
            });
        }
        for n in &rows.notifications {
            entries.push(TimelineEntry {
                at_ms: Some(n.created_at),
                layer: "sink",
                source: "notification".into(),
                summary: format!(
                    "{} to user {}: {} · event {}",
                    n.channel,
                    n.user_id,
                    short(&n.body, 40),
                    n.event_id
                ),
                stopped_by: None,
                fields: serde_json::to_value(n).unwrap_or_default(),
            });
        }
    }

    // Kafka: each copy of each payment message, numbered per eventId.
    for m in input.messages {
        let copies = input
            .messages
            .iter()
            .filter(|x| x.event_id == m.event_id)
            .count();
        let nth = input
            .messages
            .iter()
            .filter(|x| {
                x.event_id == m.event_id
                    && (x.timestamp_ms, x.partition, x.offset)
                        <= (m.timestamp_ms, m.partition, m.offset)
            })
            .count();
        entries.push(TimelineEntry {
            at_ms: m.timestamp_ms,
            layer: "kafka",
            source: format!("{} p{}@{}", m.topic, m.partition, m.offset),
            summary: format!(
                "event {} copy {nth} of {copies}{}",
                m.event_id.as_deref().unwrap_or("?"),
                if m.payload_ok {
                    String::new()
                } else {
                    " · payload is not a PaymentSucceeded".into()
                }
            ),
            stopped_by: None,
            fields: serde_json::to_value(m).unwrap_or_default(),
        });
    }

    // Decisions of every layer; the ones that stopped a duplicate name their layer.
    let mut interceptions = Vec::new();
    for e in input.events {
        let at = event_ms(e);
        let stopped = e
            .outcome
            .stops_duplicate()
            .then(|| e.layer.as_str().to_string());
        if stopped.is_some() {
            interceptions.push(Interception {
                at_ms: at,
                layer: e.layer.as_str().into(),
                outcome: e.outcome.as_str().into(),
                detail: e.detail.clone(),
                instance: e.instance.clone(),
            });
        }
        entries.push(TimelineEntry {
            at_ms: at,
            layer: e.layer.as_str(),
            source: "trace".into(),
            summary: format!(
                "{}{}{}",
                e.outcome.as_str(),
                if e.detail.is_empty() { "" } else { ": " },
                e.detail
            ),
            stopped_by: stopped,
            fields: serde_json::to_value(e).unwrap_or_default(),
        });
    }

    // Redis: the locks and the fast-path key as they are now.
    if let Some(keys) = input.keys {
        for l in &keys.locks {
            entries.push(lock_entry(l, now));
        }
        if let Some(f) = &keys.fast_path {
            entries.push(TimelineEntry {
                at_ms: None,
                layer: "api",
                source: f.key.clone(),
                summary: format!("fast path {} · PTTL {}", short(&f.value, 48), pttl(if f.pttl_ms >= 0 { (f.pttl_ms - (now - f.read_at_ms)).max(0) } else { f.pttl_ms })),
                stopped_by: None,
                fields: json!({ "key": f.key, "node": f.node, "value": f.value, "pttl_ms": f.pttl_ms }),
            });
        }
    }

    // Oldest first; state without a time ("now") last; stable within a time.
    entries.sort_by_key(|e| e.at_ms.unwrap_or(i64::MAX));

    let events = event_ids
        .iter()
        .map(|id| EventEffects {
            event_id: id.clone(),
            kafka_copies: input
                .messages
                .iter()
                .filter(|m| m.event_id.as_deref() == Some(id))
                .count(),
            processed_rows: input.rows.map_or(0, |r| {
                r.processed.iter().filter(|p| &p.event_id == id).count()
            }),
            dedup_hits: input
                .events
                .iter()
                .filter(|e| {
                    e.event_id.as_deref() == Some(id)
                        && e.outcome == crate::contracts::Outcome::DedupHit
                })
                .count(),
            points_rows: input.rows.map_or(0, |r| {
                r.points.iter().filter(|p| &p.source_event_no == id).count()
            }),
            notification_rows: input.rows.map_or(0, |r| {
                r.notifications.iter().filter(|n| &n.event_id == id).count()
            }),
        })
        .collect();

    Timeline {
        query: input.query.trim().to_string(),
        kind: kind_of(&target),
        found: !entries.is_empty(),
        order_no,
        request_id,
        event_ids: event_ids.into_iter().collect(),
        entries,
        interceptions,
        events,
    }
}

fn lock_entry(l: &LockView, now: i64) -> TimelineEntry {
    let holder = match l.holder() {
        Some(h) => format!(
            "held by {} (host {} pid {}) fence {} since {}",
            h.instance,
            h.host,
            h.pid,
            h.fence,
            age(now - h.acquired_at)
        ),
        None => format!("value {}", short(l.value(), 40)),
    };
    let alive = match l.owner_alive {
        Some(true) => " · owner alive",
        Some(false) => " · OWNER DEAD",
        None => "",
    };
    let quorum = l
        .quorum()
        .map(|q| {
            format!(
                " · quorum {}/{}{}",
                q.agreeing,
                q.nodes,
                if q.reached { "" } else { " NOT reached" }
            )
        })
        .unwrap_or_default();
    TimelineEntry {
        at_ms: l.holder().map(|h| h.acquired_at),
        layer: "lock",
        source: format!("{} ({})", l.key, l.scope),
        summary: format!("{holder} · PTTL {}{alive}{quorum}", pttl(l.pttl_now(now))),
        stopped_by: None,
        fields: serde_json::to_value(l).unwrap_or_default(),
    }
}
