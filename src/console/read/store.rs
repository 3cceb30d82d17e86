//! What the console keeps of the two topics it follows, bounded: the recent trace events (for
//! the trace view and the interception rates) and an index of the payment messages by order.
//! Collection fills these; the views only read them (collection → store → widget).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use crate::contracts::{Layer, Outcome, TraceEvent};

use crate::console::read::messages::PaymentMessage;

/// Trace events kept in memory; older ones are forgotten (the rates keep their counts).
pub const TRACE_EVENTS_KEPT: usize = 100_000;
/// Payment messages kept in the index.
pub const PAYMENT_MESSAGES_KEPT: usize = 100_000;
/// Minutes of interception rates.
pub const RATE_WINDOW_MINUTES: usize = 60;

/// The outcomes the rates view counts, in display order: every outcome that stops a duplicate,
/// and the DLQ. (layer it belongs to, outcome, label).
pub const RATE_SERIES: &[(Layer, Outcome, &str)] = &[
    (Layer::Api, Outcome::Replayed, "replays"),
    (Layer::Api, Outcome::InFlightRejected, "409 in flight"),
    (Layer::Api, Outcome::PayloadMismatch, "422 payload mismatch"),
    (
        Layer::Api,
        Outcome::AnsweredFromOrders,
        "answered from orders",
    ),
    (Layer::Lock, Outcome::LockContended, "lock contention"),
    (
        Layer::Db,
        Outcome::UniqueViolationReplayed,
        "unique-violation read-backs",
    ),
    (
        Layer::Db,
        Outcome::TransitionAlreadyApplied,
        "transition already applied",
    ),
    (Layer::Db, Outcome::FenceRejected, "fence rejected"),
    (Layer::Stream, Outcome::DedupHit, "dedup hits"),
    (Layer::Stream, Outcome::SinkDuplicate, "sink duplicates"),
    (Layer::Stream, Outcome::Dlq, "DLQ"),
];

/// Epoch ms of an event's `ts` (RFC 3339); `None` when unreadable.
pub fn event_ms(e: &TraceEvent) -> Option<i64> {
    humantime::parse_rfc3339_weak(&e.ts)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
}

/// One trace event as the log keeps it, about half the size of a [`TraceEvent`]: the time as
/// epoch ms (the RFC 3339 text only when it is not the one `format_ms` gives back), the emitting
/// instance shared between its events, no empty strings.
#[derive(Debug, Clone)]
struct StoredEvent {
    ms: i64,
    layer: Layer,
    outcome: Outcome,
    latency_us: u64,
    instance: Arc<str>,
    order_no: Option<Box<str>>,
    request_id: Option<Box<str>>,
    event_id: Option<Box<str>>,
    detail: Option<Box<str>>,
    /// The event's own `ts` when it does not round-trip through `ms`.
    ts: Option<Box<str>>,
}

impl StoredEvent {
    fn event(&self) -> TraceEvent {
        TraceEvent {
            ts: self
                .ts
                .as_deref()
                .map_or_else(|| crate::contracts::format_ms(self.ms), str::to_string),
            instance: self.instance.to_string(),
            layer: self.layer,
            outcome: self.outcome,
            order_no: self.order_no.as_deref().map(str::to_string),
            request_id: self.request_id.as_deref().map(str::to_string),
            event_id: self.event_id.as_deref().map(str::to_string),
            detail: self.detail.as_deref().unwrap_or_default().to_string(),
            latency_us: self.latency_us,
        }
    }
}

/// The recent trace events and per-minute counts of interceptions.
#[derive(Debug, Default)]
pub struct TraceLog {
    events: VecDeque<StoredEvent>,
    /// The instances seen, each stored once.
    instances: std::collections::HashSet<Arc<str>>,
    /// minute (epoch ms / 60000) → outcome → count.
    minutes: BTreeMap<i64, BTreeMap<Outcome, u64>>,
    pub events_seen: u64,
    pub undecodable: u64,
    /// The first message that was not a trace event, and its topic: said with the count.
    pub first_undecodable: Option<(String, String)>,
}

impl TraceLog {
    /// A message of `topic` that is not a trace event (another producer, another version, a
    /// wrong topic name): counted, the first kept, never dropped in silence.
    pub fn note_undecodable(&mut self, topic: &str, why: impl FnOnce() -> String) {
        self.undecodable += 1;
        if self.first_undecodable.is_none() {
            self.first_undecodable = Some((topic.to_string(), why()));
        }
    }

    /// "N messages on T could not be read as trace events (first: …)", when there were any.
    pub fn undecodable_warning(&self) -> Option<String> {
        let (topic, first) = self.first_undecodable.as_ref()?;
        Some(format!(
            "{} message(s) on {topic} could not be read as trace events (first: {first}): another producer, another version, or the wrong topic in kafka.trace_topic?",
            self.undecodable
        ))
    }

    pub fn ingest(&mut self, e: TraceEvent) {
        self.events_seen += 1;
        let ms = event_ms(&e).unwrap_or(0);
        if e.outcome.stops_duplicate() || e.outcome == Outcome::Dlq {
            *self
                .minutes
                .entry(ms.div_euclid(60_000))
                .or_default()
                .entry(e.outcome)
                .or_default() += 1;
            // Keep a little more than the window, so late events still land in their minute.
            while self.minutes.len() > RATE_WINDOW_MINUTES * 2 {
                self.minutes.pop_first();
            }
        }
        let instance = match self.instances.get(e.instance.as_str()) {
            Some(i) => i.clone(),
            None => {
                let i: Arc<str> = Arc::from(e.instance.as_str());
                self.instances.insert(i.clone());
                i
            }
        };
        let ts = (crate::contracts::format_ms(ms) != e.ts).then(|| e.ts.into_boxed_str());
        self.events.push_back(StoredEvent {
            ms,
            layer: e.layer,
            outcome: e.outcome,
            latency_us: e.latency_us,
            instance,
            order_no: e.order_no.map(String::into_boxed_str),
            request_id: e.request_id.map(String::into_boxed_str),
            event_id: e.event_id.map(String::into_boxed_str),
            detail: (!e.detail.is_empty()).then(|| e.detail.into_boxed_str()),
            ts,
        });
        if self.events.len() > TRACE_EVENTS_KEPT {
            self.events.pop_front();
        }
        // Instances no kept event names any more are forgotten (a long-running console sees
        // every restart of every service as a new instance).
        if self.instances.len() > 1024 {
            self.instances.retain(|i| Arc::strong_count(i) > 1);
        }
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Events per (layer, outcome) with a time in `[since_ms, until_ms)` (the post-incident
    /// report's rates), over the events kept.
    pub fn counts_between(&self, since_ms: i64, until_ms: i64) -> BTreeMap<(String, String), u64> {
        let mut out = BTreeMap::new();
        for e in &self.events {
            if e.ms >= since_ms && e.ms < until_ms {
                *out.entry((e.layer.as_str().to_string(), e.outcome.as_str().to_string()))
                    .or_default() += 1;
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events that name any of the IDs, oldest first.
    pub fn matching(
        &self,
        order_no: Option<&str>,
        request_id: Option<&str>,
        event_ids: &BTreeSet<String>,
    ) -> Vec<TraceEvent> {
        let mut out: Vec<&StoredEvent> = self
            .events
            .iter()
            .filter(|e| {
                (order_no.is_some() && e.order_no.as_deref() == order_no)
                    || (request_id.is_some() && e.request_id.as_deref() == request_id)
                    || e.event_id
                        .as_deref()
                        .is_some_and(|id| event_ids.contains(id))
            })
            .collect();
        out.sort_by_key(|e| e.ms);
        out.into_iter().map(StoredEvent::event).collect()
    }

    /// Every kept event, oldest first.
    pub fn oldest_first(&self) -> Vec<TraceEvent> {
        let mut out: Vec<&StoredEvent> = self.events.iter().collect();
        out.sort_by_key(|e| e.ms);
        out.into_iter().map(StoredEvent::event).collect()
    }

    /// IDs the events link: an event carrying an eventId and an orderNo tells which order an
    /// eventId belongs to.
    pub fn order_of_event(&self, event_id: &str) -> Option<(Option<String>, Option<String>)> {
        self.events
            .iter()
            .rev()
            .find(|e| {
                e.event_id.as_deref() == Some(event_id)
                    && (e.order_no.is_some() || e.request_id.is_some())
            })
            .map(|e| {
                (
                    e.order_no.as_deref().map(str::to_string),
                    e.request_id.as_deref().map(str::to_string),
                )
            })
    }

    /// Interceptions per minute over the last [`RATE_WINDOW_MINUTES`] minutes ending at `now_ms`.
    pub fn rates(&self, now_ms: i64) -> RateTable {
        let last = now_ms.div_euclid(60_000);
        let first = last - RATE_WINDOW_MINUTES as i64 + 1;
        RateTable {
            events_seen: self.events_seen,
            undecodable: self.undecodable,
            undecodable_warning: self.undecodable_warning(),
            ..RateTable::over(first, last, |minute, outcome| {
                self.minutes
                    .get(&minute)
                    .and_then(|c| c.get(&outcome))
                    .copied()
                    .unwrap_or(0)
            })
        }
    }

    /// The Rates view's table over the minutes of `[since_ms, until_ms)`, counted from the
    /// events kept (the per-minute counts keep two hours only): a window report's rates.
    pub fn rates_between(&self, since_ms: i64, until_ms: i64) -> RateTable {
        let mut counts: BTreeMap<(i64, Outcome), u64> = BTreeMap::new();
        for e in self
            .events
            .iter()
            .filter(|e| e.ms >= since_ms && e.ms < until_ms)
        {
            *counts
                .entry((e.ms.div_euclid(60_000), e.outcome))
                .or_default() += 1;
        }
        RateTable::over(
            since_ms.div_euclid(60_000),
            (until_ms - 1).max(since_ms).div_euclid(60_000),
            |minute, outcome| counts.get(&(minute, outcome)).copied().unwrap_or(0),
        )
    }
}

/// One outcome's count per minute, oldest minute first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateSeries {
    pub layer: Layer,
    pub outcome: Outcome,
    pub label: &'static str,
    pub per_minute: Vec<u64>,
    pub total: u64,
    pub last_minute: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RateTable {
    pub window_minutes: usize,
    /// Epoch ms of the first minute of `per_minute`.
    pub first_minute_ms: i64,
    pub series: Vec<RateSeries>,
    /// Trace events read so far (all outcomes).
    pub events_seen: u64,
    /// Messages read that were not trace events, and the sentence that says so.
    pub undecodable: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecodable_warning: Option<String>,
}

impl RateTable {
    /// The series of [`RATE_SERIES`] over the epoch minutes `first..=last`, each minute's count
    /// from `count(minute, outcome)`: the one shape of the Rates view and the report's chart.
    pub fn over(first: i64, last: i64, count: impl Fn(i64, Outcome) -> u64) -> RateTable {
        let series = RATE_SERIES
            .iter()
            .map(|(layer, outcome, label)| {
                let per_minute: Vec<u64> = (first..=last).map(|m| count(m, *outcome)).collect();
                RateSeries {
                    layer: *layer,
                    outcome: *outcome,
                    label,
                    total: per_minute.iter().sum(),
                    last_minute: *per_minute.last().unwrap_or(&0),
                    per_minute,
                }
            })
            .collect();
        RateTable {
            window_minutes: (last - first + 1).max(0) as usize,
            first_minute_ms: first * 60_000,
            series,
            events_seen: 0,
            undecodable: 0,
            undecodable_warning: None,
        }
    }
}

/// One payment message as the index keeps it: the orderNo is the index's key and the topic is
/// the index's, so neither is stored per message (a console follows one payment topic).
#[derive(Debug, Clone)]
struct StoredMessage {
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    request_id: Option<Box<str>>,
    /// Shared with the eventId → order map.
    event_id: Option<Arc<str>>,
    pay_no: Option<Box<str>>,
    payload_ok: bool,
}

/// The payment messages by orderNo, and which order each eventId belongs to; the oldest are
/// forgotten past [`PAYMENT_MESSAGES_KEPT`]. Strings are shared, not copied, between the three
/// maps (about 300 bytes per message).
#[derive(Debug, Default)]
pub struct PaymentIndex {
    topic: Option<Arc<str>>,
    by_order: HashMap<Arc<str>, Vec<StoredMessage>>,
    order_of_event: HashMap<Arc<str>, Arc<str>>,
    /// The order of each kept message, oldest first (for forgetting the oldest).
    arrival: VecDeque<Arc<str>>,
    pub messages_seen: u64,
}

impl PaymentIndex {
    pub fn ingest(&mut self, m: PaymentMessage) {
        self.messages_seen += 1;
        let Some(order) = m.order_no else { return };
        if self.topic.as_deref() != Some(m.topic.as_str()) {
            self.topic = Some(Arc::from(m.topic.as_str()));
        }
        let order: Arc<str> = match self.by_order.get_key_value(order.as_str()) {
            Some((k, _)) => k.clone(),
            None => Arc::from(order.as_str()),
        };
        // Most orders have one message: room for exactly one (a Vec's first push makes room
        // for four).
        let list = self
            .by_order
            .entry(order.clone())
            .or_insert_with(|| Vec::with_capacity(1));
        // A re-read (the reader restarted after the broker came back) is not a new copy.
        if list
            .iter()
            .any(|x| x.partition == m.partition && x.offset == m.offset)
        {
            return;
        }
        let event_id: Option<Arc<str>> =
            m.event_id
                .map(|e| match self.order_of_event.get_key_value(e.as_str()) {
                    Some((k, _)) => k.clone(),
                    None => Arc::from(e.as_str()),
                });
        if let Some(e) = &event_id {
            self.order_of_event.insert(e.clone(), order.clone());
        }
        list.push(StoredMessage {
            partition: m.partition,
            offset: m.offset,
            timestamp_ms: m.timestamp_ms,
            request_id: m.request_id.map(String::into_boxed_str),
            event_id,
            pay_no: m.pay_no.map(String::into_boxed_str),
            payload_ok: m.payload_ok,
        });
        self.arrival.push_back(order);
        while self.arrival.len() > PAYMENT_MESSAGES_KEPT {
            let Some(old) = self.arrival.pop_front() else {
                break;
            };
            let Some(list) = self.by_order.get_mut(&old) else {
                continue;
            };
            if !list.is_empty() {
                let gone = list.remove(0);
                if let Some(e) = gone.event_id {
                    if list.iter().all(|x| x.event_id.as_deref() != Some(&*e)) {
                        self.order_of_event.remove(&e);
                    }
                }
            }
            if list.is_empty() {
                self.by_order.remove(&old);
            }
        }
    }

    /// Every message kept, order by order.
    pub fn messages(&self) -> Vec<PaymentMessage> {
        self.by_order
            .keys()
            .flat_map(|order| self.messages_for(Some(order), None))
            .collect()
    }

    /// Takes in the messages another read found (a trace's read of the whole topic) as the
    /// newest, without counting them as read here; one this index holds is not a new copy.
    pub fn absorb(&mut self, messages: Vec<PaymentMessage>) {
        let seen = self.messages_seen;
        for m in messages {
            self.ingest(m);
        }
        self.messages_seen = seen;
    }

    /// The messages of an order (or of the order an eventId belongs to), oldest first.
    pub fn messages_for(
        &self,
        order_no: Option<&str>,
        event_id: Option<&str>,
    ) -> Vec<PaymentMessage> {
        let order: Option<&str> =
            order_no.or_else(|| event_id.and_then(|e| self.order_of_event.get(e).map(|o| &**o)));
        let Some((key, list)) = order.and_then(|o| self.by_order.get_key_value(o)) else {
            return Vec::new();
        };
        let topic = self.topic.as_deref().unwrap_or_default().to_string();
        let mut out: Vec<PaymentMessage> = list
            .iter()
            .map(|m| PaymentMessage {
                topic: topic.clone(),
                partition: m.partition,
                offset: m.offset,
                timestamp_ms: m.timestamp_ms,
                order_no: Some(key.to_string()),
                request_id: m.request_id.as_deref().map(str::to_string),
                event_id: m.event_id.as_deref().map(str::to_string),
                pay_no: m.pay_no.as_deref().map(str::to_string),
                payload_ok: m.payload_ok,
            })
            .collect();
        out.sort_by_key(|m| (m.timestamp_ms, m.partition, m.offset));
        out
    }

    pub fn order_of_event(&self, event_id: &str) -> Option<&str> {
        self.order_of_event.get(event_id).map(|o| &**o)
    }

    pub fn orders(&self) -> usize {
        self.by_order.len()
    }

    /// Messages kept now.
    pub fn len(&self) -> usize {
        self.arrival.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arrival.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(outcome: Outcome, ms: i64, order: &str) -> TraceEvent {
        let mut e = TraceEvent::new(Layer::Api, outcome).order_no(order);
        e.ts = crate::contracts::format_ms(ms);
        e
    }

    #[test]
    fn rates_count_interceptions_per_minute_in_the_window() {
        let now = 1_800_000_000_000 - 20_000 + 30_000; // 10 s into a minute
        let mut log = TraceLog::default();
        log.ingest(ev(Outcome::Replayed, now, "A"));
        log.ingest(ev(Outcome::Replayed, now - 1000, "A"));
        log.ingest(ev(Outcome::Replayed, now - 60_000, "A"));
        log.ingest(ev(Outcome::Claimed, now, "A")); // not an interception
        log.ingest(ev(Outcome::DedupHit, now - 61 * 60_000, "A")); // outside the window
        let r = log.rates(now);
        let replays = r
            .series
            .iter()
            .find(|s| s.outcome == Outcome::Replayed)
            .unwrap();
        assert_eq!(replays.per_minute.len(), 60);
        assert_eq!((replays.last_minute, replays.total), (2, 3));
        assert_eq!(replays.per_minute[58], 1);
        let dedup = r
            .series
            .iter()
            .find(|s| s.outcome == Outcome::DedupHit)
            .unwrap();
        assert_eq!(dedup.total, 0);
        assert_eq!(r.events_seen, 5);
        assert_eq!(log.matching(Some("A"), None, &BTreeSet::new()).len(), 5);
        // Kept compactly, given back whole: the same event, `ts` included.
        let mut odd = ev(Outcome::DedupHit, now, "A")
            .request_id("R")
            .event_id("E");
        odd.ts = "2026-11-29T16:00:00.5+00:00".into(); // not the form format_ms writes
        odd.instance = "vm-1".into();
        odd.detail = "why".into();
        odd.latency_us = 7;
        log.ingest(odd.clone());
        let plain = ev(Outcome::Claimed, now + 1, "A");
        log.ingest(plain.clone());
        let back = log.matching(None, Some("R"), &BTreeSet::new());
        assert_eq!(back, vec![odd]);
        assert_eq!(
            log.matching(Some("A"), None, &BTreeSet::new()).last(),
            Some(&plain)
        );
        assert!(log.matching(Some("B"), None, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn payment_index_counts_copies_once_per_offset() {
        let m = |offset: i64, event: &str| PaymentMessage {
            topic: "p".into(),
            partition: 1,
            offset,
            timestamp_ms: Some(offset),
            order_no: Some("O1".into()),
            request_id: None,
            event_id: Some(event.into()),
            pay_no: None,
            payload_ok: true,
        };
        let mut idx = PaymentIndex::default();
        idx.ingest(m(1, "E1"));
        idx.ingest(m(2, "E1"));
        idx.ingest(m(2, "E1")); // re-read after a reconnect
        assert_eq!(idx.messages_for(Some("O1"), None).len(), 2);
        assert_eq!(idx.messages_for(None, Some("E1")).len(), 2);
        assert_eq!(idx.order_of_event("E1"), Some("O1"));
        assert_eq!(idx.messages_for(Some("O1"), None)[1].topic, "p");
        // Bounded: the oldest are forgotten, with their eventIds.
        for i in 0..PAYMENT_MESSAGES_KEPT as i64 {
            let mut x = m(10 + i, &format!("F{i}"));
            x.order_no = Some(format!("O{}", i + 2));
            idx.ingest(x);
        }
        assert_eq!(idx.len(), PAYMENT_MESSAGES_KEPT);
        assert!(idx.messages_for(Some("O1"), None).is_empty());
        assert_eq!(idx.order_of_event("E1"), None);
        assert_eq!(idx.order_of_event("F0"), Some("O2"));
    }
}
