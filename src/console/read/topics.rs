//! The console's read-through to Kafka: the payment messages of an order (partition, offset,
//! timestamp, how many copies) from `payment.succeeded`, the trace events of every layer from
//! `idemguard.trace`, and the consumer group's lag per partition.
//!
//! The console never joins a consumer group and never commits: it assigns partitions itself, so
//! reading can never steal partitions from (or move the offsets of) the real consumer.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::contracts::{headers, PaymentSucceeded, TraceEvent};

/// How long one metadata / watermark / offset request may take before the broker counts as down.
pub const KAFKA_TIMEOUT: Duration = Duration::from_secs(3);

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
    /// IDs from the headers first (readable without parsing the body), then the payload, then the
    /// key (= orderNo).
    pub fn from_kafka(m: &BorrowedMessage<'_>) -> PaymentMessage {
        let mut msg = PaymentMessage {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            order_no: None,
            request_id: None,
            event_id: None,
            pay_no: None,
            payload_ok: false,
        };
        if let Some(h) = m.headers() {
            for header in h.iter() {
                let v = header
                    .value
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                match header.key {
                    headers::EVENT_ID => msg.event_id = v,
                    headers::REQUEST_ID => msg.request_id = v,
                    headers::ORDER_NO => msg.order_no = v,
                    _ => {}
                }
            }
        }
        if let Some(p) = m
            .payload()
            .and_then(|p| serde_json::from_slice::<PaymentSucceeded>(p).ok())
        {
            msg.payload_ok = true;
            msg.event_id.get_or_insert(p.event_id);
            msg.order_no.get_or_insert(p.order_no);
            msg.request_id.get_or_insert(p.request_id);
            msg.pay_no = Some(p.pay_no);
        }
        if msg.order_no.is_none() {
            msg.order_no = m.key().map(|k| String::from_utf8_lossy(k).into_owned());
        }
        msg
    }
}

/// Decode a trace topic message; `None` for a payload that is not a trace event.
pub fn trace_event_of(m: &BorrowedMessage<'_>) -> Option<TraceEvent> {
    serde_json::from_slice(m.payload()?).ok()
}

/// The settings of a reader that reads by assignment only (no group membership, no commits).
pub fn reader_config(config: &Config, purpose: &str) -> ClientConfig {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.kafka.bootstrap_servers)
        // A group id is required by the client library; it is never joined or committed to.
        // Unique per reader, like the client id: readers of one process must never share
        // broker-side state (fetch sessions, coordinators) with each other.
        .set("group.id", format!("idemguard-console-{purpose}-{tag}"))
        .set("client.id", format!("idemguard-console-{purpose}-{tag}"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        // Should a start offset ever be refused, start over from the beginning rather than skip
        // to the end: the console must not miss the messages it exists to show.
        .set("auto.offset.reset", "earliest")
        // Bounded prefetch: the client library would otherwise queue up to 100,000 messages
        // (or 64 MB) per partition ahead of the reader; the console's own stores are the place
        // for what it keeps, and memory the library took while catching up is not given back.
        .set("queued.min.messages", "2000")
        .set("queued.max.messages.kbytes", "2048")
        .set("fetch.max.bytes", "2097152")
        .set("log_level", "0");
    c
}

/// A blocking reader (see [`reader_config`]).
pub fn reader(config: &Config, purpose: &str) -> anyhow::Result<BaseConsumer> {
    reader_config(config, purpose).create().map_err(|e| {
        anyhow::anyhow!(
            "cannot create a Kafka reader for {}: {e}",
            config.kafka.bootstrap_servers
        )
    })
}

/// The partitions of `topic` with their (low, high) watermarks.
pub fn watermarks(
    consumer: &impl Consumer,
    servers: &str,
    topic: &str,
) -> anyhow::Result<Vec<(i32, i64, i64)>> {
    let md = consumer
        .fetch_metadata(Some(topic), KAFKA_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: metadata of {topic}: {e} (is the broker running? `scripts/stack status`)"))?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| anyhow::anyhow!("kafka {servers}: topic {topic} not found"))?;
    if let Some(e) = t.error() {
        anyhow::bail!(
            "kafka {servers}: topic {topic}: {e:?} (`scripts/stack up` creates the topics)"
        );
    }
    let mut out = Vec::new();
    for p in t.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p.id(), KAFKA_TIMEOUT)
            .map_err(|e| {
                anyhow::anyhow!("kafka {servers}: watermarks of {topic}/{}: {e}", p.id())
            })?;
        out.push((p.id(), low, high));
    }
    out.sort();
    Ok(out)
}

/// Where a bounded read starts.
#[derive(Debug, Clone, Copy)]
pub enum StartAt {
    Beginning,
    /// The first message at or after this epoch-ms time (falls back to the beginning when the
    /// broker cannot look offsets up by time).
    Since(i64),
}

/// Where each partition of a read starts: its beginning, or for [`StartAt::Since`] the first
/// offset at or after the time (`Offset::End` when there is none; the beginning when the broker
/// cannot look offsets up by time).
fn start_offsets(
    consumer: &BaseConsumer,
    topic: &str,
    marks: &[(i32, i64, i64)],
    start: StartAt,
) -> anyhow::Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for (p, _, _) in marks {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)?;
    }
    if let StartAt::Since(ms) = start {
        let mut by_time = TopicPartitionList::new();
        for (p, _, _) in marks {
            by_time.add_partition_offset(topic, *p, Offset::Offset(ms))?;
        }
        if let Ok(found) = consumer.offsets_for_times(by_time, KAFKA_TIMEOUT) {
            for e in found.elements() {
                let off = match e.offset() {
                    Offset::Offset(o) => Offset::Offset(o),
                    Offset::End => Offset::End,
                    _ => continue,
                };
                tpl.set_partition_offset(topic, e.partition(), off)?;
            }
        }
    }
    Ok(tpl)
}

/// Reads `topic` from `start` up to the high watermarks seen when the read began (blocking: run
/// it on a blocking thread). `each` gets every message. Bounded by `deadline`, and ends within
/// one poll (≤ 300 ms) of `cancel`: a read of a large topic takes seconds, and the console must
/// not wait for one nobody wants any more (quit, a new trace).
pub fn read_to_end(
    config: &Config,
    topic: &str,
    start: StartAt,
    deadline: Duration,
    cancel: &CancellationToken,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<u64> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer = reader(config, "read")?;
    let marks = watermarks(&consumer, servers, topic)?;
    let tpl = start_offsets(&consumer, topic, &marks, start)?;
    consumer
        .assign(&tpl)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: assign {topic}: {e}"))?;
    let mut remaining: std::collections::BTreeMap<i32, i64> = marks
        .iter()
        .filter(|(_, low, high)| high > low)
        .map(|(p, _, high)| (*p, *high))
        .collect();
    // Partitions whose start (by time) is already at the end have nothing to read.
    if let StartAt::Since(_) = start {
        for e in tpl.elements() {
            if e.offset() == Offset::End {
                remaining.remove(&e.partition());
            }
        }
    }
    let started = Instant::now();
    let mut read = 0u64;
    // Done when every partition reached the mark seen at the start AND one poll came back empty:
    // some brokers (tansu) report a high watermark that counts record batches, not records, so
    // the mark alone can stop a read early; the idle poll says the reader has really caught up.
    let mut idle = false;
    while !(remaining.is_empty() && idle) {
        if cancel.is_cancelled() {
            anyhow::bail!("reading {topic} was cancelled ({read} messages read)");
        }
        if started.elapsed() > deadline {
            anyhow::bail!("kafka {servers}: reading {topic} took longer than {deadline:?} ({read} messages read)");
        }
        match consumer.poll(Duration::from_millis(if remaining.is_empty() {
            300
        } else {
            200
        })) {
            Some(Ok(m)) => {
                idle = false;
                read += 1;
                each(&m);
                if let Some(high) = remaining.get(&m.partition()) {
                    if m.offset() + 1 >= *high {
                        remaining.remove(&m.partition());
                    }
                }
            }
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            None => {
                idle = true;
                // Nothing for a while: a partition whose position already passed its mark is done.
                if let Ok(pos) = consumer.position() {
                    for e in pos.elements() {
                        if let Offset::Offset(o) = e.offset() {
                            if remaining.get(&e.partition()).is_some_and(|h| o >= *h) {
                                remaining.remove(&e.partition());
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(read)
}

/// How far the consumer group is behind on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    /// The group's committed offset; `None` when it has committed nothing there yet.
    pub committed: Option<i64>,
    /// `high_watermark - committed` (everything from the low watermark when nothing is committed).
    pub lag: i64,
}

/// The lag of `group` on `topic`, per partition. Reads the committed offsets without joining the
/// group (an OffsetFetch), so the real consumer is never disturbed.
pub fn consumer_lag(
    config: &Config,
    topic: &str,
    group: &str,
) -> anyhow::Result<Vec<PartitionLag>> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("log_level", "0")
        .create()
        .map_err(|e| anyhow::anyhow!("cannot create a Kafka client for {servers}: {e}"))?;
    let marks = watermarks(&consumer, servers, topic)?;
    let mut tpl = TopicPartitionList::new();
    for (p, _, _) in &marks {
        tpl.add_partition(topic, *p);
    }
    let committed = consumer
        .committed_offsets(tpl, KAFKA_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: committed offsets of group {group}: {e}"))?;
    Ok(marks
        .iter()
        .map(|(p, low, high)| {
            let c = committed
                .find_partition(topic, *p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
            PartitionLag {
                topic: topic.to_string(),
                partition: *p,
                high_watermark: *high,
                committed: c,
                lag: (*high - c.unwrap_or(*low)).max(0),
            }
        })
        .collect())
}
