//! The headers of a redriven message: the one format shared by the operator's redrive
//! (`src/ops/redrive.rs`, which writes them), the consumer (which recognises them when a
//! redriven message is still poison) and the console's DLQ view (which shows them).
//!
//! Why the consumer must recognise them: a message redriven while still poison goes back to the
//! DLQ, and without a mark an operator (or a bulk redrive of "every message with this reason")
//! would send it round again and again. Marked, it returns to the DLQ once with the redrive
//! noted in its reason, and a redrive of a returned message is refused.

use rdkafka::message::{Headers, Message};

/// The namespace of a redrive's headers.
pub const HEADERS: &str = "redrive.";
/// The DLQ topic the redriven message was read from.
pub const DLQ_TOPIC: &str = "redrive.dlq.topic";
/// Its DLQ partition.
pub const DLQ_PARTITION: &str = "redrive.dlq.partition";
/// Its DLQ offset.
pub const DLQ_OFFSET: &str = "redrive.dlq.offset";
/// The `ops_audit` row of the redrive.
pub const AUDIT_ID: &str = "redrive.audit_id";

/// Where a redriven message came from: the DLQ position and the audit row of its redrive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RedriveMark {
    pub dlq_partition: i32,
    pub dlq_offset: i64,
    pub audit_id: i64,
}

impl RedriveMark {
    /// The mark `m` carries, when it was redriven (all three headers readable).
    pub fn of(m: &impl Message) -> Option<RedriveMark> {
        let h = |name: &str| -> Option<String> {
            let hs = m.headers()?;
            let v = hs.iter().find(|h| h.key == name)?.value?;
            std::str::from_utf8(v).ok().map(str::to_string)
        };
        Some(RedriveMark {
            dlq_partition: h(DLQ_PARTITION)?.parse().ok()?,
            dlq_offset: h(DLQ_OFFSET)?.parse().ok()?,
            audit_id: h(AUDIT_ID)?.parse().ok()?,
        })
    }

    /// What the consumer adds to the DLQ reason of a redriven message that is still poison.
    pub fn still_poison_note(&self) -> String {
        format!(
            "; still poison after its redrive from DLQ {}@{} (ops_audit row {}): back in the DLQ \
             once, never redriven again",
            self.dlq_partition, self.dlq_offset, self.audit_id
        )
    }
}

/// The `ops_audit` target of a redrive: the DLQ message's position. A position names one
/// message for the topic's life; see [`audit_row_is_of`] for a topic created again.
pub fn audit_target(dlq_topic: &str, partition: i32, offset: i64) -> String {
    format!("dlq:{dlq_topic}:{partition}:{offset}")
}

/// Whether a redrive's `ops_audit` row, of this message's target, records this very message.
/// A DLQ topic deleted and created again (a broker rebuilt, a topic reset) hands the same
/// positions to new messages, so a row also names the timestamp of the message it read
/// (`dlq_timestamp_ms` in its `before_state`), and a row that read another timestamp is of an
/// earlier message. A row that names none (it read no message) counts: when in doubt, a redrive
/// is refused rather than published twice.
pub fn audit_row_is_of(before_state: Option<&str>, timestamp_ms: Option<i64>) -> bool {
    let seen = before_state
        .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
        .and_then(|b| b.get("dlq_timestamp_ms").and_then(|t| t.as_i64()));
    match (seen, timestamp_ms) {
        (Some(seen), Some(now)) => seen == now,
        _ => true,
    }
}

/// Where a poison message was read from (the DLQ's `dlq.source.*` headers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourcePosition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// One message of the DLQ, its `dlq.*` headers parsed once: what the view shows and what a
/// redrive publishes.
#[derive(Debug, Clone)]
pub struct DlqEntry {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    /// `dlq.id`: the consumer's id of the poison (its source position, hashed).
    pub dlq_id: Option<String>,
    pub reason: String,
    pub source: Option<SourcePosition>,
    /// A record of a message too large for the DLQ (`dlq.cut`): its payload is an excerpt.
    pub cut: bool,
    /// The message was redriven once and came back still poison.
    pub returned_from: Option<RedriveMark>,
    pub message: rdkafka::message::OwnedMessage,
}

impl DlqEntry {
    pub fn of(m: rdkafka::message::OwnedMessage) -> DlqEntry {
        let h = |name: &str| header_text(&m, name);
        let source = (|| {
            Some(SourcePosition {
                topic: h("dlq.source.topic")?,
                partition: h("dlq.source.partition")?.parse().ok()?,
                offset: h("dlq.source.offset")?.parse().ok()?,
            })
        })();
        DlqEntry {
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            dlq_id: h("dlq.id"),
            reason: h("dlq.reason").unwrap_or_else(|| "(no dlq.reason header)".into()),
            source,
            cut: h("dlq.cut").is_some(),
            returned_from: RedriveMark::of(&m),
            message: m,
        }
    }

    /// The headers a redrive publishes: the original ones — every `dlq.*` header dropped, so
    /// that a return to the DLQ carries fresh ones, and every `redrive.*` one, so that no header
    /// written into the DLQ by someone else stands beside the redrive's own — and the mark.
    pub fn redrive_headers(
        &self,
        dlq_topic: &str,
        audit_id: i64,
    ) -> rdkafka::message::OwnedHeaders {
        use crate::stream::poison::{foreign_headers, DLQ_HEADERS};
        use rdkafka::message::Header;
        let mut out = foreign_headers(self.message.headers(), &[DLQ_HEADERS, HEADERS]);
        let (p, o, a) = (
            self.partition.to_string(),
            self.offset.to_string(),
            audit_id.to_string(),
        );
        for (key, value) in [
            (DLQ_TOPIC, dlq_topic),
            (DLQ_PARTITION, p.as_str()),
            (DLQ_OFFSET, o.as_str()),
            (AUDIT_ID, a.as_str()),
        ] {
            out = out.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        out
    }
}

/// A header's value as text (lossy), the first of that name.
pub fn header_text(m: &impl Message, name: &str) -> Option<String> {
    let hs = m.headers()?;
    let v = hs.iter().find(|h| h.key == name)?.value?;
    Some(String::from_utf8_lossy(v).into_owned())
}

/// How long reading one DLQ message by its position may take.
pub const READ_ONE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The DLQ message at `partition`@`offset` (blocking: run it on a blocking thread); `None` when
/// the DLQ holds no message there (past its end, or deleted by retention). Reads by
/// assignment, never joining a group.
pub fn read_entry(
    config: &crate::config::Config,
    partition: i32,
    offset: i64,
) -> anyhow::Result<Option<DlqEntry>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    let (servers, topic) = (&config.kafka.bootstrap_servers, &config.kafka.dlq_topic);
    let consumer: BaseConsumer = crate::kafka_client::client_config(&config.kafka)
        .set(
            "group.id",
            format!("idemguard-redrive-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "error")
        .set("log_level", "0")
        .create()
        .map_err(|e| anyhow::anyhow!("cannot create a Kafka reader for {servers}: {e}"))?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, READ_ONE_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: watermarks of {topic}/{partition}: {e}"))?;
    if offset < low || offset >= high {
        return Ok(None);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    consumer.assign(&tpl)?;
    let started = std::time::Instant::now();
    while started.elapsed() < READ_ONE_TIMEOUT {
        match consumer.poll(std::time::Duration::from_millis(200)) {
            Some(Ok(m)) if m.offset() == offset => return Ok(Some(DlqEntry::of(m.detach()))),
            // A compacted or transactional gap: the offset holds no message.
            Some(Ok(m)) if m.offset() > offset => return Ok(None),
            Some(Ok(_)) | None => {}
            Some(Err(e)) => {
                anyhow::bail!("kafka {servers}: reading {topic}/{partition}@{offset}: {e}")
            }
        }
    }
    anyhow::bail!(
        "kafka {servers}: no answer for {topic}/{partition}@{offset} within {READ_ONE_TIMEOUT:?}"
    )
}
