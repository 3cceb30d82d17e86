//! The offsets at a time, one trait for every way of finding them ([`OffsetsAtTime`]). What a
//! read uses is the broker's time index ([`BrokerTimeIndex`]: ListOffsets by timestamp, one
//! request for every partition asked), its answers checked against the messages around them
//! until one check has looked at both sides of an answer; a broker whose answer fails the check
//! gets its offsets searched for instead ([`untruthful_broker`]), so a Kafka-compatible broker
//! that answers falsely still gets a right trace.

pub mod untruthful_broker;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::console::read::topics::{Reader, KAFKA_TIMEOUT};

/// One partition's question: the first offset in `[low, end]` whose message is at or after
/// `ms` — `end` when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub partition: i32,
    /// The partition's first offset.
    pub low: i64,
    /// The offset after its last message.
    pub end: i64,
    /// Epoch ms.
    pub ms: i64,
}

impl Ask {
    /// The offset a broker's answer names, clamped into `[low, end]` (`End`: nothing at or after
    /// the time); `None` when the broker left the partition unanswered.
    pub fn answered_by(&self, offset: Option<Offset>) -> Option<i64> {
        match offset {
            Some(Offset::Offset(o)) => Some(o.clamp(self.low, self.end)),
            Some(Offset::End) => Some(self.end),
            _ => None,
        }
    }
}

/// Where the first message at or after a time is, per partition.
pub trait OffsetsAtTime {
    /// For each ask, the first offset in `[low, end]` whose message is at or after its time.
    fn first_at_or_after(&mut self, asks: &[Ask]) -> anyhow::Result<Vec<i64>>;

    /// How the offsets were found, as the read's cost names it (`offset_lookup`); `None` before
    /// any was asked for.
    fn found_by(&self) -> Option<&'static str> {
        Some("offsets_for_times")
    }

    /// Messages read to find or check the offsets.
    fn probes(&self) -> u64 {
        0
    }
}

/// The broker's time index: `offsets_for_times`, one ListOffsets request for every partition
/// asked. An answer the broker does not give is an error.
pub struct BrokerTimeIndex<'a> {
    pub reader: &'a Reader,
    pub servers: &'a str,
    pub topic: &'a str,
}

impl OffsetsAtTime for BrokerTimeIndex<'_> {
    fn first_at_or_after(&mut self, asks: &[Ask]) -> anyhow::Result<Vec<i64>> {
        let (servers, topic) = (self.servers, self.topic);
        let mut q = TopicPartitionList::new();
        for a in asks {
            q.add_partition_offset(topic, a.partition, Offset::Offset(a.ms))?;
        }
        let found = self
            .reader
            .offsets_for_times(q, KAFKA_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("kafka {servers}: offsets of {topic} by time: {e}"))?;
        asks.iter()
            .map(|a| {
                let offset = found.find_partition(topic, a.partition).map(|e| e.offset());
                a.answered_by(offset).ok_or_else(|| {
                    anyhow::anyhow!(
                        "kafka {servers}: no offset of {topic}/{} at {} ms",
                        a.partition,
                        a.ms
                    )
                })
            })
            .collect()
    }
}

/// The offsets a read of `topic` uses: the broker's time index, checked
/// ([`untruthful_broker::Checked`]). `reader` has the topic's metadata already (it listed its
/// partitions): the probes of a check assign partitions at once.
pub fn of_topic<'a>(
    reader: &'a Reader,
    servers: &'a str,
    topic: &'a str,
    cancel: &CancellationToken,
) -> untruthful_broker::Checked<'a> {
    let broker = BrokerTimeIndex {
        reader,
        servers,
        topic,
    };
    untruthful_broker::Checked::new(broker, cancel)
}
