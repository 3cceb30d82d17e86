//! What a read of one topic plan covers on the topic as it is: the partitions (the traced keys',
//! under the profile's partitioner — every partition when the messages scanned say the producer
//! did not place them by key, [`ShortcutCheck`]) and, in each, the stretches of offsets its
//! windows span ([`stretches`]): from the first offset at or after a window's start to the first
//! after its end, both asked of the [`OffsetsAtTime`].

use std::cell::Cell;
use std::collections::BTreeMap;

use rdkafka::message::BorrowedMessage;
use rdkafka::Message;

use super::offsets::{Ask, OffsetsAtTime};
use crate::console::read::messages::trace_event_of;
use crate::console::read::window::{merge_ranges, TimeWindow};
use crate::stream::partitioner::Partitioner;

/// A partition of at most this many offsets is read whole by a trace (which keeps only what
/// names its IDs): reading it costs less than asking where its windows are.
pub const READ_WHOLE_UP_TO: i64 = 512;

/// A partition to read: its id, first offset and the offset after its last message.
pub type Watermarks = (i32, i64, i64);

/// Offsets `[from, to)` of one partition to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stretch {
    pub from: i64,
    pub to: i64,
}

/// The stretches of `windows` in each partition of `parts`, merged where they meet; empty ones
/// left out. A trace's read (`whole_if_small`) of partitions all small enough reads them whole
/// and asks nothing.
pub fn stretches(
    offsets: &mut impl OffsetsAtTime,
    parts: &[Watermarks],
    windows: &[TimeWindow],
    whole_if_small: bool,
) -> anyhow::Result<BTreeMap<i32, Vec<Stretch>>> {
    let small = |&(_, low, end): &Watermarks| end - low <= READ_WHOLE_UP_TO;
    let mut ranges: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    if whole_if_small && parts.iter().all(small) {
        for &(p, low, end) in parts {
            ranges.entry(p).or_default().push((low, end));
        }
    } else {
        for w in windows {
            let asks: Vec<Ask> = parts
                .iter()
                .map(|&(partition, low, end)| Ask {
                    partition,
                    low,
                    end,
                    ms: w.from_ms,
                })
                .collect();
            let starts = offsets.first_at_or_after(&asks)?;
            let asks: Vec<Ask> = asks
                .iter()
                .zip(&starts)
                .map(|(a, &from)| Ask {
                    low: from,
                    ms: w.to_ms.saturating_add(1),
                    ..*a
                })
                .collect();
            let stops = offsets.first_at_or_after(&asks)?;
            for ((a, from), to) in asks.iter().zip(starts).zip(stops) {
                ranges.entry(a.partition).or_default().push((from, to));
            }
        }
    }
    let merged = ranges.into_iter().map(|(p, r)| {
        let r = merge_ranges(r).into_iter();
        (
            p,
            r.map(|(from, to)| Stretch { from, to }).collect::<Vec<_>>(),
        )
    });
    Ok(merged.filter(|(_, r)| !r.is_empty()).collect())
}

/// What the messages a trace scans say of the partition shortcut (the traced keys' partitions
/// only): a message without a key, or whose key the partitioner puts elsewhere, was not placed
/// the way the shortcut assumes — the trace's own copies may be in another partition.
#[derive(Default)]
pub struct ShortcutCheck {
    scanned: Cell<u64>,
    unkeyed: Cell<u64>,
    misplaced: Cell<u64>,
}

impl ShortcutCheck {
    pub fn see(&self, partitioner: Partitioner, partitions: i32, m: &BorrowedMessage<'_>) {
        let count = |c: &Cell<u64>| c.set(c.get() + 1);
        count(&self.scanned);
        match m.key().filter(|k| !k.is_empty()) {
            // idemguard's own trace event without an ID (keyed by none) belongs to no trace.
            None if trace_event_of(m).is_some_and(|e| e.key().is_none()) => {}
            None => count(&self.unkeyed),
            Some(k) if partitioner.partition_of(k, partitions) != Some(m.partition()) => {
                count(&self.misplaced)
            }
            Some(_) => {}
        }
    }

    /// Why every partition must be read, if the messages scanned say so.
    pub fn failed(&self, partitioner: Partitioner, read: &[i32]) -> Option<String> {
        let (n, unkeyed, misplaced) =
            (self.scanned.get(), self.unkeyed.get(), self.misplaced.get());
        if unkeyed > 0 {
            Some(format!(
                "{unkeyed} of {n} message(s) scanned in partition(s) {read:?} have no key, so the producer did not choose their partition by key: this trace's messages may be in any partition"
            ))
        } else if misplaced > 0 {
            Some(format!(
                "{misplaced} of {n} message(s) scanned in partition(s) {read:?} have keys that {} (kafka.partitioner) puts in another partition: the producer partitions otherwise (`idemguard doctor` shows each topic's observed partitioning)",
                partitioner.name()
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets at a time answered from a table of each partition's timestamps, by offset.
    struct Table(BTreeMap<i32, Vec<i64>>, u32);

    impl OffsetsAtTime for Table {
        fn first_at_or_after(&mut self, asks: &[Ask]) -> anyhow::Result<Vec<i64>> {
            self.1 += 1;
            Ok(asks
                .iter()
                .map(|a| {
                    let ts = &self.0[&a.partition];
                    let first = ts.partition_point(|t| *t < a.ms) as i64;
                    first.clamp(a.low, a.end)
                })
                .collect())
        }
    }

    /// Each window is read from its first message to the first after it; windows that meet
    /// are one stretch; a partition without a message in the windows is not read.
    #[test]
    fn a_window_is_read_from_its_first_message_to_the_first_past_it() {
        let ts: Vec<i64> = (0..1_000).map(|o| o * 10).collect();
        let quiet: Vec<i64> = (0..1_000).map(|o| 1_000_000 + o).collect();
        let mut table = Table(BTreeMap::from([(0, ts), (1, quiet)]), 0);
        let parts = [(0, 0, 1_000), (1, 0, 1_000)];
        let w = |from_ms, to_ms| TimeWindow { from_ms, to_ms };
        let windows = [w(1_000, 2_000), w(2_001, 3_000), w(5_005, 5_100)];
        let got = stretches(&mut table, &parts, &windows, true).unwrap();
        let s = |from, to| Stretch { from, to };
        assert_eq!(got, BTreeMap::from([(0, vec![s(100, 301), s(501, 511)])]));
        // Two questions a window: its start, its stop.
        assert_eq!(table.1, 6);
    }

    #[test]
    fn small_partitions_are_read_whole_by_a_trace_only() {
        let ts: Vec<i64> = (0..100).map(|o| o * 10).collect();
        let mut table = Table(BTreeMap::from([(0, ts)]), 0);
        let windows = [TimeWindow {
            from_ms: 200,
            to_ms: 300,
        }];
        let got = stretches(&mut table, &[(0, 0, 100)], &windows, true).unwrap();
        assert_eq!(got[&0], [Stretch { from: 0, to: 100 }]);
        assert_eq!(table.1, 0, "nothing asked");
        let got = stretches(&mut table, &[(0, 0, 100)], &windows, false).unwrap();
        assert_eq!(got[&0], [Stretch { from: 20, to: 31 }]);
    }
}
