//! One orderNo / requestId / eventId traced across every layer: the rows, keys, messages and
//! decisions the console read, merged into one timeline, oldest first — and for every duplicate,
//! the layer that stopped it (seed §6.5: "string the whole chain together with one ID").
//!
//! Pure: it only arranges what the readers returned, so the TUI and `idemguard trace` show the
//! same thing. The fields `[mask]` names are masked here ([`crate::mask`]), in the entries'
//! summaries and fields alike, so no face can show them and no filter can find them.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::json;

use crate::contracts::{Outcome, TraceEvent, TraceTarget};

use crate::console::format::{age, pttl, short};
use crate::console::read::locks::TraceKeys;
use crate::console::read::messages::PaymentMessage;
use crate::console::read::records::{or_unknown, IdempotencyRow, OrderRow, OutboxRow, TraceRows};
use crate::console::read::store::event_ms;
use crate::console::read::window::ReadCost;
use crate::lock::LockView;
use crate::mask::{Mask, MASKED};

/// One thing that happened (or is, for Redis keys) to the traced order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// Epoch ms; `null` for state without a time of its own (sorted last: "now").
    pub at_ms: Option<i64>,
    /// `api`, `lock`, `db`, `kafka`, `stream`, `sink` or `log`.
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

/// A source a trace needed that did not answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unanswered {
    /// `database`, `redis`, `trace topic` or `payment topic`.
    pub source: &'static str,
    pub error: String,
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
    /// False when no source that answered knows the ID (see `partial`).
    pub found: bool,
    /// True when a source the trace needed did not answer: `found`, the entries and every count
    /// are of the sources that did, and what the others hold is unknown, not absent.
    pub partial: bool,
    /// The sources that did not answer, each with its error.
    pub unanswered: Vec<Unanswered>,
    pub entries: Vec<TimelineEntry>,
    pub interceptions: Vec<Interception>,
    pub events: Vec<EventEffects>,
    /// What reading the topics cost, per topic (windows, partitions, messages scanned); `null`
    /// when the trace was assembled from stores already read (the TUI, a window report).
    pub read_cost: Option<ReadCost>,
    /// What the trace found wrong with what it relied on — a time zone, a partition shortcut,
    /// a column, messages it could not read, log lines it could not place — each naming the
    /// setting: a trace never answers "not found" in silence when the data may be there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Timeline {
    /// Adds a warning once.
    pub fn warn(&mut self, text: impl Into<String>) {
        let text = text.into();
        if !self.warnings.contains(&text) {
            self.warnings.push(text);
        }
    }

    /// `source` did not answer: the trace is partial from now on.
    pub fn not_answered(&mut self, source: &'static str, error: impl Into<String>) {
        self.partial = true;
        if !self.unanswered.iter().any(|u| u.source == source) {
            let error = error.into();
            self.unanswered.push(Unanswered { source, error });
            // The order every document lists its sources in.
            let rank = |u: &Unanswered| {
                let order = ["database", "redis", "trace topic", "payment topic"];
                order.iter().position(|s| *s == u.source)
            };
            self.unanswered.sort_by_key(rank);
        }
    }

    /// The sources that did not answer, for a sentence: "the database and redis".
    fn unanswered_names(&self) -> String {
        let names: Vec<String> = self
            .unanswered
            .iter()
            .map(|u| match u.source {
                "redis" => "Redis".to_string(),
                other => format!("the {other}"),
            })
            .collect();
        match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// The line every face puts first when a source did not answer; `None` when all did.
    pub fn partial_line(&self) -> Option<String> {
        if !self.partial {
            return None;
        }
        let (names, verb) = (self.unanswered_names(), self.verb_of_unanswered());
        Some(format!(
            "PARTIAL: {names} did not answer: what {verb} of this ID is unknown, not absent"
        ))
    }

    fn verb_of_unanswered(&self) -> &'static str {
        if self.unanswered.len() == 1 {
            "it holds"
        } else {
            "they hold"
        }
    }

    /// What every face says when nothing names the ID: never "nothing" for a source that did not
    /// answer.
    pub fn not_found_line(&self) -> String {
        if self.partial {
            format!(
                "nothing that answered names this ID; {} did not answer, so it may be there",
                self.unanswered_names()
            )
        } else {
            "no row, key, message or trace event names this ID".into()
        }
    }

    /// Whether the database answered this trace (its rows are known, even if there are none).
    pub fn database_answered(&self) -> bool {
        !self.unanswered.iter().any(|u| u.source == "database")
    }

    pub fn stopped_count(&self) -> usize {
        self.interceptions.len()
    }

    /// The duplicates stopped, counted by (layer, outcome) in that order: what every face's
    /// "duplicates stopped" line lists.
    pub fn stopped_by_layer_and_outcome(&self) -> std::collections::BTreeMap<(&str, &str), usize> {
        let mut by = std::collections::BTreeMap::new();
        for i in &self.interceptions {
            *by.entry((i.layer.as_str(), i.outcome.as_str()))
                .or_default() += 1;
        }
        by
    }

    /// Log lines of the traced IDs (`read/logs.rs`) as `log` entries, in time order with the
    /// rest, their masked fields masked; a log source that failed is one entry saying so.
    pub fn add_log_lines(&mut self, read: &crate::console::read::logs::LogRead, mask: &Mask) {
        let masked = mask.log_line_fields();
        for l in &read.lines {
            let mut l = l.clone();
            for (hide, field) in [
                (masked.message, Some(&mut l.message)),
                (masked.service, l.service.as_mut()),
                (masked.level, l.level.as_mut()),
            ] {
                if let (true, Some(f)) = (hide, field) {
                    *f = MASKED.into();
                }
            }
            let service = l.service.as_deref().unwrap_or("?");
            let level = l.level.as_deref().unwrap_or("-");
            self.entries.push(TimelineEntry {
                at_ms: Some(l.at_ms),
                layer: "log",
                source: l.source.clone(),
                summary: format!("{service} {level} {}", short(&l.message, 120)),
                stopped_by: None,
                fields: serde_json::to_value(&l).unwrap_or_default(),
            });
        }
        for e in &read.errors {
            self.entries.push(TimelineEntry {
                at_ms: None,
                layer: "log",
                source: "logs".into(),
                summary: format!("a log source could not be read: {e}"),
                stopped_by: None,
                fields: json!({ "error": e }),
            });
        }
        for u in &read.unplaced {
            let times = u.times.map_or_else(String::new, |(lo, hi)| {
                format!(
                    " ({} … {})",
                    crate::contracts::format_ms(lo),
                    crate::contracts::format_ms(hi)
                )
            });
            self.warn(format!(
                "{} log line(s) name this trace's IDs but are not shown: {}{times}; first at {}",
                u.lines, u.reason, u.first
            ));
        }
        for s in &read.skipped {
            self.warn(format!(
                "log files not read in full: {} — {} time(s), the first {}",
                s.reason, s.count, s.first
            ));
        }
        self.found |= !read.lines.is_empty();
        self.entries.sort_by_key(|e| e.at_ms.unwrap_or(i64::MAX));
    }
}

/// A payment row and a Kafka copy of its event this far apart were not written at the same time
/// as their clocks say: the rows' times are read in the wrong zone.
const DISAGREE_MS: i64 = 30 * 60_000;

/// A warning when a payment row and a Kafka copy of the same event disagree by hours: the rows'
/// wall-clock times are read in another zone than they were written in.
fn times_disagree(rows: Option<&TraceRows>, messages: &[PaymentMessage]) -> Option<String> {
    let rows = rows?;
    rows.payments.iter().find_map(|p| {
        let m = messages
            .iter()
            .find(|m| m.event_id.as_deref() == Some(p.event_id.as_str()))?;
        let off = m.timestamp_ms? - p.created_at;
        (off.abs() >= DISAGREE_MS).then(|| {
            format!(
                "payment event {}: its Kafka copy is {} {} its payment row: the rows' times are read in source.time_zone — is that the zone they were written in?",
                p.event_id,
                crate::db::clock::span_text(off),
                if off > 0 { "after" } else { "before" }
            )
        })
    })
}

/// The pieces a timeline is built from; any may be missing (its backend is down).
pub struct TimelineInputs<'a> {
    /// What is traced, parsed where it was typed.
    pub target: &'a TraceTarget,
    pub rows: Option<&'a TraceRows>,
    pub keys: Option<&'a TraceKeys>,
    pub messages: &'a [PaymentMessage],
    pub events: &'a [TraceEvent],
    pub now_ms: i64,
    /// The fields not shown (`[mask]`).
    pub mask: &'a Mask,
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
        ids.extend(r.event_ids());
    }
    ids.extend(messages.iter().filter_map(|m| m.event_id.clone()));
    ids
}

/// The timeline of the pieces, oldest first, each duplicate with the layer that stopped it.
pub fn build(input: TimelineInputs<'_>) -> Timeline {
    let (order_no, request_id) = ids_named(&input);
    let event_ids = event_ids_of(input.target, input.rows, input.messages);
    let mask = input.mask;
    let mut entries = input
        .rows
        .map_or_else(Vec::new, |r| row_entries(r, input.now_ms, mask));
    entries.extend(message_entries(input.messages, mask));
    let (decisions, interceptions) = decision_entries(input.events);
    entries.extend(decisions);
    if let Some(keys) = input.keys {
        entries.extend(key_entries(keys, input.now_ms, mask));
    }
    // Oldest first; state without a time ("now") last; within one ms a claim before what it
    // turned away, otherwise stable.
    entries.sort_by_key(|e| (e.at_ms.unwrap_or(i64::MAX), !is_claim(e)));
    let found = !entries.is_empty();
    // What the source profile (or the console's role) cannot show, said last, never a silence.
    entries.extend(input.rows.and_then(|r| unavailable_entry(&r.unavailable)));
    let events = event_ids.iter().map(|id| effects_of(id, &input)).collect();
    let mut warnings: Vec<String> = input.rows.map_or_else(Vec::new, |r| r.warnings.clone());
    warnings.extend(times_disagree(input.rows, input.messages));
    Timeline {
        query: input.target.id().to_string(),
        kind: kind_of(input.target),
        found,
        partial: false,
        unanswered: Vec::new(),
        order_no,
        request_id,
        event_ids: event_ids.into_iter().collect(),
        entries,
        interceptions,
        events,
        read_cost: None,
        warnings,
    }
}

/// One entry for everything the source profile (or the console's role) cannot show: the note
/// itself when there is one, else how many and the first, each of them in its fields.
fn unavailable_entry(notes: &[String]) -> Option<TimelineEntry> {
    let summary = match notes {
        [] => return None,
        [one] => one.clone(),
        [first, ..] => format!(
            "{} things not shown or shown as unknown (`idemguard doctor` lists them; the first: {first})",
            notes.len()
        ),
    };
    Some(TimelineEntry {
        at_ms: None,
        layer: "db",
        source: "source profile".into(),
        summary,
        stopped_by: None,
        fields: json!({ "notes": notes }),
    })
}

/// The orderNo and requestId the trace is about: the database's, else the target itself, else
/// the first message or event that names one.
fn ids_named(input: &TimelineInputs<'_>) -> (Option<String>, Option<String>) {
    let ids = input.rows.map(|r| r.ids.clone()).unwrap_or_default();
    let mut order_no = ids.order_no;
    let mut request_id = ids.request_id;
    match input.target {
        TraceTarget::OrderNo(o) => order_no = order_no.or(Some(o.clone())),
        TraceTarget::RequestId(r) => request_id = request_id.or(Some(r.clone())),
        TraceTarget::EventId(_) => {}
    }
    let order_no = order_no.or_else(|| {
        input
            .messages
            .iter()
            .find_map(|m| m.order_no.clone())
            .or_else(|| input.events.iter().find_map(|e| e.order_no.clone()))
    });
    let request_id = request_id.or_else(|| {
        input
            .messages
            .iter()
            .find_map(|m| m.request_id.clone())
            .or_else(|| input.events.iter().find_map(|e| e.request_id.clone()))
    });
    (order_no, request_id)
}

/// The entry of one row of `table` (its logical name, also the entry's source), its masked
/// columns masked in its fields (the summary masks its own).
fn entry(
    at_ms: i64,
    layer: &'static str,
    table: &str,
    summary: String,
    row: impl Serialize,
    mask: &Mask,
) -> TimelineEntry {
    TimelineEntry {
        at_ms: Some(at_ms),
        layer,
        source: table.into(),
        summary,
        stopped_by: None,
        fields: mask.row(table, serde_json::to_value(row).unwrap_or_default()),
    }
}

/// One entry per database row, every table of the trace.
fn row_entries(rows: &TraceRows, now: i64, mask: &Mask) -> Vec<TimelineEntry> {
    let mut entries: Vec<TimelineEntry> = Vec::new();
    let traced = rows.ids.request_id.as_deref();
    entries.extend(
        rows.idempotency
            .iter()
            .map(|r| idempotency_entry(r, traced, now, mask)),
    );
    entries.extend(rows.orders.iter().map(|o| order_entry(o, mask)));
    for s in &rows.stock_movements {
        let m = |c: &str, v: i64| mask.cell("stock_movement", c, v);
        let summary = format!(
            "sku {} delta {}",
            m("sku_id", s.sku_id),
            m("delta", s.delta)
        );
        entries.push(entry(
            s.created_at,
            "db",
            "stock_movement",
            summary,
            s,
            mask,
        ));
    }
    for p in &rows.payments {
        let m = |c: &str, v: &dyn std::fmt::Display| mask.cell("payment_flow", c, v);
        let summary = format!(
            "pay_no {} {} amount {} · event {}",
            m("pay_no", &p.pay_no),
            m("status", &p.status),
            m("amount", &p.amount),
            p.event_id
        );
        entries.push(entry(p.created_at, "db", "payment_flow", summary, p, mask));
    }
    entries.extend(rows.outbox.iter().map(|o| outbox_entry(o, mask)));
    entries.extend(consumer_entries(rows, mask));
    entries
}

/// The consumer's rows: what it processed, and each sink's row.
fn consumer_entries(rows: &TraceRows, mask: &Mask) -> Vec<TimelineEntry> {
    let mut entries: Vec<TimelineEntry> = Vec::new();
    for p in &rows.processed {
        let m = |c: &str, v: &dyn std::fmt::Display| mask.cell("processed_event", c, v);
        let summary = format!(
            "{} by {} · event {} from p{}@{}",
            m("outcome", &p.outcome),
            m("consumer_group", &p.consumer_group),
            p.event_id,
            m("kafka_partition", &p.kafka_partition),
            m("kafka_offset", &p.kafka_offset)
        );
        entries.push(entry(
            p.processed_at,
            "stream",
            "processed_event",
            summary,
            p,
            mask,
        ));
    }
    for p in &rows.points {
        let m = |c: &str, v: i64| mask.cell("points_ledger", c, v);
        let summary = format!(
            "+{} points to user {} · event {}",
            m("points", p.points),
            m("user_id", p.user_id),
            p.source_event_no
        );
        entries.push(entry(
            p.created_at,
            "sink",
            "points_ledger",
            summary,
            p,
            mask,
        ));
    }
    for n in &rows.notifications {
        let m = |c: &str, v: &dyn std::fmt::Display| mask.cell("notification", c, v);
        let summary = format!(
            "{} to user {}: {} · event {}",
            m("channel", &n.channel),
            m("user_id", &n.user_id),
            m("body", &short(&n.body, 40)),
            n.event_id
        );
        entries.push(entry(
            n.created_at,
            "sink",
            "notification",
            summary,
            n,
            mask,
        ));
    }
    entries
}

/// An idempotency record: its key first when it is not the traced request's own (a payment
/// callback's `PSP:PAY:…` record of the traced order).
fn idempotency_entry(
    r: &IdempotencyRow,
    traced: Option<&str>,
    now: i64,
    mask: &Mask,
) -> TimelineEntry {
    let m = |c: &str, v: &dyn std::fmt::Display| mask.cell("idempotency_record", c, v);
    let lease = if r.status == "PROCESSING" {
        match r.lease_until.map(|l| l - now) {
            Some(left) if left >= 0 => format!("lease {} left", age(left)),
            Some(left) => format!("lease expired {} ago", age(-left)),
            None => "lease unknown".into(),
        }
    } else {
        format!(
            "response {}",
            m(
                "response_code",
                &r.response_code.map_or("-".into(), |c| c.to_string())
            )
        )
    };
    let key = if traced == Some(r.request_id.as_str()) {
        String::new()
    } else {
        format!("{} ", r.request_id)
    };
    let summary = format!(
        "{key}{} owner {} {} · replays {} · hash {} · age {}",
        m("status", &r.status),
        m("owner", &r.owner),
        lease,
        m("replay_count", &or_unknown(r.replay_count)),
        m("request_hash", &short(&r.request_hash, 8)),
        age(now - r.created_at)
    );
    entry(r.created_at, "api", "idempotency_record", summary, r, mask)
}

fn order_entry(o: &OrderRow, mask: &Mask) -> TimelineEntry {
    let m = |c: &str, v: Option<i64>| mask.cell("order_record", c, or_unknown(v));
    // A version or fence the table does not have is left out, not written "vunknown".
    let known = |c: &str, label: &str, v: Option<i64>| {
        v.map(|v| format!(" {label}{}", mask.cell("order_record", c, v)))
            .unwrap_or_default()
    };
    let summary = format!(
        "{}{}{} · user {} sku {} ×{} amount {}{}",
        mask.cell("order_record", "status", &o.status),
        known("version", "v", o.version),
        known("fence", "fence ", o.fence),
        m("user_id", o.user_id),
        m("sku_id", o.sku_id),
        m("quantity", o.quantity),
        m("amount", o.amount),
        o.payment_event_id
            .as_ref()
            .map(|e| format!(" · paid by event {e}"))
            .unwrap_or_default()
    );
    entry(o.created_at, "db", "order_record", summary, o, mask)
}

fn outbox_entry(o: &OutboxRow, mask: &Mask) -> TimelineEntry {
    let m = |c: &str, v: &str| mask.cell("outbox", c, v);
    let summary = format!(
        "{} → {} · event {}{}",
        m("status", &o.status),
        m("topic", &o.topic),
        o.event_id,
        o.sent_at
            .map(|s| format!(" · sent after {}", age(s - o.created_at)))
            .unwrap_or_default()
    );
    entry(o.created_at, "db", "outbox", summary, o, mask)
}

/// Kafka: each copy of each payment message, numbered per eventId; a masked payNo masked.
fn message_entries(messages: &[PaymentMessage], mask: &Mask) -> Vec<TimelineEntry> {
    let pay_no_masked = mask.kafka_pointer("/pay_no") || mask.kafka_pointer("/payNo");
    messages
        .iter()
        .map(|m| {
            let copies = messages.iter().filter(|x| x.event_id == m.event_id).count();
            let nth = messages
                .iter()
                .filter(|x| {
                    x.event_id == m.event_id
                        && (x.timestamp_ms, x.partition, x.offset)
                            <= (m.timestamp_ms, m.partition, m.offset)
                })
                .count();
            TimelineEntry {
                at_ms: m.timestamp_ms,
                layer: "kafka",
                source: format!("{} p{}@{}", m.topic, m.partition, m.offset),
                summary: format!(
                    "event {} copy {nth} of {copies}{}",
                    m.event_id.as_deref().unwrap_or("?"),
                    if m.payload_ok {
                        ""
                    } else {
                        " · payload is not a PaymentSucceeded"
                    }
                ),
                stopped_by: None,
                fields: {
                    let mut fields = serde_json::to_value(m).unwrap_or_default();
                    if pay_no_masked && m.pay_no.is_some() {
                        fields["pay_no"] = MASKED.into();
                    }
                    fields
                },
            }
        })
        .collect()
}

/// Decisions of every layer; the ones that stopped a duplicate name their layer and are
/// counted as interceptions.
fn is_claim(e: &TimelineEntry) -> bool {
    e.source == "trace" && e.fields.get("outcome").and_then(|o| o.as_str()) == Some("claimed")
}

/// When a decision is placed on the timeline: when it was logged, except a claim, placed at its
/// start. A request turned away because another holds the key logs its rejection after that
/// claim took the key; the claim logs itself only when its own work is done, so by their log
/// times the rejections would come before the claim that caused them. A claim's start is never
/// after the moment it took the key.
fn decision_ms(e: &TraceEvent) -> Option<i64> {
    let at = event_ms(e)?;
    Some(match e.outcome {
        Outcome::Claimed => at - (e.latency_us / 1000) as i64,
        _ => at,
    })
}

fn decision_entries(events: &[TraceEvent]) -> (Vec<TimelineEntry>, Vec<Interception>) {
    let mut entries = Vec::new();
    let mut interceptions = Vec::new();
    for e in events {
        let at = decision_ms(e);
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
        let took = if e.outcome == Outcome::Claimed {
            format!(" (its start; it took {} ms)", e.latency_us / 1000)
        } else {
            String::new()
        };
        entries.push(TimelineEntry {
            at_ms: at,
            layer: e.layer.as_str(),
            source: "trace".into(),
            summary: format!(
                "{}{took}{}{}",
                e.outcome.as_str(),
                if e.detail.is_empty() { "" } else { ": " },
                e.detail
            ),
            stopped_by: stopped,
            fields: serde_json::to_value(e).unwrap_or_default(),
        });
    }
    (entries, interceptions)
}

/// Redis: the locks and the fast-path key as they are now. The fast path holds the response the
/// API stored: masked with `response_body`.
fn key_entries(keys: &TraceKeys, now: i64, mask: &Mask) -> Vec<TimelineEntry> {
    let mut entries: Vec<TimelineEntry> = keys.locks.iter().map(|l| lock_entry(l, now)).collect();
    entries.extend(keys.notes.iter().map(|n| TimelineEntry {
        at_ms: None,
        layer: "lock",
        source: "foreign_locks".into(),
        summary: n.clone(),
        stopped_by: None,
        fields: serde_json::Value::Null,
    }));
    if let Some(f) = &keys.fast_path {
        let left = if f.pttl_ms >= 0 {
            (f.pttl_ms - (now - f.read_at_ms)).max(0)
        } else {
            f.pttl_ms
        };
        let value = mask.cell("idempotency_record", "response_body", &f.value);
        entries.push(TimelineEntry {
            at_ms: None,
            layer: "api",
            source: f.key.clone(),
            summary: format!("fast path {} · PTTL {}", short(&value, 48), pttl(left)),
            stopped_by: None,
            fields: json!({ "key": f.key, "node": f.node, "value": value, "pttl_ms": f.pttl_ms }),
        });
    }
    entries
}

/// What became of one payment event: copies delivered against effects written.
fn effects_of(id: &String, input: &TimelineInputs<'_>) -> EventEffects {
    EventEffects {
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
            .filter(|e| e.event_id.as_deref() == Some(id) && e.outcome == Outcome::DedupHit)
            .count(),
        points_rows: input.rows.map_or(0, |r| {
            r.points.iter().filter(|p| &p.source_event_no == id).count()
        }),
        notification_rows: input.rows.map_or(0, |r| {
            r.notifications.iter().filter(|n| &n.event_id == id).count()
        }),
    }
}

/// Who holds a lock idemguard did not write, as its format names it (`lock/formats.rs`).
fn foreign_holder(l: &LockView) -> String {
    use crate::lock::formats::LockFormat;
    match &l.format {
        LockFormat::Redisson {
            client_id,
            thread_id,
            count,
            ..
        } => format!("Redisson lock held by client {client_id} thread {thread_id} (count {count})"),
        // The token is the requestId: shown once.
        LockFormat::Token {
            shape,
            request_id: Some(r),
            order_no,
            ..
        } => format!(
            "token ({shape}) = requestId {r}{}",
            order_no
                .as_ref()
                .map(|o| format!(" of order {o}"))
                .unwrap_or_default()
        ),
        LockFormat::Token { token, shape, .. } => {
            format!(
                "token ({shape}) {}, names no known request",
                short(token, 40)
            )
        }
        _ => match l.other_type() {
            Some(t) => format!("a {t} key no decoder reads"),
            None => format!("value {} (undecodable)", short(l.value(), 40)),
        },
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
        None => foreign_holder(l),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::read::records::{IdempotencyRow, OrderRow, TraceIds};
    use crate::contracts::{format_ms, Layer};

    const REQUEST: &str = "APP:ORDER:20261129:0193a1c2-7b3d-7c4e-8f00-aaaaaaaaaaaa";
    const CALLBACK: &str = "PSP:PAY:20261129:0193a1c2-7b3d-7c4e-8f00-bbbbbbbbbbbb";

    fn decision(outcome: Outcome, logged_ms: i64, latency_ms: u64) -> TraceEvent {
        let mut e = TraceEvent::new(Layer::Api, outcome).request_id(REQUEST);
        e.ts = format_ms(logged_ms);
        e.latency_us = latency_ms * 1000;
        e
    }

    fn record(request_id: &str, created_at: i64) -> IdempotencyRow {
        IdempotencyRow {
            request_id: request_id.into(),
            biz_type: "PAY".into(),
            request_hash: "h".into(),
            status: "SUCCEEDED".into(),
            response_code: Some(201),
            order_no: Some("o".into()),
            owner: "api-1".into(),
            fence: None,
            lease_until: None,
            replay_count: Some(0),
            created_at,
            updated_at: None,
            expire_at: None,
            version: None,
        }
    }

    fn built(rows: Option<&TraceRows>, events: &[TraceEvent]) -> Timeline {
        let target = TraceTarget::classify(REQUEST);
        build(TimelineInputs {
            target: &target,
            rows,
            keys: None,
            messages: &[],
            events,
            now_ms: 2_000_000_000_000,
            mask: &Mask::none(),
        })
    }

    /// The claim logs itself when its work is done, after the requests it turned away: it is
    /// placed at its start, before them.
    #[test]
    fn a_claim_comes_before_the_rejections_it_caused() {
        let t0 = 1_800_000_000_000;
        let events = [
            decision(Outcome::InFlightRejected, t0 + 10, 1),
            decision(Outcome::InFlightRejected, t0 + 12, 1),
            decision(Outcome::Claimed, t0 + 18, 17),
        ];
        let t = built(None, &events);
        let order: Vec<&str> = t.entries.iter().map(|e| &e.summary[..9]).collect();
        assert_eq!(
            order,
            ["claimed (", "in_flight", "in_flight"],
            "{:#?}",
            t.entries
        );
        assert_eq!(t.entries[0].at_ms, Some(t0 + 1));
    }

    /// A payment callback's record of the traced order names its own key; a version the table
    /// does not have is left out; twenty notes of the profile are one entry; a dead-letter mark
    /// is no payment event.
    #[test]
    fn rows_say_what_they_are_and_nothing_unknown_is_invented() {
        let mut rows = TraceRows {
            ids: TraceIds {
                request_id: Some(REQUEST.into()),
                ..TraceIds::default()
            },
            ..TraceRows::default()
        };
        rows.idempotency = vec![record(REQUEST, 10), record(CALLBACK, 20)];
        rows.orders = vec![OrderRow {
            req_id: REQUEST.into(),
            order_no: "o".into(),
            user_id: Some(1),
            sku_id: Some(2),
            quantity: Some(1),
            amount: Some(1999),
            status: "PAID".into(),
            version: None,
            fence: None,
            payment_event_id: None,
            created_at: 15,
            updated_at: None,
        }];
        rows.unavailable = (0..20).map(|i| format!("note {i}")).collect();
        let t = built(Some(&rows), &[]);
        let summaries: Vec<&str> = t.entries.iter().map(|e| e.summary.as_str()).collect();
        assert!(summaries[0].starts_with("SUCCEEDED"), "{summaries:#?}");
        assert!(
            summaries.iter().any(|s| s.starts_with(CALLBACK)),
            "{summaries:#?}"
        );
        assert!(
            summaries.iter().any(|s| s.starts_with("PAID · user 1")),
            "{summaries:#?}"
        );
        assert!(
            !summaries
                .iter()
                .any(|s| s.contains("vunknown") || s.contains("fence unknown")),
            "{summaries:#?}"
        );
        let profile: Vec<&TimelineEntry> = t
            .entries
            .iter()
            .filter(|e| e.source == "source profile")
            .collect();
        assert_eq!(profile.len(), 1, "{summaries:#?}");
        assert!(
            profile[0].summary.starts_with("20 things"),
            "{}",
            profile[0].summary
        );
        assert_eq!(
            profile[0].fields["notes"].as_array().map(Vec::len),
            Some(20)
        );
        rows.processed = vec![crate::console::read::records::ProcessedEventRow {
            consumer_group: "g".into(),
            event_id: "dlq:00ff00ff00ff00ff:2:17".into(),
            order_no: Some("o".into()),
            topic: "payment.succeeded".into(),
            kafka_partition: 2,
            kafka_offset: 17,
            outcome: "dead_lettered".into(),
            processed_at: 30,
            expire_at: 40,
        }];
        assert!(rows.event_ids().is_empty(), "{:?}", rows.event_ids());
        assert!(built(Some(&rows), &[]).events.is_empty());
    }
}
