//! Reading a topic up to its end: where each partition starts ([`StartAt`]), the ends a reader
//! has to reach to be caught up ([`CatchUp`]), and the one-shot read to the high watermarks
//! seen when it began ([`read_to_end`]). The TUI's live tail catches up with the same
//! [`CatchUp`] before it follows the tail, so when a reader is caught up is decided once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::console::read::live::LiveStart;
use crate::console::read::topics::{assign_known, reader, watermarks, Reader, KAFKA_TIMEOUT};

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
    consumer: &Reader,
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

/// The end each partition of a read has to reach for the reader to be caught up with where the
/// topic ended when the read began. A partition leaves when a message at its end is read, or
/// when, the reader idle, its position has passed its end (an offset gap before the end, such
/// as a transaction marker). Caught up is every partition there AND one poll come back empty:
/// a broker whose high watermark lags its last records would stop a read at the ends alone
/// early; the idle poll says the reader has really caught up.
#[derive(Debug)]
pub struct CatchUp {
    /// Per partition not caught up yet, the offset after the last message it has to read.
    ends: BTreeMap<i32, i64>,
}

impl CatchUp {
    /// To the ends of `ranges` (partition, start, end); a partition with nothing between its
    /// start and its end has nothing to read.
    fn new(ranges: impl IntoIterator<Item = (i32, i64, i64)>) -> CatchUp {
        let ends = ranges
            .into_iter()
            .filter(|(_, start, end)| end > start)
            .map(|(p, _, end)| (p, end))
            .collect();
        CatchUp { ends }
    }

    /// Assigns every partition of `topic` (`marks`: partition, low, high) at its start
    /// ([`StartAt`]); caught up at the high watermarks.
    fn assign(
        consumer: &Reader,
        servers: &str,
        topic: &str,
        marks: &[(i32, i64, i64)],
        start: StartAt,
    ) -> anyhow::Result<CatchUp> {
        let tpl = start_offsets(consumer, topic, marks, start)?;
        assign_known(consumer, servers, topic, &tpl)?;
        let mut catch_up = CatchUp::new(marks.iter().copied());
        // Partitions whose start (by time) is already at the end have nothing to read.
        if let StartAt::Since(_) = start {
            for e in tpl.elements() {
                if e.offset() == Offset::End {
                    catch_up.ends.remove(&e.partition());
                }
            }
        }
        Ok(catch_up)
    }

    /// Assigns every partition of `topic` at its live start (its beginning when all of it is in
    /// the hour: the order partitions are read in then stays what it was before the live
    /// start); caught up at the ends the starts were found with.
    pub fn assign_live(
        consumer: &Reader,
        topic: &str,
        starts: &[LiveStart],
    ) -> anyhow::Result<CatchUp> {
        let mut tpl = TopicPartitionList::new();
        for s in starts {
            let at = if s.whole {
                Offset::Beginning
            } else {
                Offset::Offset(s.start)
            };
            tpl.add_partition_offset(topic, s.partition, at)?;
        }
        consumer
            .assign(&tpl)
            .map_err(|e| anyhow::anyhow!("kafka: assign {topic}: {e}"))?;
        Ok(CatchUp::new(
            starts.iter().map(|s| (s.partition, s.start, s.end)),
        ))
    }

    /// Every partition reached its end (caught up once a poll comes back empty).
    pub fn ends_reached(&self) -> bool {
        self.ends.is_empty()
    }

    /// The reader read `m`: its partition is there when `m` is the last message before its end.
    pub fn read(&mut self, m: &BorrowedMessage<'_>) {
        if self
            .ends
            .get(&m.partition())
            .is_some_and(|end| m.offset() + 1 >= *end)
        {
            self.ends.remove(&m.partition());
        }
    }

    /// A poll came back empty: a partition whose position already passed its end is there.
    /// True when every partition is: the reader has caught up.
    pub fn idle(&mut self, consumer: &Reader) -> bool {
        if let Ok(pos) = consumer.position() {
            for e in pos.elements() {
                if let Offset::Offset(o) = e.offset() {
                    if self.ends.get(&e.partition()).is_some_and(|end| o >= *end) {
                        self.ends.remove(&e.partition());
                    }
                }
            }
        }
        self.ends_reached()
    }
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
    let mut catch_up = CatchUp::assign(&consumer, servers, topic, &marks, start)?;
    let started = Instant::now();
    let mut read = 0u64;
    let mut caught_up = false;
    while !caught_up {
        if cancel.is_cancelled() {
            anyhow::bail!("reading {topic} was cancelled ({read} messages read)");
        }
        if started.elapsed() > deadline {
            anyhow::bail!("kafka {servers}: reading {topic} took longer than {deadline:?} ({read} messages read)");
        }
        let wait = if catch_up.ends_reached() { 300 } else { 200 };
        match consumer.poll(Duration::from_millis(wait)) {
            Some(Ok(m)) => {
                read += 1;
                each(&m);
                catch_up.read(&m);
            }
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            None => caught_up = catch_up.idle(&consumer),
        }
    }
    Ok(read)
}
