//! Consumer lag per partition: the messages of a topic the group has still to read. The one
//! reader of it — the `consumer_lag_messages` gauge, the storm rig, the console's Rates view and
//! Overview, and `idemguard rates` all call [`consumer_lag`], so the metrics and the console
//! cannot disagree about how far the consumer is behind.
//!
//! The committed offsets are fetched without joining the group (an OffsetFetch): the real
//! consumer's members never see a rebalance because someone looked.

use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

/// How far the consumer group is behind on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    /// The group's committed offset; `None` when it has committed nothing there yet.
    pub committed: Option<i64>,
    /// Messages the group has still to read: from its committed offset to the high watermark.
    /// Where it committed nothing, or committed below what retention kept, the consumer starts
    /// at the partition's first message (`auto.offset.reset = earliest`), so the lag counts
    /// from the low watermark.
    pub lag: i64,
}

/// Why the lag could not be read (boxed: what it carries is large, and it travels through
/// every `Result` of the read and of its callers).
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct LagError(Box<LagFailure>);

impl LagError {
    pub fn failure(&self) -> &LagFailure {
        &self.0
    }
}

impl From<LagFailure> for LagError {
    fn from(failure: LagFailure) -> Self {
        Self(Box::new(failure))
    }
}

/// What failed: the broker, the thing asked for, and what to do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LagFailure {
    #[error(
        "cannot create a Kafka client for {servers}: {error} (check [kafka] in the configuration)"
    )]
    Client { servers: String, error: KafkaError },
    #[error("kafka {servers} did not answer with the partitions of topic {topic} within {within:?}: {error} (is the broker running? `scripts/stack status`)")]
    Partitions {
        servers: String,
        topic: String,
        within: Duration,
        error: KafkaError,
    },
    #[error("kafka {servers} has no topic {topic} (`scripts/stack up` creates the stack's topics; elsewhere check kafka.payment_topic)")]
    NoTopic { servers: String, topic: String },
    #[error("kafka {servers} did not answer with group {group}'s committed offsets on topic {topic} within {within:?}: {error} (is the broker running? `scripts/stack status`)")]
    Committed {
        servers: String,
        group: String,
        topic: String,
        within: Duration,
        error: KafkaError,
    },
    #[error("kafka {servers} refused group {group}'s committed offset on {topic}/{partition}: {error} (may the configured Kafka user describe the group? kafka.consumer_group, kafka.sasl_username)")]
    CommittedRefused {
        servers: String,
        group: String,
        topic: String,
        partition: i32,
        error: KafkaError,
    },
    #[error("kafka {servers} did not answer with the watermarks of {topic}/{partition} within {within:?}: {error} (is the broker running? `scripts/stack status`)")]
    Watermarks {
        servers: String,
        topic: String,
        partition: i32,
        within: Duration,
        error: KafkaError,
    },
}

/// The lag reader's client context. A broker out of reach comes back from the request that met
/// it, said once by [`LagError`]; librdkafka's own callbacks would repeat it on stderr for every
/// retry — over the console's screen, or after `idemguard rates --json`'s answer — so what they
/// say goes to the debug log.
struct LagReadContext;

impl ClientContext for LagReadContext {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        tracing::debug!(target: "librdkafka", "librdkafka: {fac}: {log_message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
    }
}

impl ConsumerContext for LagReadContext {}

/// Lag of `group` on every partition of `topic`, within `timeout` in all (every request gets
/// what is left of it). Blocking (network round trips): call it from `spawn_blocking` in async
/// code.
pub fn consumer_lag(
    kafka: &crate::config::KafkaConfig,
    group: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<PartitionLag>, LagError> {
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let servers = kafka.bootstrap_servers.clone();
    let consumer: BaseConsumer<LagReadContext> = crate::kafka_client::client_config(kafka)
        // The group's id is what the OffsetFetch names; the group is never joined (no
        // subscribe, no assign) and nothing is committed.
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create_with_context(LagReadContext)
        .map_err(|error| LagFailure::Client {
            servers: servers.clone(),
            error,
        })?;
    let partitions = partitions(&consumer, &servers, topic, left(), timeout)?;
    let committed = committed_offsets(&consumer, topic, &partitions, left()).map_err(|error| {
        LagFailure::Committed {
            servers: servers.clone(),
            group: group.into(),
            topic: topic.into(),
            within: timeout,
            error,
        }
    })?;
    let mut out = Vec::with_capacity(partitions.len());
    for (partition, committed) in partitions.into_iter().zip(committed) {
        let committed = committed.map_err(|error| LagFailure::CommittedRefused {
            servers: servers.clone(),
            group: group.into(),
            topic: topic.into(),
            partition,
            error,
        })?;
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, left())
            .map_err(|error| LagFailure::Watermarks {
                servers: servers.clone(),
                topic: topic.into(),
                partition,
                within: timeout,
                error,
            })?;
        let from = committed.unwrap_or(low).max(low);
        out.push(PartitionLag {
            topic: topic.to_string(),
            partition,
            high_watermark: high,
            committed,
            lag: (high - from).max(0),
        });
    }
    Ok(out)
}

/// The partitions of `topic`, sorted.
fn partitions(
    consumer: &BaseConsumer<LagReadContext>,
    servers: &str,
    topic: &str,
    within: Duration,
    timeout: Duration,
) -> Result<Vec<i32>, LagError> {
    let no_answer = |error| -> LagError {
        LagFailure::Partitions {
            servers: servers.into(),
            topic: topic.into(),
            within: timeout,
            error,
        }
        .into()
    };
    let no_topic = || -> LagError {
        LagFailure::NoTopic {
            servers: servers.into(),
            topic: topic.into(),
        }
        .into()
    };
    let metadata = consumer
        .fetch_metadata(Some(topic), within)
        .map_err(no_answer)?;
    let t = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(no_topic)?;
    match t.error().map(RDKafkaErrorCode::from) {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => return Err(no_topic()),
        Some(code) => return Err(no_answer(KafkaError::MetadataFetch(code))),
        None => {}
    }
    let mut partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Err(no_topic());
    }
    partitions.sort_unstable();
    Ok(partitions)
}

/// The group's committed offset on each of `partitions`, in their order: `Ok(None)` where it
/// committed nothing, `Err` where the broker refused that partition's fetch.
fn committed_offsets(
    consumer: &BaseConsumer<LagReadContext>,
    topic: &str,
    partitions: &[i32],
    within: Duration,
) -> Result<Vec<Result<Option<i64>, KafkaError>>, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(topic, *p);
    }
    let committed = consumer.committed_offsets(tpl, within)?;
    Ok(partitions
        .iter()
        .map(|p| {
            let Some(e) = committed.find_partition(topic, *p) else {
                return Ok(None);
            };
            e.error()?;
            Ok(match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
        })
        .collect())
}
