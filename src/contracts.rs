//! The contracts every part shares: identifiers and their one parser each, the Redis key
//! formats, the identity of a running process, and the trace event every layer emits.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch. All timestamps in the tables use this one representation,
/// so PostgreSQL and MySQL rows compare the same way.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as i64
}

/// RFC 3339 UTC text of an epoch-millisecond time, for people.
pub fn format_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

// ---------------------------------------------------------------------------------------------
// requestId: the Idempotency-Key
// ---------------------------------------------------------------------------------------------

/// Expected format, quoted in every rejection.
pub const REQUEST_ID_FORMAT: &str = "{CHANNEL}:{BIZ}:{yyyymmdd}:{unique}";
pub const REQUEST_ID_MAX_LEN: usize = 128;

/// A validated idempotency key `{CHANNEL}:{BIZ}:{yyyymmdd}:{unique}`, e.g.
/// `APP:ORDER:20261129:0193a1c2-7f3e-7c1a-9d2b-5e8f6a7b8c9d`.
///
/// Bare integers and bare timestamps are refused (seed §5.2): two clients generating them
/// collide, which turns two different orders into "duplicates" of each other.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestIdError {
    #[error("the Idempotency-Key is missing or empty")]
    Empty,
    #[error("the Idempotency-Key is {0} characters long; at most 128 are allowed")]
    TooLong(usize),
    #[error("the Idempotency-Key contains a space or a character that is not printable ASCII (at position {0})")]
    NotPrintable(usize),
    #[error("the Idempotency-Key is a bare number or timestamp, which different clients can repeat by accident")]
    BareNumber,
    #[error("the Idempotency-Key has {0} part(s) separated by ':'; four are expected")]
    WrongParts(usize),
    #[error(
        "the Idempotency-Key's {0} part is empty or not upper-case letters, digits, '_' or '-'"
    )]
    BadSegment(&'static str),
    #[error("the Idempotency-Key's date part `{0}` is not a calendar date yyyymmdd")]
    BadDate(String),
    #[error("the Idempotency-Key's unique part is shorter than 8 characters or a bare number")]
    WeakUnique,
    #[error("the Idempotency-Key's date part `{0}` is more than a day ahead of the server's date; use today's date")]
    FutureDate(String),
}

/// The `BIZ` part of a `CHANNEL:BIZ:date:unique` key ("" when it has none).
pub fn business_of(request_id: &str) -> &str {
    request_id.split(':').nth(1).unwrap_or("")
}

impl RequestId {
    pub fn parse(raw: &str) -> Result<RequestId, RequestIdError> {
        if raw.is_empty() {
            return Err(RequestIdError::Empty);
        }
        if raw.len() > REQUEST_ID_MAX_LEN {
            return Err(RequestIdError::TooLong(raw.chars().count()));
        }
        if let Some(pos) = raw
            .chars()
            .position(|c| !(' '..='~').contains(&c) || c == ' ')
        {
            return Err(RequestIdError::NotPrintable(pos));
        }
        if raw
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            return Err(RequestIdError::BareNumber);
        }
        let parts: Vec<&str> = raw.splitn(4, ':').collect();
        if parts.len() != 4 {
            return Err(RequestIdError::WrongParts(parts.len()));
        }
        let segment_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        };
        if !segment_ok(parts[0]) {
            return Err(RequestIdError::BadSegment("channel"));
        }
        if !segment_ok(parts[1]) {
            return Err(RequestIdError::BadSegment("business"));
        }
        if !is_yyyymmdd(parts[2]) {
            return Err(RequestIdError::BadDate(parts[2].to_string()));
        }
        let unique = parts[3];
        if unique.len() < 8 || unique.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RequestIdError::WeakUnique);
        }
        Ok(RequestId(raw.to_string()))
    }

    /// [`RequestId::parse`] for a key a client just sent: its date may not be more than a day
    /// ahead (one day of slack for the client's time zone). A far-future date would keep the key
    /// out of the reach of [`RequestId::day_start_ms`]-based expiry for years.
    pub fn parse_received(raw: &str, now_ms: i64) -> Result<RequestId, RequestIdError> {
        let id = RequestId::parse(raw)?;
        if id.day_start_ms() > now_ms + 86_400_000 {
            return Err(RequestIdError::FutureDate(id.date().to_string()));
        }
        Ok(id)
    }

    /// The `yyyymmdd` part.
    pub fn date(&self) -> &str {
        self.0.split(':').nth(2).unwrap_or("")
    }

    /// Epoch milliseconds of 00:00 UTC of the key's date.
    pub fn day_start_ms(&self) -> i64 {
        days_from_civil(self.date()).map_or(0, |d| d * 86_400_000)
    }

    /// A fresh key for `channel`/`biz` with today's date and a UUIDv7 unique part.
    pub fn generate(channel: &str, biz: &str) -> RequestId {
        let day = &format_ms(now_ms())[..10].replace('-', "");
        RequestId(format!("{channel}:{biz}:{day}:{}", uuid::Uuid::now_v7()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_yyyymmdd(s: &str) -> bool {
    if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let y: u32 = s[0..4].parse().unwrap_or(0);
    let m: u32 = s[4..6].parse().unwrap_or(0);
    let d: u32 = s[6..8].parse().unwrap_or(0);
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (2000..=2999).contains(&y) && (1..=days).contains(&d)
}

/// Days since 1970-01-01 of a `yyyymmdd` date (Howard Hinnant's algorithm).
fn days_from_civil(yyyymmdd: &str) -> Option<i64> {
    if yyyymmdd.len() != 8 {
        return None;
    }
    let y: i64 = yyyymmdd[0..4].parse().ok()?;
    let m: i64 = yyyymmdd[4..6].parse().ok()?;
    let d: i64 = yyyymmdd[6..8].parse().ok()?;
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

impl TryFrom<String> for RequestId {
    type Error = RequestIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        RequestId::parse(&s)
    }
}

impl From<RequestId> for String {
    fn from(r: RequestId) -> String {
        r.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// ---------------------------------------------------------------------------------------------
// orderNo, eventId
// ---------------------------------------------------------------------------------------------

/// A server-generated order number: at most 32 characters, sortable by creation time.
/// `yyyyMMddHHmmssSSS` + 12 hex digits of randomness (29 characters).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OrderNo(String);

pub const ORDER_NO_MAX_LEN: usize = 32;

impl OrderNo {
    pub fn generate() -> OrderNo {
        let t = format_ms(now_ms()); // 2026-11-29T14:05:42.123Z
        let digits: String = t.chars().filter(char::is_ascii_digit).collect(); // 17 digits
        let random: u64 = rand::random::<u64>() & 0xffff_ffff_ffff;
        OrderNo(format!("{digits}{random:012x}"))
    }

    /// Accept an existing order number (from a URL, a message, the database).
    pub fn parse(raw: &str) -> Result<OrderNo, String> {
        if raw.is_empty()
            || raw.len() > ORDER_NO_MAX_LEN
            || !raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "`{}` is not an order number (1-32 letters, digits, '-' or '_')",
                shown(raw)
            ));
        }
        Ok(OrderNo(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OrderNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A payment provider's number for one payment (`payNo`): printable ASCII, no leading or
/// trailing space, at most 64 characters (the column's width). Checked before anything is
/// written: a NUL fails on PostgreSQL after the claim, and MariaDB's PAD SPACE collation makes
/// `"P "` the same key as `"P"`, so one payment would answer for another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PayNo(String);

pub const PAY_NO_MAX_LEN: usize = 64;

impl PayNo {
    pub fn parse(raw: &str) -> Result<PayNo, String> {
        let printable = raw.bytes().all(|b| (b' '..=b'~').contains(&b));
        if raw.is_empty()
            || raw.len() > PAY_NO_MAX_LEN
            || !printable
            || raw.starts_with(' ')
            || raw.ends_with(' ')
        {
            return Err(format!(
                "`{}` is not a payment number (1-{PAY_NO_MAX_LEN} printable ASCII characters, no leading or trailing space)",
                shown(raw)
            ));
        }
        Ok(PayNo(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PayNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A refused identifier as it is quoted back: escaped, and cut at 40 characters so a 10 KB
/// value is not echoed to the client or the log.
fn shown(raw: &str) -> String {
    let head: String = raw.chars().take(40).collect();
    let cut = if head.len() < raw.len() { "…" } else { "" };
    format!("{}{cut}", head.escape_debug())
}

/// How a dead-lettered message's `processed_event` row is keyed: `dlq:` and its source
/// position, never a UUID, so it cannot collide with a real eventId.
pub const DEAD_LETTER_MARK: &str = "dlq:";

/// True for the `processed_event` key of a dead-lettered message: a mark of the consumer's own,
/// not a payment event.
pub fn is_dead_letter_mark(id: &str) -> bool {
    id.starts_with(DEAD_LETTER_MARK)
}

/// A payment event's id: a UUIDv7, so ids sort by time.
pub fn new_event_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// What an operator typed into the trace prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceTarget {
    RequestId(String),
    EventId(String),
    OrderNo(String),
}

impl TraceTarget {
    /// A requestId has colons, an eventId is a UUID, anything else is taken as an orderNo.
    pub fn classify(raw: &str) -> TraceTarget {
        let raw = raw.trim();
        if raw.contains(':') {
            TraceTarget::RequestId(raw.to_string())
        } else if uuid::Uuid::try_parse(raw).is_ok() {
            TraceTarget::EventId(raw.to_string())
        } else {
            TraceTarget::OrderNo(raw.to_string())
        }
    }

    /// The ID as typed (trimmed). (Added for the console, whose trace target travels typed.)
    pub fn id(&self) -> &str {
        match self {
            TraceTarget::RequestId(s) | TraceTarget::EventId(s) | TraceTarget::OrderNo(s) => s,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Redis keys — the one place their formats are written
// ---------------------------------------------------------------------------------------------

pub mod keys {
    pub fn order_lock(order_no: &str) -> String {
        format!("lock:order:{order_no}")
    }
    pub fn user_lock(user_id: i64, action: &str) -> String {
        format!("lock:user:{user_id}:{action}")
    }
    pub fn request_lock(request_id: &str) -> String {
        format!("lock:req:{request_id}")
    }
    /// The fence counter belonging to a lock key, in the lock key's Redis Cluster slot (one
    /// script takes both, and a cluster runs a script only on keys of one slot): the lock key
    /// is the counter's hash tag, `fence:{lock:order:1}`; a lock key with a hash tag of its own
    /// lends it, `fence:lock:{a}:b`. (A key with a `}` and no tag cannot be wrapped; on a
    /// cluster its script is refused with CROSSSLOT.)
    pub fn fence(lock_key: &str) -> String {
        if has_hash_tag(lock_key) {
            format!("fence:{lock_key}")
        } else {
            format!("fence:{{{lock_key}}}")
        }
    }
    /// SCAN pattern of the fence counters of the lock keys that start with `prefix`.
    pub fn fence_pattern(prefix: &str) -> String {
        format!("{}*", fence(prefix).trim_end_matches('}'))
    }
    /// True when `key` has a Redis Cluster hash tag: a non-empty `{…}` after its first `{`.
    fn has_hash_tag(key: &str) -> bool {
        key.find('{')
            .and_then(|open| key[open + 1..].find('}'))
            .is_some_and(|len| len > 0)
    }
    pub fn instance(instance_id: &str) -> String {
        format!("instance:{instance_id}")
    }
    pub fn idempotency_fast_path(request_id: &str) -> String {
        format!("idem:{request_id}")
    }
    /// Pattern for SCAN over all locks.
    pub const LOCK_PATTERN: &str = "lock:*";

    /// The IDs a lock key names, for trace events: (order_no, request_id).
    pub fn ids_of_lock(key: &str) -> (Option<String>, Option<String>) {
        if let Some(o) = key.strip_prefix("lock:order:") {
            (Some(o.to_string()), None)
        } else if let Some(r) = key.strip_prefix("lock:req:") {
            (None, Some(r.to_string()))
        } else {
            (None, None)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Instance identity
// ---------------------------------------------------------------------------------------------

/// Who this process is: written into lock values, idempotency records' `owner`, trace events,
/// and kept alive as `instance:{id}` so anyone can tell a live holder from a dead one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub host: String,
    pub pid: u32,
}

impl Instance {
    /// `{host}-{pid}-{6 hex}`: unique per process start, readable in a lock listing.
    pub fn current() -> Instance {
        let host = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown-host".into());
        let pid = std::process::id();
        let tag: u32 = rand::random::<u32>() & 0xff_ffff;
        Instance {
            id: format!("{host}-{pid}-{tag:06x}"),
            host,
            pid,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lock values and payment events — read by more than one layer
// ---------------------------------------------------------------------------------------------

/// The value stored under a `lock:*` key: it describes its holder and is unique per acquisition
/// (the nonce), so a release compares the exact value and an operator can see who holds what.
/// Stored as compact JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub instance: String,
    pub host: String,
    pub pid: u32,
    /// Epoch milliseconds of the acquisition.
    pub acquired_at: i64,
    pub ttl_ms: u64,
    /// Strictly increasing per lock key across holders (`INCR fence:{key}`).
    pub fence: i64,
    pub nonce: String,
}

impl LockHolder {
    pub fn to_value(&self) -> String {
        serde_json::to_string(self).expect("a LockHolder always serializes")
    }
    /// Decode a stored value; `None` for a value some other tool wrote (shown raw by the console).
    pub fn from_value(value: &str) -> Option<LockHolder> {
        serde_json::from_str(value).ok()
    }
}

/// The payload of a `payment.succeeded` message (JSON). Key = orderNo; headers eventId,
/// requestId, orderNo carry the same IDs so they can be read without parsing the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentSucceeded {
    pub event_id: String,
    pub order_no: String,
    pub request_id: String,
    pub pay_no: String,
    pub user_id: i64,
    /// Minor units (cents).
    pub amount: i64,
    /// Epoch milliseconds.
    pub paid_at: i64,
}

/// Header names of payment messages.
pub mod headers {
    pub const EVENT_ID: &str = "eventId";
    pub const REQUEST_ID: &str = "requestId";
    pub const ORDER_NO: &str = "orderNo";
}

// ---------------------------------------------------------------------------------------------
// Trace events
// ---------------------------------------------------------------------------------------------

/// The layer that made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Api,
    Lock,
    Db,
    Stream,
    Console,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Api => "api",
            Layer::Lock => "lock",
            Layer::Db => "db",
            Layer::Stream => "stream",
            Layer::Console => "console",
        }
    }
}

/// What the layer decided. Outcomes that stop a duplicate say so in [`Outcome::stops_duplicate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    // api
    Claimed,
    Replayed,
    InFlightRejected,
    PayloadMismatch,
    KeyRejected,
    Reclaimed,
    AnsweredFromOrders,
    Finalized,
    // lock
    LockAcquired,
    LockContended,
    LockRenewed,
    LockLost,
    LockReleased,
    LockReleaseRefused,
    // db
    OrderCreated,
    UniqueViolationReplayed,
    StockRejected,
    TransitionApplied,
    TransitionAlreadyApplied,
    TransitionRejected,
    FenceRejected,
    PaymentRecorded,
    /// A second payNo for an order already paid: refused, never published; a refund is due.
    DuplicatePayment,
    /// A payNo already booked for another order: refused.
    PayNoConflict,
    EventPublished,
    // stream
    DedupHit,
    SinkApplied,
    SinkDuplicate,
    Dlq,
    // console
    OperatorAction,
    /// An outcome written by a newer version; kept so readers never fail on it.
    #[serde(other)]
    Other,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Claimed => "claimed",
            Outcome::Replayed => "replayed",
            Outcome::InFlightRejected => "in_flight_rejected",
            Outcome::PayloadMismatch => "payload_mismatch",
            Outcome::KeyRejected => "key_rejected",
            Outcome::Reclaimed => "reclaimed",
            Outcome::AnsweredFromOrders => "answered_from_orders",
            Outcome::Finalized => "finalized",
            Outcome::LockAcquired => "lock_acquired",
            Outcome::LockContended => "lock_contended",
            Outcome::LockRenewed => "lock_renewed",
            Outcome::LockLost => "lock_lost",
            Outcome::LockReleased => "lock_released",
            Outcome::LockReleaseRefused => "lock_release_refused",
            Outcome::OrderCreated => "order_created",
            Outcome::UniqueViolationReplayed => "unique_violation_replayed",
            Outcome::StockRejected => "stock_rejected",
            Outcome::TransitionApplied => "transition_applied",
            Outcome::TransitionAlreadyApplied => "transition_already_applied",
            Outcome::TransitionRejected => "transition_rejected",
            Outcome::FenceRejected => "fence_rejected",
            Outcome::PaymentRecorded => "payment_recorded",
            Outcome::DuplicatePayment => "duplicate_payment",
            Outcome::PayNoConflict => "pay_no_conflict",
            Outcome::EventPublished => "event_published",
            Outcome::DedupHit => "dedup_hit",
            Outcome::SinkApplied => "sink_applied",
            Outcome::SinkDuplicate => "sink_duplicate",
            Outcome::Dlq => "dlq",
            Outcome::OperatorAction => "operator_action",
            Outcome::Other => "other",
        }
    }

    /// True when this decision stopped a duplicate (the console's interception rates).
    pub fn stops_duplicate(self) -> bool {
        matches!(
            self,
            Outcome::Replayed
                | Outcome::InFlightRejected
                | Outcome::PayloadMismatch
                | Outcome::AnsweredFromOrders
                | Outcome::LockContended
                | Outcome::UniqueViolationReplayed
                | Outcome::TransitionAlreadyApplied
                | Outcome::FenceRejected
                | Outcome::DuplicatePayment
                | Outcome::PayNoConflict
                | Outcome::DedupHit
                | Outcome::SinkDuplicate
        )
    }
}

/// One decision of one layer: JSON on the trace topic and a structured log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    pub instance: String,
    pub layer: Layer,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_no: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub latency_us: u64,
}

impl TraceEvent {
    /// A new event stamped now; the emitter fills in `instance`.
    pub fn new(layer: Layer, outcome: Outcome) -> TraceEvent {
        TraceEvent {
            ts: format_ms(now_ms()),
            instance: String::new(),
            layer,
            outcome,
            order_no: None,
            request_id: None,
            event_id: None,
            detail: String::new(),
            latency_us: 0,
        }
    }
    pub fn order_no(mut self, v: impl Into<String>) -> Self {
        self.order_no = Some(v.into());
        self
    }
    pub fn request_id(mut self, v: impl Into<String>) -> Self {
        self.request_id = Some(v.into());
        self
    }
    pub fn event_id(mut self, v: impl Into<String>) -> Self {
        self.event_id = Some(v.into());
        self
    }
    pub fn detail(mut self, v: impl Into<String>) -> Self {
        self.detail = v.into();
        self
    }
    /// Latency since `start`.
    pub fn since(mut self, start: std::time::Instant) -> Self {
        self.latency_us = start.elapsed().as_micros() as u64;
        self
    }
    /// The Kafka key: orderNo, else requestId, else eventId.
    pub fn key(&self) -> Option<&str> {
        self.order_no
            .as_deref()
            .or(self.request_id.as_deref())
            .or(self.event_id.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_id_accepts_the_documented_format() {
        let ok = [
            "APP:ORDER:20261129:0193a1c2-7f3e-7c1a-9d2b-5e8f6a7b8c9d",
            "WEB:PAY:20240229:01HZX3K9QW8E7R6T5Y4U3I2O1P",
        ];
        for k in ok {
            assert_eq!(RequestId::parse(k).unwrap().as_str(), k);
        }
        let g = RequestId::generate("APP", "ORDER");
        assert!(RequestId::parse(g.as_str()).is_ok(), "{g}");
    }

    #[test]
    fn request_id_rejections_name_the_problem() {
        use RequestIdError::*;
        let long = format!("APP:ORDER:20261129:{}", "a".repeat(120));
        let cases: Vec<(&str, RequestIdError)> = vec![
            ("", Empty),
            (&long, TooLong(139)),
            ("APP:ORDER:20261129:abc\u{7}defgh", NotPrintable(22)),
            ("APP:ORDER:20261129:abc defgh", NotPrintable(22)),
            ("1732881942", BareNumber),
            ("1732881942.123", BareNumber),
            ("12345", BareNumber),
            ("APP:ORDER:0193a1c2", WrongParts(3)),
            ("app:ORDER:20261129:0193a1c2-7f3e", BadSegment("channel")),
            ("APP::20261129:0193a1c2-7f3e", BadSegment("business")),
            (
                "APP:ORDER:20261331:0193a1c2-7f3e",
                BadDate("20261331".into()),
            ),
            (
                "APP:ORDER:20230229:0193a1c2-7f3e",
                BadDate("20230229".into()),
            ),
            ("APP:ORDER:20261129:1732881942123", WeakUnique),
            ("APP:ORDER:20261129:abc", WeakUnique),
        ];
        for (raw, want) in cases {
            assert_eq!(RequestId::parse(raw), Err(want), "{raw:?}");
        }
    }

    #[test]
    fn received_keys_may_not_be_dated_ahead() {
        let now = 20_786 * 86_400_000 + 3_600_000; // 2026-11-29 01:00 UTC
        assert_eq!(days_from_civil("19700101"), Some(0));
        assert_eq!(days_from_civil("20261129"), Some(20_786));
        assert!(
            RequestId::parse_received("APP:ORDER:20261130:abcdefgh", now).is_ok(),
            "tomorrow: a client east of UTC"
        );
        assert_eq!(
            RequestId::parse_received("APP:ORDER:20261201:abcdefgh", now),
            Err(RequestIdError::FutureDate("20261201".into()))
        );
        assert_eq!(
            RequestId::parse_received("APP:ORDER:29991231:abcdefgh", now),
            Err(RequestIdError::FutureDate("29991231".into()))
        );
    }

    #[test]
    fn pay_numbers_are_printable_and_unpadded() {
        assert!(PayNo::parse("PAY-2026 11 29-0001").is_ok());
        for bad in [
            "",
            "P ",
            " P",
            "P\u{0}",
            "\u{0}P",
            "P\t1",
            "Pé",
            &"P".repeat(65),
        ] {
            assert!(PayNo::parse(bad).is_err(), "{bad:?}");
        }
        let long = "x".repeat(10_000);
        assert!(
            PayNo::parse(&long).unwrap_err().len() < 200,
            "a 10 KB value is not echoed"
        );
        assert!(OrderNo::parse(&long).unwrap_err().len() < 200);
    }

    #[test]
    fn order_numbers_are_short_and_time_sortable() {
        let a = OrderNo::generate();
        std::thread::sleep(Duration::from_millis(2));
        let b = OrderNo::generate();
        assert!(a.as_str().len() <= ORDER_NO_MAX_LEN);
        assert!(a < b, "{a} < {b}");
        assert!(OrderNo::parse(a.as_str()).is_ok());
        assert!(OrderNo::parse("x'; drop").is_err());
    }

    #[test]
    fn trace_targets_are_classified() {
        assert_eq!(
            TraceTarget::classify("APP:ORDER:20261129:x"),
            TraceTarget::RequestId("APP:ORDER:20261129:x".into())
        );
        let e = new_event_id();
        assert_eq!(TraceTarget::classify(&e), TraceTarget::EventId(e.clone()));
        assert_eq!(
            TraceTarget::classify("20261129140542123abc"),
            TraceTarget::OrderNo("20261129140542123abc".into())
        );
    }

    #[test]
    fn trace_event_json_round_trips_and_tolerates_new_outcomes() {
        let ev = TraceEvent::new(Layer::Db, Outcome::UniqueViolationReplayed)
            .order_no("O1")
            .request_id("R1")
            .event_id("E1");
        let json = serde_json::to_string(&ev).unwrap();
        assert!(
            json.contains("\"outcome\":\"unique_violation_replayed\""),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<TraceEvent>(&json).unwrap(), ev);
        let newer = json.replace("unique_violation_replayed", "something_new");
        assert_eq!(
            serde_json::from_str::<TraceEvent>(&newer).unwrap().outcome,
            Outcome::Other
        );
        assert_eq!(Outcome::DedupHit.as_str(), "dedup_hit");
    }
}
