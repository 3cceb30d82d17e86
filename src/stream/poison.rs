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
/// What the DLQ's `dlq.*` headers and the record's framing take at most, besides the key, the
/// payload and the original headers.
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
