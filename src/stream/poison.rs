//! What makes a payment message poison: unreadable ([`parse`]: not JSON, not a payment event,
//! IDs that disagree with its headers), or too large to keep or to dead-letter whole. One
//! message must never stop the consumer.
//!
//! - **At receipt** a payment message larger than `consumer.max_message_bytes` (its key, payload
//!   and headers; a payment event is a few hundred bytes) is kept only as its first
//!   [`EXCERPT_BYTES`]: never copied whole, so a gzip message that inflates to 60 MB costs the
//!   batch 64 KiB, not 60 MB ([`kept`]). It is poison, and its record goes to the DLQ.
//! - **At the DLQ** a message the DLQ refuses for good — too large for its limit
//!   (`consumer.dlq_max_message_bytes`, the DLQ producer's `message.max.bytes`) or refused as a
//!   record ([`refused_for_good`]) — is published again as a record cut to fit
//!   ([`excerpt_that_fits`]), with `dlq.size` and `dlq.cut` saying what it was; refused even so,
//!   it is kept in `processed_event` as `dlq_failed`. A DLQ that does not answer (a broker
//!   down) is another matter: the batch is retried, as before.
//!
//! The consumer's reads are bounded the same way: librdkafka fetches at most
//! [`FETCH_MAX_BYTES`] at once, [`PARTITION_FETCH_MAX_BYTES`] per partition, and reads ahead at
//! most [`QUEUED_MAX_KBYTES`].

use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::types::RDKafkaErrorCode;

use crate::contracts::{headers, PaymentSucceeded};

/// What is kept of a message too large to keep whole: its payload's first bytes.
pub const EXCERPT_BYTES: usize = 64 * 1024;
/// A cut message's key is kept up to this many bytes.
const KEY_KEPT: usize = 256;
/// A cut message keeps its headers when they come to at most this many bytes, else none.
const HEADERS_KEPT: usize = 8 * 1024;
/// What the DLQ's `dlq.*` headers (`dlq.by.*` included: a group, an instance id, a host name, a
/// version, a time — a few hundred bytes) and the record's framing take at most, besides the
/// key, the payload and the original headers.
const RECORD_OVERHEAD: usize = 2 * 1024;

/// The consumer's `fetch.max.bytes`: one fetch brings at most 1 MiB of (compressed) data.
pub const FETCH_MAX_BYTES: &str = "1048576";
/// Its `max.partition.fetch.bytes`: at most 64 KiB per partition in a fetch (a broker still
/// returns a first batch larger than that whole, so no message is too large to be read). A
/// compressed batch inflates once read — gzip up to about 1,000 times, and librdkafka does not
/// cap it — so this is what bounds the inflated data one fetch can bring: 64 KiB per partition,
/// not 1 MiB (measured: three 60 KB gzip messages of 60 MB each on one partition took the
/// consumer to 215 MB with 1 MiB, 95 MB with 64 KiB). A payment event is a few hundred bytes:
/// 64 KiB is still hundreds of events per partition per round trip.
pub const PARTITION_FETCH_MAX_BYTES: &str = "65536";
/// Its `queued.max.messages.kbytes`: librdkafka stops fetching while this much (16 MiB) is read
/// ahead of the batch in hand.
pub const QUEUED_MAX_KBYTES: &str = "16384";

/// The size of a message as a broker counts it, roughly: key, payload and headers.
pub fn size_of(m: &impl Message) -> usize {
    m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len) + header_bytes(m)
}

/// The bytes of a message's headers, names and values.
fn header_bytes(m: &impl Message) -> usize {
    m.headers().map_or(0, |hs| {
        hs.iter()
            .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len))
            .sum()
    })
}

/// `m` as the batch keeps it: whole when it is at most `max` bytes; else cut (its payload's
/// first [`EXCERPT_BYTES`], its key's first 256, its headers only if small), with its whole
/// size — the caller makes it poison.
pub fn kept(m: &BorrowedMessage<'_>, max: usize) -> (OwnedMessage, Option<usize>) {
    let size = size_of(m);
    if size <= max {
        return (m.detach(), None);
    }
    let cut = |b: &[u8], n: usize| b[..b.len().min(n)].to_vec();
    let headers = m
        .headers()
        .filter(|_| headers_fit_a_record(m))
        .map(|hs| hs.detach());
    let owned = OwnedMessage::new(
        m.payload().map(|p| cut(p, EXCERPT_BYTES)),
        m.key().map(|k| cut(k, KEY_KEPT)),
        m.topic().to_string(),
        m.timestamp(),
        m.partition(),
        m.offset(),
        headers,
    );
    (owned, Some(size))
}

/// Why a message cut at receipt is poison.
pub fn too_large(size: usize, max: usize) -> String {
    format!(
        "message of {size} bytes is larger than consumer.max_message_bytes ({max}): not read \
         (a payment event is a few hundred bytes); its first {EXCERPT_BYTES} bytes are kept"
    )
}

/// True when the DLQ refused a message for what it is (its size, its records), so that
/// publishing it again can never succeed: then a record of it is published instead. Anything
/// else (a timeout, a broker down) may pass on a retry.
pub fn refused_for_good(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::InvalidRecord
        )
    )
}

/// True when a record of `m` carries its original headers: when they are small.
pub fn headers_fit_a_record(m: &impl Message) -> bool {
    header_bytes(m) <= HEADERS_KEPT
}

/// How many bytes of `m`'s payload a record of it may carry within the DLQ's `limit`, next to
/// its key, its headers and the `dlq.*` headers (`reason` the longest of them): at most
/// [`EXCERPT_BYTES`], and nothing when even the rest does not fit.
pub fn excerpt_that_fits(m: &OwnedMessage, reason: &str, limit: usize) -> usize {
    let headers = if headers_fit_a_record(m) {
        header_bytes(m)
    } else {
        0
    };
    let rest = RECORD_OVERHEAD + reason.len() + m.key().map_or(0, <[u8]>::len) + headers;
    let payload = m.payload().map_or(0, <[u8]>::len);
    limit.saturating_sub(rest).min(EXCERPT_BYTES).min(payload)
}

/// The headers a record of a cut message adds: its whole size, and what was cut.
pub fn cut_headers(headers: OwnedHeaders, size: usize, kept: usize) -> OwnedHeaders {
    use rdkafka::message::Header;
    let size = size.to_string();
    let cut = format!("payload cut to its first {kept} bytes; the message was {size} bytes");
    headers
        .insert(Header {
            key: "dlq.size",
            value: Some(size.as_bytes()),
        })
        .insert(Header {
            key: "dlq.cut",
            value: Some(cut.as_bytes()),
        })
}

/// The namespace of the headers the consumer writes on a DLQ message (`dlq.id`, `dlq.reason`,
/// `dlq.source.*`, `dlq.by.*`, `dlq.size`, `dlq.cut`).
pub const DLQ_HEADERS: &str = "dlq.";

/// The headers of `from` that are not in one of the namespaces of `ours` (`"dlq."`,
/// `"redrive."`). A header in a namespace idemguard writes is never copied from an incoming
/// message: whoever produced it could have forged it (a `dlq.by.instance` naming another
/// consumer, a `dlq.reason` read before the real one), so ours are always written fresh.
/// Used by the consumer on the way into the DLQ and by a redrive on the way out of it.
pub fn foreign_headers(from: Option<&OwnedHeaders>, ours: &[&str]) -> OwnedHeaders {
    use rdkafka::message::Header;
    let mut out = OwnedHeaders::new();
    for h in from.into_iter().flat_map(|hs| hs.iter()) {
        if !ours.iter().any(|ns| h.key.starts_with(ns)) {
            out = out.insert(Header {
                key: h.key,
                value: h.value,
            });
        }
    }
    out
}

/// Who sent a message to the DLQ: the `dlq.by.*` headers the consumer adds, so that with several
/// consumers on a topic an operator can tell which one refused an event (its group, which
/// decides what "already processed" means; its instance and host, whose database and logs to
/// look at; its version, whose parser it was).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetteredBy {
    pub group: Option<String>,
    /// The consumer's [`crate::contracts::Instance`] id, as in its lock values and trace events.
    pub instance: Option<String>,
    pub host: Option<String>,
    /// The idemguard version that dead-lettered it.
    pub version: Option<String>,
    /// When, epoch milliseconds.
    pub at_ms: Option<i64>,
}

/// The `dlq.by.*` header names.
pub mod by {
    pub const GROUP: &str = "dlq.by.group";
    pub const INSTANCE: &str = "dlq.by.instance";
    pub const HOST: &str = "dlq.by.host";
    pub const VERSION: &str = "dlq.by.version";
    pub const AT_MS: &str = "dlq.by.at_ms";
    /// Their common prefix.
    pub const PREFIX: &str = "dlq.by.";
    /// At most this many characters of a `dlq.by.*` value are read and shown: anyone who can
    /// write to the DLQ can write these headers, 100 KB long.
    pub const VALUE_MAX: usize = 128;
}

impl DeadLetteredBy {
    /// This consumer, dead-lettering now.
    pub fn now(group: &str, instance: &crate::contracts::Instance) -> DeadLetteredBy {
        DeadLetteredBy {
            group: Some(group.to_string()),
            instance: Some(instance.id.clone()),
            host: Some(instance.host.clone()),
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
            at_ms: Some(crate::contracts::now_ms()),
        }
    }

    /// `headers` with the `dlq.by.*` headers added.
    pub fn add_to(&self, mut headers: OwnedHeaders) -> OwnedHeaders {
        use rdkafka::message::Header;
        let at = self.at_ms.map(|t| t.to_string());
        for (key, value) in [
            (by::GROUP, &self.group),
            (by::INSTANCE, &self.instance),
            (by::HOST, &self.host),
            (by::VERSION, &self.version),
            (by::AT_MS, &at),
        ] {
            if let Some(v) = value {
                headers = headers.insert(Header {
                    key,
                    value: Some(v.as_bytes()),
                });
            }
        }
        headers
    }

    /// The `dlq.by.*` headers of a DLQ message, each value (lossy UTF-8) at most
    /// [`by::VALUE_MAX`] characters; `None` when it has none — dead-lettered by an idemguard
    /// older than these headers, or written into the DLQ by someone else.
    pub fn of(m: &impl Message) -> Option<DeadLetteredBy> {
        let hs = m.headers()?;
        let value = |name: &str| -> Option<String> {
            let v = hs.iter().find(|h| h.key == name)?.value?;
            let text = String::from_utf8_lossy(v);
            Some(if text.chars().count() > by::VALUE_MAX {
                let mut cut: String = text.chars().take(by::VALUE_MAX - 1).collect();
                cut.push('…');
                cut
            } else {
                text.into_owned()
            })
        };
        let found = DeadLetteredBy {
            group: value(by::GROUP),
            instance: value(by::INSTANCE),
            host: value(by::HOST),
            version: value(by::VERSION),
            at_ms: value(by::AT_MS).and_then(|t| t.parse().ok()),
        };
        let any = hs.iter().any(|h| h.key.starts_with(by::PREFIX));
        any.then_some(found)
    }
}

/// The value of header `name`, when it is UTF-8.
pub fn header_str(m: &OwnedMessage, name: &str) -> Option<String> {
    let hs = m.headers()?;
    hs.iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_string)
}

/// Why a payload is not a payment event, in words about the payload: serde_json's own text for a
/// syntax error ("key must be a string") reads like a complaint about the Kafka message key.
fn poison_reason(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            format!(
                "payload is not JSON (invalid at line {} column {} of the payload)",
                e.line(),
                e.column()
            )
        }
        Category::Data => format!("payload is JSON but not a payment event: {e}"),
    }
}

/// A payment event, or the reason it is poison.
pub fn parse(m: &OwnedMessage) -> Result<PaymentSucceeded, String> {
    let payload = m.payload().ok_or("empty message")?;
    let event: PaymentSucceeded = serde_json::from_slice(payload).map_err(|e| poison_reason(&e))?;
    if uuid::Uuid::try_parse(&event.event_id).is_err() {
        return Err(format!("event_id `{}` is not a UUID", event.event_id));
    }
    crate::contracts::OrderNo::parse(&event.order_no)?;
    if event.amount < 0 {
        return Err(format!("negative amount {}", event.amount));
    }
    for (name, value) in [
        (headers::EVENT_ID, &event.event_id),
        (headers::ORDER_NO, &event.order_no),
    ] {
        if let Some(h) = header_str(m, name) {
            if &h != value {
                return Err(format!(
                    "header {name} `{h}` disagrees with the body `{value}`"
                ));
            }
        }
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::Timestamp;

    fn message(payload: &[u8]) -> OwnedMessage {
        OwnedMessage::new(
            Some(payload.to_vec()),
            Some(b"2026112914054212300000abcdef".to_vec()),
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            None,
        )
    }

    fn with_headers(hs: &[(&str, &[u8])]) -> OwnedMessage {
        use rdkafka::message::Header;
        let mut headers = OwnedHeaders::new();
        for (key, value) in hs {
            headers = headers.insert(Header {
                key,
                value: Some(*value),
            });
        }
        OwnedMessage::new(
            None,
            None,
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            Some(headers),
        )
    }

    #[test]
    fn who_dead_lettered_a_message_is_read_back_bounded_and_never_guessed() {
        let me = crate::contracts::Instance {
            id: "h-1-abcdef".into(),
            host: "h".into(),
            pid: 1,
        };
        let by = DeadLetteredBy::now("g", &me);
        let m = OwnedMessage::new(
            None,
            None,
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            Some(by.add_to(OwnedHeaders::new())),
        );
        assert_eq!(DeadLetteredBy::of(&m), Some(by));
        // Older messages have none: not known, rather than a default.
        assert_eq!(
            DeadLetteredBy::of(&with_headers(&[("dlq.reason", b"x")])),
            None
        );
        let huge = "x".repeat(100_000);
        let m = with_headers(&[(by::HOST, huge.as_bytes()), (by::AT_MS, b"soon")]);
        let read = DeadLetteredBy::of(&m).unwrap();
        let host = read.host.unwrap();
        assert_eq!(host.chars().count(), by::VALUE_MAX);
        assert!(host.ends_with('…'));
        assert_eq!((read.instance, read.at_ms), (None, None));
    }

    #[test]
    fn only_headers_outside_our_namespaces_are_copied() {
        let m = with_headers(&[
            ("eventId", b"e"),
            ("dlq.by.instance", b"forged"),
            ("redrive.audit_id", b"1"),
        ]);
        let names =
            |hs: OwnedHeaders| -> Vec<String> { hs.iter().map(|h| h.key.to_string()).collect() };
        let kept = foreign_headers(m.headers(), &[DLQ_HEADERS]);
        assert_eq!(names(kept), ["eventId", "redrive.audit_id"]);
        let kept = foreign_headers(m.headers(), &[DLQ_HEADERS, crate::stream::redrive::HEADERS]);
        assert_eq!(names(kept), ["eventId"]);
    }

    #[test]
    fn the_dlq_reason_of_a_non_json_payload_says_the_payload_is_not_json() {
        let reason = parse(&message(b"{not json at all")).unwrap_err();
        assert_eq!(
            reason,
            "payload is not JSON (invalid at line 1 column 2 of the payload)"
        );
        assert!(
            !reason.contains("key"),
            "an operator would read it as the Kafka key: {reason}"
        );
        let reason = parse(&message(b"{\"event_id\": 1}")).unwrap_err();
        assert!(
            reason.starts_with("payload is JSON but not a payment event: invalid type"),
            "{reason}"
        );
    }
}
