//! Reading a trace's windows of a topic ([`read_windows`] and its kin): the windows' offset
//! ranges found by time ([`OffsetLookup`]), then only those read, in the partitions of the
//! traced keys — widened to every partition when the messages scanned say the producer did not
//! partition by key ([`ShortcutCheck`]). What to read is planned in
//! [`window`](super::window); this is the reading of it, and what it cost.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::console::read::messages::trace_event_of;
use crate::console::read::offset_lookup::OffsetLookup;
use crate::console::read::seek::WINDOW_SHARE;
use crate::console::read::time_index;
use crate::console::read::topics::{
    assign_known, let_go, probe_reader, watermarks, Fetch, Reader, KAFKA_TIMEOUT,
};

/// Reads `plan`'s windows of its topic, in the partitions of its keys (blocking: run it on a
/// blocking thread): `each` gets every message of every window. Bounded by `deadline` and ends
/// within one poll of `cancel`, like [`read_to_end`](super::catch_up::read_to_end).
pub fn read_windows(
    config: &Config,
    plan: &crate::console::read::window::TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    each: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<crate::console::read::window::TopicCost> {
    read_windows_when(config, plan, deadline, cancel, || each)
}

/// [`read_windows`], its windows found first and `each` asked for only then: a read that can
/// find its offsets before it knows what to keep (the trace topic's, while the payment topic
/// is read) waits in `ready`. The wait is the cost's `wait_ms` and does not count against
/// `deadline`.
pub fn read_windows_when<F: FnMut(&BorrowedMessage<'_>)>(
    config: &Config,
    plan: &crate::console::read::window::TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    ready: impl FnOnce() -> F,
) -> anyhow::Result<crate::console::read::window::TopicCost> {
    let readers = WindowReaders::new(config, 1)?;
    read_windows_with(&readers, config, plan, deadline, cancel, ready)
}

/// The readers of a trace's offset probes, one for each topic whose windows are looked up at
/// the same time: a topic's lookup borrows one ([`WindowReaders::lend`]) and gives it back, so
/// topics read one after the other share it (one probing client's connections), and topics read
/// at once probe in parallel (against one reader the topics took turns on, a trace of the
/// bench's 20,000,000-event topics went from p50 375 to 317–351 ms, BENCHMARKS.md). A lookup
/// that probes several partitions borrows a second, made then, and each of its rounds is
/// fetched by both at once ([`OffsetLookup::probing_also`]): a client more, whose connections
/// (over TLS, their handshakes) only such a trace pays. Each topic's scan keeps a reader of its
/// own: a scanner handed from one topic to the next was measured to read nothing of the second
/// for its whole idle wait. Never kept past the read that made them: a client that outlives a
/// topic it read crashes librdkafka when the topic is deleted (its metadata cache).
pub struct WindowReaders {
    /// Made when the trace's reads start, one for each topic read at once; lent out one a topic.
    idle: Mutex<Vec<Reader>>,
}

impl WindowReaders {
    /// `topics_at_once` readers, made now.
    pub fn new(config: &Config, topics_at_once: usize) -> anyhow::Result<WindowReaders> {
        let readers = (0..topics_at_once.max(1))
            .map(|_| probe_reader(config, Fetch::OneBatch))
            .collect::<anyhow::Result<_>>()?;
        Ok(WindowReaders {
            idle: Mutex::new(readers),
        })
    }

    /// An idle reader, or a new one when every reader is lent: given back when the loan ends.
    fn lend(&self, config: &Config) -> anyhow::Result<Lent<'_>> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let reader = match idle {
            Some(r) => r,
            None => probe_reader(config, Fetch::OneBatch)?,
        };
        Ok(Lent {
            from: self,
            reader: Some(reader),
        })
    }
}

impl Drop for WindowReaders {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(|e| e.into_inner());
        for r in idle.drain(..) {
            let_go(r);
        }
    }
}

/// A probe reader lent to one topic's lookup.
struct Lent<'a> {
    from: &'a WindowReaders,
    /// Always there until the loan ends.
    reader: Option<Reader>,
}

impl Lent<'_> {
    fn reader(&self) -> &Reader {
        self.reader
            .as_ref()
            .expect("a lent reader is there until given back")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.reader.take() {
            let mut idle = self.from.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.push(r);
        }
    }
}

/// [`read_windows_when`] with `readers` (a trace's, shared by its topics).
pub fn read_windows_with<F: FnMut(&BorrowedMessage<'_>)>(
    readers: &WindowReaders,
    config: &Config,
    plan: &crate::console::read::window::TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    ready: impl FnOnce() -> F,
) -> anyhow::Result<crate::console::read::window::TopicCost> {
    use crate::console::read::window::{ReadTimes, TopicCost};
    let servers = &config.kafka.bootstrap_servers;
    let topic = plan.topic.as_str();
    let started = Instant::now();
    let lent = readers.lend(config)?;
    let consumer = lent.reader();
    // Created now, so that it is connected by the time the windows are found.
    let scanner = probe_reader(config, Fetch::Windows)?;
    let marks = watermarks(consumer, servers, topic)?;
    let read_all: Vec<i32> = marks.iter().map(|(p, _, _)| *p).collect();
    let partitions = plan.partitions(marks.len() as i32).unwrap_or(read_all);
    let lent_too = (partitions.len() > 1)
        .then(|| readers.lend(config))
        .transpose()?;
    let mut lookup = OffsetLookup::new(consumer, servers, topic, cancel);
    if let Some(second) = &lent_too {
        lookup = lookup.probing_also(second.reader());
    }
    let of_plan: Vec<_> = marks
        .iter()
        .filter(|(p, _, _)| partitions.contains(p))
        .copied()
        .collect();
    let ends = lookup.ends_unless_learned(&of_plan, plan.selects_by_id())?;
    let looking = Instant::now();
    let ranges = window_ranges(&mut lookup, &ends, &plan.windows, plan.selects_by_id())?;
    let mut times = ReadTimes {
        lookup_ms: looking.elapsed().as_millis() as u64,
        ..ReadTimes::default()
    };
    // Everything before the scan that was not a probe: reader, metadata, watermarks, ends.
    times.setup_ms = (started.elapsed().as_millis() as u64).saturating_sub(times.lookup_ms);
    let waiting = Instant::now();
    let mut each = ready();
    let waited = waiting.elapsed();
    times.wait_ms = waited.as_millis() as u64;
    let scanning = Instant::now();
    let left = deadline.saturating_sub(started.elapsed().saturating_sub(waited));
    let scan = Scan {
        scanner: &scanner,
        servers,
        topic,
        cancel,
    };
    let (scanned, partitions, widened) = scan.checked(
        &mut lookup,
        plan,
        &marks,
        partitions,
        &ranges,
        left,
        &mut each,
    )?;
    times.scan_ms = scanning.elapsed().as_millis() as u64;
    let_go(scanner);
    lookup.remember(&lookup.reached(&ends));
    Ok(TopicCost {
        topic: topic.to_string(),
        basis: plan.basis,
        windows: plan.windows.clone(),
        partitions_total: marks.len(),
        partitions_widened: widened,
        partitions_read: partitions,
        offset_lookup: match lookup.broker_truthful {
            Some(true) => "offsets_for_times",
            Some(false) => "interpolation_search",
            None => "read_whole",
        },
        offset_probes: lookup.probes,
        messages_scanned: scanned,
        times,
    })
}

/// Where a trace's windows are read.
struct Scan<'a> {
    /// The topic's own reader.
    scanner: &'a Reader,
    servers: &'a str,
    topic: &'a str,
    cancel: &'a CancellationToken,
}

impl Scan<'_> {
    /// Reads `ranges` of `partitions`, checking the shortcut on what it scans ([`ShortcutCheck`]);
    /// when it does not hold, the same windows in every other partition too. Returns the
    /// messages scanned, the partitions read and why they were widened.
    #[allow(clippy::too_many_arguments)]
    fn checked(
        &self,
        lookup: &mut OffsetLookup<'_>,
        plan: &crate::console::read::window::TopicPlan,
        marks: &[(i32, i64, i64)],
        partitions: Vec<i32>,
        ranges: &BTreeMap<i32, Vec<Stretch>>,
        deadline: Duration,
        each: &mut impl FnMut(&BorrowedMessage<'_>),
    ) -> anyhow::Result<(u64, Vec<i32>, Option<String>)> {
        let started = Instant::now();
        let check = ShortcutCheck::default();
        let sampled = std::cell::RefCell::new(Vec::new());
        let mut checked = |m: &BorrowedMessage<'_>| {
            check.see(plan.partitioner, marks.len() as i32, m);
            // Every message scanned is what a probe at its offset would read: a few become
            // anchors for the next search of this time.
            if m.offset() % time_index::SCAN_SAMPLE == 0 {
                let ts = m.timestamp().to_millis().unwrap_or(0);
                sampled.borrow_mut().push((m.partition(), m.offset(), ts));
            }
            each(m)
        };
        let (scanner, servers, topic) = (self.scanner, self.servers, self.topic);
        let mut scanned = read_ranges(
            scanner,
            servers,
            topic,
            ranges,
            deadline,
            self.cancel,
            &mut checked,
        )?;
        lookup.saw(sampled.take());
        let widened = (partitions.len() < marks.len())
            .then(|| check.failed(plan.partitioner, &partitions))
            .flatten();
        if widened.is_none() {
            return Ok((scanned, partitions, None));
        }
        let others: Vec<_> = marks
            .iter()
            .filter(|(p, _, _)| !partitions.contains(p))
            .copied()
            .collect();
        let ends = lookup.ends_unless_learned(&others, plan.selects_by_id())?;
        let more = window_ranges(lookup, &ends, &plan.windows, plan.selects_by_id())?;
        let left = deadline.saturating_sub(started.elapsed());
        scanned += read_ranges(
            scanner,
            servers,
            topic,
            &more,
            left,
            self.cancel,
            &mut checked,
        )?;
        lookup.saw(sampled.take());
        Ok((scanned, marks.iter().map(|(p, _, _)| *p).collect(), widened))
    }
}

/// What the messages a trace scans say of the partition shortcut (the traced keys' partitions
/// only): a message without a key, or whose key the partitioner puts elsewhere, was not placed
/// the way the shortcut assumes — the trace's own copies may be in another partition.
#[derive(Default)]
struct ShortcutCheck {
    scanned: std::cell::Cell<u64>,
    unkeyed: std::cell::Cell<u64>,
    misplaced: std::cell::Cell<u64>,
}

impl ShortcutCheck {
    fn see(
        &self,
        partitioner: crate::stream::partitioner::Partitioner,
        partitions: i32,
        m: &BorrowedMessage<'_>,
    ) {
        self.scanned.set(self.scanned.get() + 1);
        match m.key().filter(|k| !k.is_empty()) {
            // idemguard's own trace event without an ID (keyed by none) belongs to no trace.
            None if trace_event_of(m).is_some_and(|e| e.key().is_none()) => {}
            None => self.unkeyed.set(self.unkeyed.get() + 1),
            Some(k) if partitioner.partition_of(k, partitions) != Some(m.partition()) => {
                self.misplaced.set(self.misplaced.get() + 1)
            }
            Some(_) => {}
        }
    }

    /// Why every partition must be read, if the messages scanned say so.
    fn failed(
        &self,
        partitioner: crate::stream::partitioner::Partitioner,
        read: &[i32],
    ) -> Option<String> {
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

/// A stretch of one partition to read: offsets `[from, to)` — and, for a trace's window, only
/// until its messages are past `until_ms` ([`PAST_THE_WINDOW`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stretch {
    from: i64,
    to: i64,
    until_ms: Option<i64>,
}

/// A trace's window is read until a run of messages in a row is stamped past its end: where it
/// stops is read, not searched (a search for it cost two rounds of probes of every partition
/// read). A run, not the first such message, so that one message stamped late (a producer's
/// clock ahead) does not end the read early: an eighth of the messages the stretch read inside
/// the window (the share a searched bound is left unresolved within,
/// [`WINDOW_SHARE`](super::seek::WINDOW_SHARE)), at least 1 and at most this many — well under
/// a millisecond of scanning.
const PAST_THE_WINDOW: i64 = 64;

/// The stretches of `windows` in each partition of `ends` (partition, low, end). With
/// `past_edges` (a trace's windows) each window's start is left unresolved within a few hundred
/// offsets ([`Seek::scanning`](super::seek::Seek::scanning)) and read from the lower end, and
/// its stop is not searched: the read goes on until the messages are past the window
/// ([`Stretch::until_ms`]). The read gets every message of the window and a few of either
/// side. Without, the stretches are exact: each window's start in every partition together,
/// then its stop, merged per partition.
fn window_ranges(
    lookup: &mut OffsetLookup<'_>,
    ends: &[(i32, i64, i64)],
    windows: &[crate::console::read::window::TimeWindow],
    past_edges: bool,
) -> anyhow::Result<BTreeMap<i32, Vec<Stretch>>> {
    use crate::console::read::window::merge_ranges;
    let mut of_p: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    let mut timed: BTreeMap<i32, Vec<Stretch>> = BTreeMap::new();
    for w in windows {
        let window_ms = if past_edges { w.to_ms - w.from_ms } else { 0 };
        let asks: Vec<_> = ends
            .iter()
            .map(|&(p, low, end)| (p, low, end, w.from_ms))
            .collect();
        let starts = lookup.first_at_or_after(&asks, window_ms)?;
        if past_edges {
            // Up to the partition's end, whatever its listed one (a broker's may lag): the read
            // learns it as it reaches it.
            for (&(p, _, _), (from, _)) in ends.iter().zip(starts) {
                let until_ms = Some(w.to_ms);
                let s = Stretch {
                    from,
                    to: i64::MAX,
                    until_ms,
                };
                timed.entry(p).or_default().push(s);
            }
            continue;
        }
        let asks: Vec<_> = ends
            .iter()
            .zip(&starts)
            .map(|(&(p, _, end), &(s, _))| (p, s, end, w.to_ms.saturating_add(1)))
            .collect();
        let stops = lookup.first_at_or_after(&asks, window_ms)?;
        for ((&(p, _, _), (s, _)), (_, e)) in ends.iter().zip(starts).zip(stops) {
            of_p.entry(p).or_default().push((s, e));
        }
    }
    lookup.rest()?;
    let exact = of_p.into_iter().map(|(p, r)| {
        let merged = merge_ranges(r).into_iter();
        let stretches = merged.map(|(from, to)| Stretch {
            from,
            to,
            until_ms: None,
        });
        (p, stretches.collect())
    });
    Ok(exact
        .chain(timed)
        .filter(|(_, r): &(i32, Vec<Stretch>)| !r.is_empty())
        .collect())
}

/// Reads the stretches of each partition, every partition at once (one fetch request serves
/// them all), each partition's stretches in order; how many messages were read. A partition
/// whose stretches are read is paused: its reader must not fetch on.
fn read_ranges(
    consumer: &Reader,
    servers: &str,
    topic: &str,
    ranges: &BTreeMap<i32, Vec<Stretch>>,
    deadline: Duration,
    cancel: &CancellationToken,
    each: &mut impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<u64> {
    let mut left = Left::new(ranges);
    let mut tpl = TopicPartitionList::new();
    for (p, r) in &left.stretches {
        tpl.add_partition_offset(topic, *p, Offset::Offset(r[0].from))?;
    }
    assign_known(consumer, servers, topic, &tpl)?;
    let started = Instant::now();
    let mut read = 0u64;
    let mut idle_since: Option<Instant> = None;
    while !left.stretches.is_empty() {
        if cancel.is_cancelled() {
            anyhow::bail!("reading {topic} was cancelled ({read} messages read)");
        }
        if started.elapsed() > deadline {
            anyhow::bail!("kafka {servers}: reading the windows of {topic} took longer than {deadline:?} ({read} messages read)");
        }
        let finished = match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) if m.topic() != topic => None,
            Some(Ok(m)) => {
                idle_since = None;
                let (kept, finished) = left.see(&m);
                if kept {
                    read += 1;
                    each(&m);
                }
                finished.then_some(m.partition())
            }
            Some(Err(KafkaError::PartitionEOF(p))) => Some(p),
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            // Caught up before `end` (a window that reaches the end of the partition, or a
            // broker whose watermark overstates it): done after a quiet half second.
            None => {
                if idle_since.get_or_insert_with(Instant::now).elapsed()
                    > Duration::from_millis(500)
                {
                    return Ok(read);
                }
                None
            }
        };
        if let Some(p) = finished {
            left.next(consumer, topic, p)?;
        }
    }
    Ok(read)
}

/// What is left to read of each partition, the stretch being read first.
struct Left {
    stretches: BTreeMap<i32, VecDeque<Stretch>>,
    /// Per partition, where the run of messages past the window being read began.
    past_since: BTreeMap<i32, i64>,
    /// Per partition, the messages of the stretch being read that were inside its window.
    inside: BTreeMap<i32, i64>,
    /// Per partition, the last offset read.
    last: BTreeMap<i32, i64>,
}

impl Left {
    fn new(ranges: &BTreeMap<i32, Vec<Stretch>>) -> Left {
        Left {
            stretches: ranges
                .iter()
                .map(|(p, r)| (*p, r.iter().copied().collect()))
                .collect(),
            past_since: BTreeMap::new(),
            inside: BTreeMap::new(),
            last: BTreeMap::new(),
        }
    }

    /// Whether `m` is to be kept, and whether its partition's stretch is read with it.
    fn see(&mut self, m: &BorrowedMessage<'_>) -> (bool, bool) {
        let (p, o) = (m.partition(), m.offset());
        let Some(s) = self.stretches.get(&p).and_then(|r| r.front()) else {
            return (false, false);
        };
        if o >= s.to {
            return (false, true);
        }
        self.last.insert(p, o);
        let ts = m.timestamp().to_millis();
        let past = match (s.until_ms, ts) {
            (Some(until), Some(ts)) if ts > until => {
                let inside = self.inside.get(&p).copied().unwrap_or(0);
                let run = (inside / WINDOW_SHARE).clamp(1, PAST_THE_WINDOW);
                o - *self.past_since.entry(p).or_insert(o) + 1 >= run
            }
            _ => {
                self.past_since.remove(&p);
                *self.inside.entry(p).or_default() += 1;
                false
            }
        };
        (true, past || o + 1 >= s.to)
    }

    /// Partition `p` finished its stretch: on to its next one — read on from where it is when
    /// that one starts at or before it (windows whose offsets meet), else from its start — or
    /// paused when it has none.
    fn next(&mut self, consumer: &Reader, topic: &str, p: i32) -> anyhow::Result<()> {
        let Some(r) = self.stretches.get_mut(&p) else {
            return Ok(());
        };
        r.pop_front();
        self.past_since.remove(&p);
        self.inside.remove(&p);
        let at = self.last.get(&p).map_or(i64::MIN, |o| o + 1);
        if let Some(&Stretch { from, .. }) = r.front() {
            if from > at {
                consumer.seek(topic, p, Offset::Offset(from), KAFKA_TIMEOUT)?;
            }
        } else {
            self.stretches.remove(&p);
            let mut one = TopicPartitionList::new();
            one.add_partition(topic, p);
            consumer.pause(&one)?;
        }
        Ok(())
    }
}
