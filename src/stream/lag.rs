//! Consumer lag per partition: the high watermark minus the group's committed offset. Read by
//! the console's rates view and `idemguard consume`'s progress log.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// None when the group has committed nothing on this partition yet.
    pub committed: Option<i64>,
    pub high_watermark: i64,
    /// Messages not yet committed by the group (from the low watermark when nothing is committed).
    pub lag: i64,
}

/// Lag of `group` on every partition of `topic`. Blocking (network round trips): call it from
/// `spawn_blocking` in async code.
pub fn consumer_lag(
    kafka: &crate::config::KafkaConfig,
    group: &str,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<PartitionLag>> {
    let bootstrap_servers = &kafka.bootstrap_servers;
    let consumer: BaseConsumer = crate::kafka_client::client_config(kafka)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("log_level", "3")
        .create()
        .map_err(|e| anyhow::anyhow!("kafka {bootstrap_servers}: {e}"))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| anyhow::anyhow!("kafka {bootstrap_servers}: metadata of {topic}: {e} (is the broker running? scripts/stack status)"))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        anyhow::bail!(
            "topic {topic} does not exist on {bootstrap_servers} (scripts/stack up creates it)"
        );
    }
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition(topic, *p);
    }
    let committed = consumer.committed_offsets(tpl, timeout).map_err(|e| {
        anyhow::anyhow!("kafka {bootstrap_servers}: committed offsets of group {group}: {e}")
    })?;
    let mut out = Vec::new();
    for p in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, timeout).map_err(|e| {
            anyhow::anyhow!("kafka {bootstrap_servers}: watermarks of {topic}/{p}: {e}")
        })?;
        let committed = committed
            .find_partition(topic, p)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        let lag = (high - committed.unwrap_or(low)).max(0);
        out.push(PartitionLag {
            topic: topic.to_string(),
            partition: p,
            committed,
            high_watermark: high,
            lag,
        });
    }
    Ok(out)
}
