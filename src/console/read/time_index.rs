//! What earlier reads of a partition learned of its offsets by time: the (offset, timestamp) of
//! the messages the offset probes and the window scans met, kept for the process (the console
//! runs for hours, and each trace's probes leave anchors for the next one's search).
//!
//! The index is a hint, never an answer: a [`Seek`](super::seek::Seek) uses its points only to
//! choose where to probe ([`Seek::anchored`](super::seek::Seek::anchored)), and only what a probe
//! of the broker answers narrows the range. A stale point (a topic deleted and created again
//! under the same name, a partition truncated) costs a probe or two, never a wrong window; a
//! probe that contradicts a point drops the partition's points ([`TimeIndex::learn`]).
//!
//! Bounded: at most [`POINTS_PER_PARTITION`] points for each of [`PARTITIONS`] partitions (the
//! least recently used forgotten first), ~16 bytes a point: a few MB at most.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

/// Points kept per partition; past it every second one is dropped (the index stays spread over
/// the partition's whole time, only coarser).
pub const POINTS_PER_PARTITION: usize = 1024;

/// Partitions indexed at once (brokers × topics × partitions); the least recently used goes.
pub const PARTITIONS: usize = 256;

/// A scan of a window records one message in this many (and each range's first): anchors a few
/// dozen offsets apart, so a second trace of the same time finds its bounds in two probes.
pub const SCAN_SAMPLE: i64 = 64;

/// How long brokers whose `offsets_for_times` answer failed its check are not asked again (a
/// lookup saves the question and the probe that checks its answer; asked again after this, in
/// case the brokers changed).
pub const BROKER_RECHECK: std::time::Duration = std::time::Duration::from_secs(600);

/// Which partition: the brokers (`bootstrap.servers`), the topic, the partition.
pub type PartitionKey = (String, String, i32);

#[derive(Default)]
struct Partition {
    /// offset → timestamp, epoch ms.
    points: BTreeMap<i64, i64>,
    used: u64,
}

/// The process's index (see the module docs).
#[derive(Default)]
pub struct TimeIndex {
    parts: Mutex<HashMap<PartitionKey, Partition>>,
    tick: std::sync::atomic::AtomicU64,
    /// Brokers (`bootstrap.servers`) whose `offsets_for_times` answer failed its check, and when.
    untruthful: Mutex<HashMap<String, std::time::Instant>>,
}

/// The index every read of the process shares.
pub fn shared() -> &'static TimeIndex {
    static INDEX: OnceLock<TimeIndex> = OnceLock::new();
    INDEX.get_or_init(TimeIndex::default)
}

impl TimeIndex {
    /// The points known in `[low, end)` of a partition, oldest offset first.
    pub fn points(&self, key: &PartitionKey, low: i64, end: i64) -> Vec<(i64, i64)> {
        let mut parts = self.parts.lock().expect("time index");
        let tick = self.next_tick();
        let Some(p) = parts.get_mut(key) else {
            return Vec::new();
        };
        p.used = tick;
        p.points
            .range(low..end.max(low))
            .map(|(o, t)| (*o, *t))
            .collect()
    }

    /// Adds what the broker answered: messages `(offset, timestamp)` of the partition, whose end
    /// is `end`. A message that contradicts a point (another timestamp at its offset, or a point
    /// past the end: the topic was created again, or truncated) drops every point first.
    pub fn learn(&self, key: &PartitionKey, end: i64, seen: &[(i64, i64)]) {
        if seen.is_empty() {
            return;
        }
        let mut parts = self.parts.lock().expect("time index");
        let tick = self.next_tick();
        if !parts.contains_key(key) && parts.len() >= PARTITIONS {
            let oldest = parts
                .iter()
                .min_by_key(|(_, p)| p.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                parts.remove(&k);
            }
        }
        let p = parts.entry(key.clone()).or_default();
        p.used = tick;
        let contradicted = p.points.range(end..).next().is_some()
            || seen
                .iter()
                .any(|(o, t)| p.points.get(o).is_some_and(|known| known != t));
        if contradicted {
            p.points.clear();
        }
        p.points.extend(seen.iter().copied());
        while p.points.len() > POINTS_PER_PARTITION {
            let every_second: Vec<i64> = p.points.keys().copied().skip(1).step_by(2).collect();
            for o in every_second {
                p.points.remove(&o);
            }
        }
    }

    /// Whether the brokers `servers` answered `offsets_for_times` falsely within
    /// [`BROKER_RECHECK`].
    pub fn broker_untruthful(&self, servers: &str) -> bool {
        let known = self.untruthful.lock().expect("time index");
        known
            .get(servers)
            .is_some_and(|at| at.elapsed() < BROKER_RECHECK)
    }

    /// The brokers `servers` answered `offsets_for_times` falsely just now.
    pub fn note_untruthful(&self, servers: &str) {
        let mut known = self.untruthful.lock().expect("time index");
        known.retain(|_, at| at.elapsed() < BROKER_RECHECK);
        known.insert(servers.to_string(), std::time::Instant::now());
    }

    fn next_tick(&self) -> u64 {
        self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartitionKey {
        ("b:9092".into(), "t".into(), p)
    }

    #[test]
    fn a_contradicting_message_or_a_shorter_partition_drops_the_points() {
        let index = TimeIndex::default();
        index.learn(&key(0), 100, &[(10, 1_000), (50, 5_000)]);
        assert_eq!(index.points(&key(0), 0, 100), [(10, 1_000), (50, 5_000)]);
        assert_eq!(index.points(&key(0), 20, 100), [(50, 5_000)]);
        // The same offset with another time: the topic is not the one indexed.
        index.learn(&key(0), 100, &[(10, 9_000)]);
        assert_eq!(index.points(&key(0), 0, 100), [(10, 9_000)]);
        // A partition that now ends before a point.
        index.learn(&key(0), 5, &[(1, 1)]);
        assert_eq!(index.points(&key(0), 0, 100), [(1, 1)]);
    }

    #[test]
    fn an_untruthful_broker_is_remembered_by_its_servers() {
        let index = TimeIndex::default();
        assert!(!index.broker_untruthful("b:9092"));
        index.note_untruthful("b:9092");
        assert!(index.broker_untruthful("b:9092"));
        assert!(!index.broker_untruthful("c:9092"));
    }

    #[test]
    fn the_index_stays_bounded() {
        let index = TimeIndex::default();
        for p in 0..(PARTITIONS as i32 + 10) {
            let seen: Vec<_> = (0..3 * POINTS_PER_PARTITION as i64)
                .map(|o| (o, o))
                .collect();
            index.learn(&key(p), i64::MAX, &seen);
        }
        let parts = index.parts.lock().unwrap();
        assert_eq!(parts.len(), PARTITIONS);
        assert!(parts
            .values()
            .all(|p| p.points.len() <= POINTS_PER_PARTITION));
        // Spread over the whole partition still.
        let last = parts.values().next().unwrap().points.keys().last().copied();
        assert!(last.unwrap() > 2 * POINTS_PER_PARTITION as i64);
    }
}
