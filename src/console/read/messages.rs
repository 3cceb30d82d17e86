//! What the console makes of one Kafka message: a payment message ([`PaymentMessage`], its IDs
//! where `kafka_ids` says they are), a trace event, or why a trace topic message is not one.
//! Pure decoding, apart from any read: every reader of the console (the one-shot reads, the
//! TUI's live tail, the profile) decodes here, so a message reads the same on every face.

use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::Message;
use serde::Serialize;

use crate::config::TopicIds;
use crate::contracts::{PaymentSucceeded, TraceEvent};

/// One message of the payment topic, as the trace view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaymentMessage {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Broker or producer timestamp, epoch ms.
    pub timestamp_ms: Option<i64>,
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    pub event_id: Option<String>,
    pub pay_no: Option<String>,
    /// False when the payload is not a `PaymentSucceeded` (a poison message the consumer sends to
    /// the DLQ).
    pub payload_ok: bool,
}

impl PaymentMessage {
    /// The IDs where `ids` (`kafka_ids.payment`) says they are: a header, a JSON pointer into
    /// the body, or the key, the first place that names one winning. A team's events carry them
    /// in the body only; idemguard's own in headers, body and key.
    pub fn from_kafka(m: &BorrowedMessage<'_>, ids: &TopicIds) -> PaymentMessage {
        let body: Option<serde_json::Value> =
            m.payload().and_then(|p| serde_json::from_slice(p).ok());
        let own = m
            .payload()
            .and_then(|p| serde_json::from_slice::<PaymentSucceeded>(p).ok());
        let at = |places: &[String]| id_at(m, body.as_ref(), places);
        let order_no = at(&ids.order_no);
        PaymentMessage {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            request_id: at(&ids.request_id),
            event_id: at(&ids.event_id),
            pay_no: own.as_ref().map(|p| p.pay_no.clone()).or_else(|| {
                let b = body.as_ref()?;
                text_of(b.pointer("/payNo").or_else(|| b.pointer("/pay_no"))?)
            }),
            // A poison message (the consumer's DLQ case): neither idemguard's payload nor a JSON
            // body that names its order where the configuration says.
            payload_ok: own.is_some() || (body.is_some() && order_no.is_some()),
            order_no,
        }
    }
}

/// The first of `places` (`header:NAME`, `json:/POINTER`, `key`) that names a non-empty value.
pub fn id_at(
    m: &impl Message,
    body: Option<&serde_json::Value>,
    places: &[String],
) -> Option<String> {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    places.iter().find_map(|place| {
        let found = if let Some(name) = place.strip_prefix("header:") {
            m.headers()
                .and_then(|h| h.iter().find(|x| x.key == name))
                .and_then(|x| x.value.map(lossy))
        } else if let Some(pointer) = place.strip_prefix("json:") {
            body.and_then(|b| b.pointer(pointer)).and_then(text_of)
        } else if place == "key" {
            m.key().map(lossy)
        } else {
            None
        };
        found.filter(|v| !v.is_empty())
    })
}

/// A JSON string or number as text.
fn text_of(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Decode a trace topic message; `None` for a payload that is not a trace event.
pub fn trace_event_of(m: &BorrowedMessage<'_>) -> Option<TraceEvent> {
    serde_json::from_slice(m.payload()?).ok()
}

/// Why a trace topic message is not a trace event: where it is, what it begins with (escaped,
/// cut), what the decoder said.
pub fn not_a_trace_event(m: &BorrowedMessage<'_>) -> String {
    let at = format!("p{}@{}", m.partition(), m.offset());
    let Some(p) = m.payload() else {
        return format!("{at}: no payload");
    };
    let why = match serde_json::from_slice::<TraceEvent>(p) {
        Err(e) => e.to_string(),
        Ok(_) => "decoded".into(),
    };
    format!(
        "{at} `{}`: {}",
        crate::untrusted::escape_cut(&excerpt(p, 60), 61),
        crate::untrusted::escape(&why)
    )
}

/// The first `n` characters of a payload, lossy.
pub fn excerpt(payload: &[u8], n: usize) -> String {
    let head = &payload[..payload.len().min(n * 4)];
    String::from_utf8_lossy(head).chars().take(n).collect()
}
