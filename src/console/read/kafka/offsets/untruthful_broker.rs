//! For a broker whose time index answers falsely: some Kafka-compatible brokers answer
//! ListOffsets-by-timestamp with offset 0 whatever the time. A read checks the broker's answers
//! against the messages on both sides of them ([`BrokerCheck`], one round of probes per side,
//! every partition in one fetch) until one check has looked at both sides of an answer; from
//! then on the read believes the broker. An answer that fails the check makes the read search
//! for its offsets instead ([`Search`]: interpolation over the timestamps of the messages
//! probed, bisection where they are uneven), whatever the broker says — slower (a bound costs
//! ~10 probe rounds on a partition of millions of messages), never wrong.

use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::{Ask, BrokerTimeIndex, OffsetsAtTime};
use crate::console::read::topics::{assign_at, set_aside, Reader};

/// How long one round of probes (the message at one offset of each partition) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a probe answered: the first message at or after its offset (offset, timestamp), or
/// none there.
type Probed = Option<(i64, i64)>;

/// What this read knows of the broker's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// No check has looked at both sides of an answer yet.
    Unproven,
    Truthful,
    /// An answer failed its check (or the broker could not answer): searched from then on.
    Untruthful,
}

/// The broker's time index, checked, with a search where it answers falsely.
pub struct Checked<'a> {
    broker: BrokerTimeIndex<'a>,
    verdict: Verdict,
    asked: bool,
    probes: u64,
    cancel: CancellationToken,
}

impl<'a> Checked<'a> {
    pub fn new(broker: BrokerTimeIndex<'a>, cancel: &CancellationToken) -> Self {
        Checked {
            broker,
            verdict: Verdict::Unproven,
            asked: false,
            probes: 0,
            cancel: cancel.clone(),
        }
    }

    /// One probe per partition, fetched together: for each (partition, offset), the offset and
    /// timestamp of the first message at or after the offset; `None` when there is none (the
    /// reader reports the partition's end). An offset below the partition's end always has a
    /// message, so a round that gets nothing within [`PROBE_TIMEOUT`] is an error, never a
    /// guess.
    fn probe_round(&mut self, probes: &[(i32, i64)]) -> anyhow::Result<Vec<Probed>> {
        self.probes += probes.len() as u64;
        let (reader, servers, topic) = (self.broker.reader, self.broker.servers, self.broker.topic);
        probe_round(reader, servers, topic, probes)
    }

    /// The broker's answers to `asks` when they check out; `None` when one does not, or the
    /// broker could not answer.
    fn believed(&mut self, asks: &[Ask]) -> anyhow::Result<Option<Vec<i64>>> {
        let Ok(answers) = self.broker.first_at_or_after(asks) else {
            return Ok(None);
        };
        if self.verdict == Verdict::Truthful {
            return Ok(Some(answers));
        }
        let check = BrokerCheck::new(asks, answers);
        let proves = check.looks_at_both_sides();
        let held = check.verdict(|probes| self.probe_round(probes))?;
        if held.is_some() && proves {
            self.verdict = Verdict::Truthful;
        }
        Ok(held)
    }

    /// `asks` searched, every partition probed in each round.
    fn search(&mut self, asks: &[Ask]) -> anyhow::Result<Vec<i64>> {
        let mut searches: Vec<Search> = asks.iter().map(Search::new).collect();
        loop {
            if self.cancel.is_cancelled() {
                anyhow::bail!(
                    "reading {} was cancelled (finding its windows)",
                    self.broker.topic
                );
            }
            let round: Vec<(usize, i32, i64)> = searches
                .iter_mut()
                .zip(asks)
                .enumerate()
                .filter_map(|(i, (s, a))| s.next_probe().map(|at| (i, a.partition, at)))
                .collect();
            if round.is_empty() {
                break;
            }
            let probes: Vec<(i32, i64)> = round.iter().map(|&(_, p, at)| (p, at)).collect();
            let answers = self.probe_round(&probes)?;
            for (&(i, _, at), got) in round.iter().zip(answers) {
                searches[i].answer(at, got);
            }
        }
        Ok(searches.iter().filter_map(Search::found).collect())
    }
}

impl OffsetsAtTime for Checked<'_> {
    fn first_at_or_after(&mut self, asks: &[Ask]) -> anyhow::Result<Vec<i64>> {
        self.asked = true;
        if self.verdict != Verdict::Untruthful {
            if let Some(answers) = self.believed(asks)? {
                return Ok(answers);
            }
            self.verdict = Verdict::Untruthful;
        }
        self.search(asks)
    }

    fn found_by(&self) -> Option<&'static str> {
        match (self.asked, self.verdict) {
            (false, _) => None,
            (true, Verdict::Untruthful) => Some("interpolation_search"),
            (true, _) => Some("offsets_for_times"),
        }
    }

    fn probes(&self) -> u64 {
        self.probes
    }
}

/// The verdict on a broker's answers, one per ask: each answer holds when the message at it is
/// at or after the time and the one before it is before the time. An answer at the partition's
/// end (nothing at or after the time) has no message to check; one at its start has none
/// before it. A probe of the message before an answer that gets a message at or past the
/// answer (a broker that returns a record batch whole from its base offset) leaves that side
/// unchecked rather than failed.
struct BrokerCheck<'a> {
    asks: &'a [Ask],
    /// The answers, clamped into each partition's `[low, end]`.
    answers: Vec<i64>,
}

impl<'a> BrokerCheck<'a> {
    fn new(asks: &'a [Ask], answers: Vec<i64>) -> Self {
        BrokerCheck { asks, answers }
    }

    /// The answers, if both rounds of probes (`probe_round`) find them holding.
    fn verdict(
        self,
        mut probe_round: impl FnMut(&[(i32, i64)]) -> anyhow::Result<Vec<Probed>>,
    ) -> anyhow::Result<Option<Vec<i64>>> {
        let got = probe_round(&self.at_or_after_probes())?;
        if !self.at_or_after_holds(&got) {
            return Ok(None);
        }
        let got = probe_round(&self.before_probes())?;
        Ok(self.before_holds(&got).then_some(self.answers))
    }

    /// Some answer is inside its partition: both of its sides are probed.
    fn looks_at_both_sides(&self) -> bool {
        self.asks
            .iter()
            .zip(&self.answers)
            .any(|(a, &o)| o > a.low && o < a.end)
    }

    /// The asks whose answer is below their partition's end, with it.
    fn answered(&self) -> impl Iterator<Item = (&Ask, i64)> {
        self.asks
            .iter()
            .zip(self.answers.iter().copied())
            .filter(|(a, o)| *o < a.end)
    }

    /// The asks whose answer is above their partition's start, with it.
    fn above_low(&self) -> impl Iterator<Item = (&Ask, i64)> {
        self.asks
            .iter()
            .zip(self.answers.iter().copied())
            .filter(|(a, o)| *o > a.low)
    }

    /// The first round: the message at each answer below its partition's end.
    fn at_or_after_probes(&self) -> Vec<(i32, i64)> {
        self.answered().map(|(a, o)| (a.partition, o)).collect()
    }

    fn at_or_after_holds(&self, got: &[Probed]) -> bool {
        self.answered()
            .zip(got)
            .all(|((a, _), got)| got.is_some_and(|(_, ts)| ts >= a.ms))
    }

    /// The second round: the message before each answer above its partition's start.
    fn before_probes(&self) -> Vec<(i32, i64)> {
        self.above_low()
            .map(|(a, o)| (a.partition, o - 1))
            .collect()
    }

    fn before_holds(&self, got: &[Probed]) -> bool {
        self.above_low().zip(got).all(|((a, o), got)| match got {
            Some((at, ts)) => *at >= o || *ts < a.ms,
            None => false,
        })
    }
}

/// A message's place and time: (offset, timestamp in ms).
type Point = (i64, i64);

/// The search for the first offset in `[low, end)` whose message's timestamp is at or after
/// the time (`end` when there is none), one probe a round. Kafka timestamps grow with the offset
/// roughly evenly, so the search probes where the time should be between the nearest messages
/// known on either side of it; where an interpolation did not at least halve the range, the
/// next probe bisects, so a bound never costs more than about twice a binary search. Timestamps
/// are assumed non-decreasing in offset; a small inversion only moves the answer within it.
#[derive(Debug, Clone)]
struct Search {
    target_ms: i64,
    /// The answer is in `[lo, hi]`.
    lo: i64,
    hi: i64,
    /// The last message known before the target, offset < `lo`.
    below: Option<Point>,
    /// A message known at or after the target, offset ≥ `hi`.
    above: Option<Point>,
    /// The range's last message has been probed (after its first: the interpolation's far end).
    last_probed: bool,
    /// The probe in flight: where, whether it was interpolated, the range's size before it.
    pending: Option<(i64, bool, i64)>,
    /// The last interpolation did not halve the range: bisect next.
    bisect_next: bool,
}

impl Search {
    fn new(ask: &Ask) -> Search {
        Search {
            target_ms: ask.ms,
            lo: ask.low,
            hi: ask.end.max(ask.low),
            below: None,
            above: None,
            last_probed: false,
            pending: None,
            bisect_next: false,
        }
    }

    /// The answer, once the range is down to one offset.
    fn found(&self) -> Option<i64> {
        (self.lo >= self.hi).then_some(self.lo)
    }

    /// The offset to probe next; `None` once [`found`](Self::found).
    fn next_probe(&mut self) -> Option<i64> {
        if self.found().is_some() {
            return None;
        }
        let (lo, hi) = (self.lo, self.hi);
        let (at, interpolated) = match (self.below, self.above) {
            (None, _) => (lo, false),
            (Some(_), None) if !self.last_probed && hi - lo > 1 => {
                self.last_probed = true;
                (hi - 1, false)
            }
            (Some((bo, bt)), Some((ao, at))) if at > bt && !self.bisect_next => {
                let span = (ao - bo) as i128 * (self.target_ms - bt) as i128;
                let guess = bo as i128 + span / (at - bt) as i128;
                (guess.clamp(lo as i128, hi as i128 - 1) as i64, true)
            }
            _ => (lo + (hi - lo) / 2, false),
        };
        self.pending = Some((at, interpolated, hi - lo));
        Some(at)
    }

    /// What the probe at `at` answered: the first message at or after it (offset, timestamp),
    /// or `None` when the partition has none there.
    fn answer(&mut self, at: i64, got: Probed) {
        match got {
            Some((o, ts)) if ts < self.target_ms => {
                if o + 1 > self.lo || self.below.is_none() {
                    self.lo = (o + 1).clamp(self.lo, self.hi);
                    self.below = Some((o, ts));
                }
            }
            // No message in `[at, o)`: the answer is at most `at`, where a read gets `o` first.
            Some((_, ts)) => {
                if at < self.hi || self.above.is_none() {
                    self.hi = at.clamp(self.lo, self.hi);
                    self.above = Some((at, ts));
                }
            }
            None => self.hi = at.clamp(self.lo, self.hi),
        }
        if let Some((p, interpolated, before)) = self.pending.take() {
            if p == at {
                self.bisect_next = interpolated && self.hi - self.lo > before / 2;
            }
        }
    }
}

/// [`Checked::probe_round`] with `reader`, which knows the topic's metadata already.
fn probe_round(
    reader: &Reader,
    servers: &str,
    topic: &str,
    probes: &[(i32, i64)],
) -> anyhow::Result<Vec<Probed>> {
    if probes.is_empty() {
        return Ok(Vec::new());
    }
    let mut tpl = TopicPartitionList::new();
    for &(p, at) in probes {
        tpl.add_partition_offset(topic, p, Offset::Offset(at))?;
    }
    assign_at(reader, servers, topic, &tpl)?;
    let mut out: Vec<Option<Probed>> = vec![None; probes.len()];
    let started = Instant::now();
    while out.iter().any(Option::is_none) {
        if started.elapsed() > PROBE_TIMEOUT {
            anyhow::bail!(
                "kafka {servers}: no message at {topic}/{probes:?} within {PROBE_TIMEOUT:?}, \
                 below the partitions' ends"
            )
        }
        let (p, got) = match reader.poll(Duration::from_millis(50)) {
            Some(Ok(m)) if m.topic() != topic => continue,
            Some(Ok(m)) => {
                let at = probes.iter().find(|(p, _)| *p == m.partition());
                // A message of an earlier assignment, below the offset probed.
                if at.is_none_or(|&(_, at)| m.offset() < at) {
                    continue;
                }
                let ts = m.timestamp().to_millis().unwrap_or(0);
                (m.partition(), Some((m.offset(), ts)))
            }
            Some(Err(KafkaError::PartitionEOF(p))) => (p, None),
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}/{probes:?}: {e}"),
            None => continue,
        };
        // An answered partition leaves the fetches: the ones still waiting get theirs next.
        if let Some(i) = probes.iter().position(|(q, _)| *q == p) {
            if out[i].is_none() {
                out[i] = Some(got);
                set_aside(reader, topic, p)?;
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition of offsets `0..ts.len()` with these timestamps, whose broker returns record
    /// batches of `batch` messages whole from their base offset: a probe at `at` gets the
    /// first message of the first batch at or after `at`.
    struct Partition {
        ts: Vec<i64>,
        batch: i64,
    }

    impl Partition {
        fn probe(&self, at: i64) -> Probed {
            let base = (at + self.batch - 1) / self.batch * self.batch;
            let ts = self.ts.get(usize::try_from(base).ok()?)?;
            Some((base, *ts))
        }

        /// What a truthful broker answers: the first offset whose timestamp is at or after `ms`.
        fn truth(&self, ms: i64) -> Offset {
            match self.ts.iter().position(|&t| t >= ms) {
                Some(o) => Offset::Offset(o as i64),
                None => Offset::End,
            }
        }
    }

    /// Two partitions, timestamps 1,000 ms apart (partition 1 offset by 500 ms).
    fn partitions(batch: i64) -> [Partition; 2] {
        let of = |start: i64| Partition {
            ts: (0..100).map(|i| start + i * 1_000).collect(),
            batch,
        };
        [of(10_000), of(10_500)]
    }

    fn asks(ms: i64) -> [Ask; 2] {
        let ask = |partition| Ask {
            partition,
            low: 0,
            end: 100,
            ms,
        };
        [ask(0), ask(1)]
    }

    /// The check's verdict on the broker's `offsets` for the time `ms` in both partitions, and
    /// the number of probes it took; a partition the broker left unanswered is no answer, as in
    /// the read ([`BrokerTimeIndex`]).
    fn verdict(
        parts: &[Partition; 2],
        ms: i64,
        offsets: &[Option<Offset>],
    ) -> (Option<Vec<i64>>, usize) {
        let asks = asks(ms);
        let answers: Option<Vec<i64>> = asks
            .iter()
            .zip(offsets)
            .map(|(a, o)| a.answered_by(*o))
            .collect();
        let mut probes = 0;
        let answer = answers.and_then(|answers| {
            BrokerCheck::new(&asks, answers)
                .verdict(|round| {
                    probes += round.len();
                    Ok(round
                        .iter()
                        .map(|&(p, at)| parts[p as usize].probe(at))
                        .collect())
                })
                .expect("probes never fail here")
        });
        (answer, probes)
    }

    fn truths(parts: &[Partition; 2], ms: i64) -> Vec<Option<Offset>> {
        parts.iter().map(|p| Some(p.truth(ms))).collect()
    }

    #[test]
    fn a_truthful_broker_is_believed_in_two_rounds() {
        let parts = partitions(1);
        // Inside both partitions: each answer is checked on both sides (4 probes).
        let (answer, probes) = verdict(&parts, 40_200, &truths(&parts, 40_200));
        assert_eq!(answer, Some(vec![31, 30]));
        assert_eq!(probes, 4);
        // Before the first messages (answered at the start: nothing before to check) and past
        // the last (answered with the end: nothing at it to check).
        let (answer, probes) = verdict(&parts, 0, &truths(&parts, 0));
        assert_eq!((answer, probes), (Some(vec![0, 0]), 2));
        let (answer, probes) = verdict(&parts, 200_000, &truths(&parts, 200_000));
        assert_eq!((answer, probes), (Some(vec![100, 100]), 2));
    }

    /// Only an answer inside its partition proves the broker: one at an edge is checked on one
    /// side at most, and a broker answering offset 0 for a time before every message is right.
    #[test]
    fn only_an_answer_inside_its_partition_proves_the_broker() {
        let at = |ms, answers: Vec<i64>| {
            let asks = asks(ms);
            BrokerCheck::new(&asks, answers).looks_at_both_sides()
        };
        assert!(at(40_200, vec![31, 30]));
        assert!(!at(0, vec![0, 0]));
        assert!(!at(200_000, vec![100, 100]));
    }

    #[test]
    fn a_false_answer_is_never_believed() {
        let parts = partitions(1);
        let ms = 40_200;
        // Offset 0 whatever the time fails the first round.
        let zeros = vec![Some(Offset::Offset(0)); 2];
        assert_eq!(verdict(&parts, ms, &zeros), (None, 2));
        // One answer one short of the truth fails the first round; one a message too far, the
        // second; the end for a time inside the partition, the second.
        for wrong in [Offset::Offset(30), Offset::Offset(32), Offset::End] {
            let offsets = vec![Some(wrong), Some(parts[1].truth(ms))];
            assert_eq!(verdict(&parts, ms, &offsets).0, None, "{wrong:?}");
        }
        // A partition left unanswered.
        assert_eq!(
            verdict(&parts, ms, &[Some(parts[0].truth(ms)), None]),
            (None, 0)
        );
    }

    #[test]
    fn a_batch_returned_whole_leaves_the_side_before_unchecked() {
        // Batches of 10 from offset 0: the message before an answer at a batch's base is
        // fetched, but one before an answer inside a batch comes back as the next batch.
        let parts = partitions(10);
        let (answer, _) = verdict(&parts, 40_200, &truths(&parts, 40_200));
        assert_eq!(answer, Some(vec![31, 30]));
    }

    /// Drives a [`Search`] over `ts` (timestamps by offset, each a message): (answer, probes).
    fn run(ts: &[i64], target: i64) -> (i64, u64) {
        run_on(ts.len() as i64, target, |at| {
            ts.get(at as usize).map(|t| (at, *t))
        })
    }

    /// Drives a [`Search`] of `[0, end)` whose probe at an offset answers `at(offset)`.
    fn run_on(end: i64, target: i64, at: impl Fn(i64) -> Probed) -> (i64, u64) {
        let ask = Ask {
            partition: 0,
            low: 0,
            end,
            ms: target,
        };
        let mut s = Search::new(&ask);
        let mut probes = 0;
        while let Some(o) = s.next_probe() {
            s.answer(o, at(o));
            probes += 1;
            assert!(probes < 200, "the search does not end");
        }
        (s.found().expect("a search ends on one offset"), probes)
    }

    /// A deterministic pseudo-random sequence (no dependency for a test).
    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *seed >> 33
    }

    fn exact(ts: &[i64], target: i64) -> i64 {
        ts.partition_point(|t| *t < target) as i64
    }

    /// Seven days of timestamps, 2,000,000 messages: even, bursty by the hour (densities 1 to
    /// 100), and two bursts days apart with nothing between.
    fn distributions() -> Vec<(&'static str, Vec<i64>)> {
        let (n, week) = (2_000_000usize, 604_800_000u64);
        let mut seed = 7;
        let mut even: Vec<i64> = (0..n).map(|_| (lcg(&mut seed) % week) as i64).collect();
        even.sort_unstable();
        let mut bursty = Vec::with_capacity(n);
        let densities: Vec<u64> = (0..168)
            .map(|_| [1, 1, 2, 5, 100][(lcg(&mut seed) % 5) as usize])
            .collect();
        let total: u64 = densities.iter().sum();
        for (h, d) in densities.iter().enumerate() {
            let k = n as u64 * d / total;
            let mut hour: Vec<i64> = (0..k)
                .map(|_| (h as u64 * 3_600_000 + lcg(&mut seed) % 3_600_000) as i64)
                .collect();
            hour.sort_unstable();
            bursty.extend(hour);
        }
        let mut gap: Vec<i64> = (0..n)
            .map(|i| {
                let base = if i < n / 2 { 0 } else { 500_000_000 };
                base + (lcg(&mut seed) % 100_000_000) as i64
            })
            .collect();
        gap.sort_unstable();
        vec![("even", even), ("bursty", bursty), ("gap", gap)]
    }

    #[test]
    fn the_search_finds_the_exact_first_offset_in_few_probes() {
        for (name, ts) in distributions() {
            let mut seed = 11;
            let mut probes = Vec::new();
            for _ in 0..300 {
                let (first, last) = (ts[0], *ts.last().unwrap());
                let target = first + (lcg(&mut seed) % (last - first + 10) as u64) as i64;
                let (found, p) = run(&ts, target);
                assert_eq!(found, exact(&ts, target), "{name}: target {target}");
                probes.push(p);
            }
            probes.sort_unstable();
            let (median, worst) = (probes[probes.len() / 2], *probes.last().unwrap());
            // A binary search takes 21-22 here; about twice that is the bound whatever the
            // distribution (interpolations that do not halve the range are followed by a
            // bisection).
            assert!(worst <= 2 * 22 + 4, "{name}: worst {worst} probes");
            if name == "even" {
                assert!(median <= 13, "even timestamps: median {median} probes");
            }
        }
    }

    #[test]
    fn the_edges_and_repeated_timestamps_are_exact() {
        let ts: Vec<i64> = [5, 5, 5, 9, 9, 12, 40, 40, 40, 41].to_vec();
        for target in [0, 5, 6, 9, 10, 12, 13, 40, 41, 42, 1_000] {
            assert_eq!(run(&ts, target).0, exact(&ts, target), "target {target}");
        }
        // Every timestamp equal: the first message, in one probe.
        let flat = vec![100; 1_000];
        assert_eq!(run(&flat, 100), (0, 1));
        assert_eq!(run(&flat, 101).0, 1_000);
        // An empty range is found at once.
        assert_eq!(run(&[], 0), (0, 0));
    }

    /// Offsets without messages (compacted, transaction markers): a probe answers the next
    /// message, and the answer is the first offset a read from it gets the message at or after
    /// the target from.
    #[test]
    fn holes_in_the_offsets_are_stepped_over() {
        // Messages at even offsets only, timestamp = offset.
        let at = |o: i64| -> Probed {
            let next = o + (o & 1);
            (next < 1_000).then_some((next, next))
        };
        for target in [0, 1, 2, 501, 998, 999] {
            let (found, _) = run_on(1_000, target, at);
            let first = at(found).map_or(1_000, |(o, _)| o);
            let want = (target + (target & 1)).min(1_000);
            assert_eq!(first, want, "target {target}: found {found}");
        }
    }
}
