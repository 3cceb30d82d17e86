//! Reading the stretches of a topic's partitions: every partition at once (one fetch request
//! serves them all), each partition's stretches in order, each stopping at its end — the one
//! place a window's read stops ([`Reading::reached`]) — and a partition whose last stretch is
//! read leaving the fetches ([`set_aside`]), so that the others are not starved behind it.
//! Bounded by a deadline; ends within one poll of its cancellation.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::plan::Stretch;
use crate::console::read::topics::{assign_at, set_aside, Reader, KAFKA_TIMEOUT};

/// Reads `stretches` of `topic`'s partitions with `reader` (which knows the topic's metadata):
/// `each` gets every message inside them; how many that was.
pub fn read(
    reader: &Reader,
    (servers, topic): (&str, &str),
    stretches: &BTreeMap<i32, Vec<Stretch>>,
    deadline: Duration,
    cancel: &CancellationToken,
    each: &mut impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<u64> {
    let mut reading = Reading {
        left: stretches
            .iter()
            .map(|(p, r)| (*p, r.iter().copied().collect()))
            .collect(),
        last: BTreeMap::new(),
    };
    let mut tpl = TopicPartitionList::new();
    for (p, r) in &reading.left {
        tpl.add_partition_offset(topic, *p, Offset::Offset(r[0].from))?;
    }
    assign_at(reader, servers, topic, &tpl)?;
    let started = Instant::now();
    let mut read = 0u64;
    while !reading.left.is_empty() {
        if cancel.is_cancelled() {
            anyhow::bail!("reading {topic} was cancelled ({read} messages read)");
        }
        if started.elapsed() > deadline {
            anyhow::bail!("kafka {servers}: reading the windows of {topic} took longer than {deadline:?} ({read} messages read)");
        }
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) if m.topic() != topic => {}
            Some(Ok(m)) => {
                let inside = reading.reached(reader, topic, m.partition(), Some(m.offset()))?;
                if inside {
                    read += 1;
                    each(&m);
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                reading.reached(reader, topic, p, None)?;
            }
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            None => {}
        }
    }
    Ok(read)
}

/// What is left to read of each partition, the stretch being read first.
struct Reading {
    left: BTreeMap<i32, VecDeque<Stretch>>,
    /// Per partition, the last offset read.
    last: BTreeMap<i32, i64>,
}

impl Reading {
    /// Partition `p` reached the message at `at`, or its end (`None`): whether the message is
    /// inside the stretch being read. A stretch is read once a message at or past its last
    /// offset is, or the partition's end: the reader goes on to the partition's next stretch —
    /// reading on when it starts where the reader is, else seeking — or pauses the partition.
    fn reached(
        &mut self,
        reader: &Reader,
        topic: &str,
        p: i32,
        at: Option<i64>,
    ) -> anyhow::Result<bool> {
        let Some(r) = self.left.get_mut(&p) else {
            return Ok(false);
        };
        let Some(&Stretch { to, .. }) = r.front() else {
            return Ok(false);
        };
        if let Some(o) = at {
            self.last.insert(p, o);
        }
        let inside = at.is_some_and(|o| o < to);
        if at.is_some_and(|o| o + 1 < to) {
            return Ok(inside);
        }
        r.pop_front();
        let next = self.last.get(&p).map_or(i64::MIN, |o| o + 1);
        match r.front() {
            Some(&Stretch { from, .. }) if from > next => {
                reader.seek(topic, p, Offset::Offset(from), KAFKA_TIMEOUT)?;
            }
            Some(_) => {}
            None => {
                self.left.remove(&p);
                set_aside(reader, topic, p)?;
            }
        }
        Ok(inside)
    }
}
