//! The consumer group's lag per partition, read without joining the group: what the Rates
//! view, the Overview and `idemguard rates` say of how far the real consumer is behind.

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::config::Config;
use crate::console::read::topics::{create_reader, watermarks, Reader, KAFKA_TIMEOUT};

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
    let consumer: Reader = create_reader(
        crate::kafka_client::client_config(&config.kafka)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("log_level", "0"),
    )
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
