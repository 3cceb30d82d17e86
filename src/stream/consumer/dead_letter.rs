//! The consumer's dead-letter path: a poison message — unreadable
//! ([`crate::stream::poison::parse`]), larger than `consumer.max_message_bytes`, for an unknown
//! order, or an event already used by another order — goes to the DLQ with its reason, its
//! original partition/offset and who dead-lettered it (`dlq.by.*`: this consumer's group,
//! instance, host, version and the time), after every database write of its batch succeeded.
//! An incoming `dlq.*` header is dropped, never copied: ours are the only ones.
//!
//! Once per group and source position (`processed_event`, outcome `dlq`), so a retried or
//! redelivered batch does not publish it again. One too large for the DLQ is published as a
//! record of it cut to fit, or kept as `dlq_failed` when even that is refused
//! ([`crate::stream::poison`]): no message holds up the batch. A DLQ that does not answer fails the
//! batch, which is retried.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Header, Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::PaymentConsumer;
use crate::config::Config;
use crate::contracts::{headers, Layer, Outcome, TraceEvent};
use crate::stream::poison::{self, header_str, DeadLetteredBy};
use crate::stream::sinks::{self, DeadLetter};

/// A message that cannot be processed, and why.
pub(super) struct Poison {
    pub(super) message: OwnedMessage,
    pub(super) reason: String,
    /// Its whole size when it was kept cut ([`poison::kept`]).
    pub(super) cut_from: Option<usize>,
}

/// What became of a poison message at the DLQ ([`PaymentConsumer::dead_letter_one`]).
enum DeadLettered {
    /// Published, whole or as a record of it cut to fit (recorded as `dlq`).
    Published,
    /// Refused for good even as a record: kept in `processed_event` as `dlq_failed`.
    Refused,
}

/// The DLQ's producer: every publication acknowledged by all replicas, and the DLQ's limit
/// (`consumer.dlq_max_message_bytes`) as its `message.max.bytes`.
pub(super) fn dlq_producer(config: &Config, instance_id: &str) -> anyhow::Result<FutureProducer> {
    let servers = &config.kafka.bootstrap_servers;
    crate::kafka_client::producer_config(&config.kafka)
        .set("client.id", format!("idemguard-dlq-{instance_id}"))
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .set(
            "message.max.bytes",
            config.consumer.dlq_max_message_bytes.to_string(),
        )
        .set("log_level", "3")
        .create()
        .map_err(|e| anyhow::anyhow!("kafka {servers}: cannot create the DLQ producer: {e}"))
}

impl PaymentConsumer {
    /// Publishes each poison message once per group: a message whose source position this
    /// group's `processed_event` already records as dead-lettered (a batch retried after a
    /// failed publish or a failed offset commit, a redelivery after a crash) is not published
    /// again. Each publication is recorded once the broker has acknowledged it, also when a later
    /// one of the batch fails. One window is left: a crash or a database failure between the
    /// acknowledgement and that record's commit publishes the message again on redelivery — with
    /// the same `dlq.id` header, by which a DLQ reader drops it.
    pub(super) async fn dead_letter(&self, poison: &[Poison]) -> anyhow::Result<()> {
        if poison.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = poison.iter().map(|p| dead_letter_id(&p.message)).collect();
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let published = sinks::already_processed(&self.db, &self.group, &id_refs).await?;
        let mut sent: Vec<DeadLetter<'_>> = Vec::new();
        let mut failure = None;
        for (p, id) in poison.iter().zip(&ids) {
            if published.contains(id) {
                self.stats.dlq_duplicates.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match self.dead_letter_one(p, id).await {
                Ok(how) => sent.push(DeadLetter {
                    id,
                    order_no: header_str(&p.message, headers::ORDER_NO)
                        .filter(|o| crate::contracts::OrderNo::parse(o).is_ok()),
                    topic: p.message.topic(),
                    partition: p.message.partition(),
                    offset: p.message.offset(),
                    outcome: match how {
                        DeadLettered::Published => "dlq",
                        DeadLettered::Refused => "dlq_failed",
                    },
                }),
                Err(e) => {
                    self.stats.dlq_failures.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = self.tracer.metrics() {
                        m.dlq_publish_failures.inc();
                    }
                    failure = Some(e);
                    break;
                }
            }
        }
        let ttl = self.dedup.ttl_ms();
        sinks::record_dead_letters(&self.db, &self.group, ttl, &sent).await?;
        failure.map_or(Ok(()), Err)
    }

    /// One poison message to the DLQ ([`poison`]): whole; refused for good (its size), a
    /// record of it cut to fit the DLQ — as it is at once for a message kept cut; refused even
    /// so, nothing is published: the caller keeps it in `processed_event` as `dlq_failed`, and
    /// the consumer goes on. Err: the DLQ did not answer (the batch is retried).
    async fn dead_letter_one(&self, p: &Poison, id: &str) -> anyhow::Result<DeadLettered> {
        let dlq_error = |e: KafkaError| {
            anyhow::anyhow!("cannot publish to the DLQ topic {}: {e}", self.dlq_topic)
        };
        if p.cut_from.is_none() {
            match self.send_to_dlq(p, id, None).await {
                Ok(()) => return Ok(DeadLettered::Published),
                Err(e) if poison::refused_for_good(&e) => {
                    self.stats.dlq_failures.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(dlq_error(e)),
            }
        }
        let fit = poison::excerpt_that_fits(&p.message, &p.reason, self.dlq_max_message_bytes);
        match self.send_to_dlq(p, id, Some(fit)).await {
            Ok(()) => Ok(DeadLettered::Published),
            Err(e) if poison::refused_for_good(&e) => {
                self.stats.dlq_failures.fetch_add(1, Ordering::Relaxed);
                self.unpublished(p, &e);
                Ok(DeadLettered::Refused)
            }
            Err(e) => Err(dlq_error(e)),
        }
    }

    /// A poison message the DLQ refused even as a record: said at ERROR with where it is, its
    /// size and why, and traced; `processed_event` keeps it as `dlq_failed`.
    fn unpublished(&self, p: &Poison, refused: &KafkaError) {
        let m = &p.message;
        let size = p.cut_from.unwrap_or_else(|| poison::size_of(m));
        self.stats.dlq_unpublished.fetch_add(1, Ordering::Relaxed);
        tracing::error!(topic = m.topic(), partition = m.partition(), offset = m.offset(), size,
            reason = %p.reason, refused = %refused,
            "poison message NOT in the DLQ: it refused even a record of it; kept in processed_event as dlq_failed, and the consumer goes on");
        self.tracer.emit(poison_event(
            m,
            format!(
                "NOT published to the DLQ ({refused}), kept in processed_event as dlq_failed: {} \
                 ({size} bytes, partition {} offset {})",
                p.reason,
                m.partition(),
                m.offset()
            ),
        ));
    }

    /// Publishes the poison message to the DLQ with the reason and where it came from — whole,
    /// or (`cut`: `Some(n)`) as a record of it: its payload's first `n` bytes, `dlq.size` and
    /// `dlq.cut` ([`poison::cut_headers`]) — and waits for the broker to acknowledge it: only
    /// then may its offset be committed.
    async fn send_to_dlq(&self, p: &Poison, id: &str, cut: Option<usize>) -> KafkaResult<()> {
        let m = &p.message;
        let partition = m.partition().to_string();
        let offset = m.offset().to_string();
        // A redriven message still poison says so: it is back once, and never redriven again.
        let returned = crate::stream::redrive::RedriveMark::of(m);
        let reason = p.reason.clone() + &returned.map_or(String::new(), |r| r.still_poison_note());
        // The original headers but any `dlq.*` one: those are ours, and written fresh below.
        let original = m
            .headers()
            .filter(|_| cut.is_none() || poison::headers_fit_a_record(m));
        let headers = poison::foreign_headers(original, &[poison::DLQ_HEADERS]);
        let mut headers = DeadLetteredBy::now(&self.group, &self.instance)
            .add_to(headers)
            .insert(Header {
                key: "dlq.id",
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: "dlq.reason",
                value: Some(reason.as_bytes()),
            })
            .insert(Header {
                key: "dlq.source.topic",
                value: Some(m.topic().as_bytes()),
            })
            .insert(Header {
                key: "dlq.source.partition",
                value: Some(partition.as_bytes()),
            })
            .insert(Header {
                key: "dlq.source.offset",
                value: Some(offset.as_bytes()),
            });
        let mut payload = m.payload().unwrap_or_default();
        if let Some(n) = cut {
            let size = p.cut_from.unwrap_or_else(|| poison::size_of(m));
            headers = poison::cut_headers(headers, size, n.min(payload.len()));
            payload = &payload[..n.min(payload.len())];
        }
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.dlq_topic)
            .payload(payload)
            .headers(headers);
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        self.dlq
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
        self.stats.dlq.fetch_add(1, Ordering::Relaxed);
        let cut_note = cut.map_or(String::new(), |n| format!("; published cut to {n} bytes"));
        self.tracer.emit(poison_event(
            m,
            format!("{reason} (partition {partition} offset {offset}){cut_note}"),
        ));
        Ok(())
    }
}

/// The trace event of a poison message, with the IDs its headers name.
fn poison_event(m: &OwnedMessage, detail: String) -> TraceEvent {
    let header = |name: &str| header_str(m, name);
    let mut ev = TraceEvent::new(Layer::Stream, Outcome::Dlq).detail(detail);
    if let Some(v) = header(headers::ORDER_NO) {
        ev = ev.order_no(v);
    }
    if let Some(v) = header(headers::REQUEST_ID) {
        ev = ev.request_id(v);
    }
    if let Some(v) = header(headers::EVENT_ID) {
        ev = ev.event_id(v);
    }
    ev
}

/// The dedup key of a dead-lettered message: its source position, which a redelivery keeps.
/// The topic is hashed (FNV-1a, stable across builds) to fit `processed_event.event_id`; it
/// cannot collide with a real eventId, which is a UUID.
fn dead_letter_id(m: &OwnedMessage) -> String {
    let topic = m.topic().bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mark = crate::contracts::DEAD_LETTER_MARK;
    format!("{mark}{topic:016x}:{}:{}", m.partition(), m.offset())
}
