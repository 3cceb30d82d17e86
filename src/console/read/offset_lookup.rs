//! Offsets by time in the partitions of one topic ([`OffsetLookup`]): the broker's
//! `offsets_for_times` when its answer checks out against the messages around it, else a search
//! over the offsets ([`Seek`]), one probe of every partition per round; and each partition's
//! exact end (the high watermark a fetch carried). Where a trace's windows start and end
//! ([`window_read`](super::window_read)) and where a live reader starts
//! ([`live`](super::live)) are both found here.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::console::read::seek::{Seek, SCAN_INSTEAD_OF_PROBING};
use crate::console::read::time_index::{self, TimeIndex};
use crate::console::read::topics::{assign_known, Reader, KAFKA_TIMEOUT};
use crate::contracts::now_ms;

/// How long one probe (the message at one offset) may take before the read fails.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a probe answered: the first message at or after its offset (offset, timestamp), or
/// none there.
type Probed = Option<(i64, i64)>;

/// Finds offsets by time in the partitions of one topic. The broker's `offsets_for_times` is
/// asked first and its answer checked against the messages on both sides of it; an answer that
/// does not hold (tansu 0.6.0 answers offset 0 whatever the time) makes the lookup search the
/// offsets instead ([`Seek`]: interpolation over the timestamps, bisection where they are
/// uneven), reading one message's timestamp per probe, on any broker. The partitions are probed
/// together: one fetch request carries one probe of each, so a round costs one round trip
/// whatever the number of partitions read.
pub(super) struct OffsetLookup<'a> {
    /// The lookup's own: no other read uses it meanwhile.
    consumer: &'a Reader,
    /// A second reader of the lookup's own, if it has one: a round of several partitions probes
    /// half of them with it, at the same time ([`probe_round`](Self::probe_round)).
    second: Option<&'a Reader>,
    /// Whether `second` holds partitions of an earlier round.
    second_assigned: bool,
    topic: &'a str,
    /// `Some(false)` once the broker's answer failed a check (in this lookup or, within
    /// [`time_index::BROKER_RECHECK`], an earlier one of the process): it is not asked again.
    pub(super) broker_truthful: Option<bool>,
    pub(super) probes: u64,
    /// Per partition, what every probe answered: a later search starts from what is known.
    seen: BTreeMap<i32, Vec<(i64, Probed)>>,
    cancel: CancellationToken,
    /// What earlier reads of the process learned (anchors for the searches, see
    /// [`time_index`](super::time_index)), and the brokers it is keyed by.
    index: &'static TimeIndex,
    servers: &'a str,
}

impl<'a> OffsetLookup<'a> {
    pub(super) fn new(
        consumer: &'a Reader,
        servers: &'a str,
        topic: &'a str,
        cancel: &CancellationToken,
    ) -> Self {
        let index = time_index::shared();
        OffsetLookup {
            consumer,
            second: None,
            second_assigned: false,
            topic,
            broker_truthful: index.broker_untruthful(servers).then_some(false),
            probes: 0,
            seen: BTreeMap::new(),
            cancel: cancel.clone(),
            index,
            servers,
        }
    }

    /// Probes with `second` as well: a round of several partitions is fetched by two readers at
    /// once. One reader's fetch returns one partition's record batch (a broker returns at least
    /// one whole batch, whatever `fetch.max.bytes`), so with one reader a round of two
    /// partitions took two fetches one after the other.
    pub(super) fn probing_also(mut self, second: &'a Reader) -> Self {
        self.second = Some(second);
        self
    }

    fn key(&self, partition: i32) -> time_index::PartitionKey {
        (self.servers.to_string(), self.topic.to_string(), partition)
    }

    /// Messages a scan read (partition, offset, timestamp): as good as probes at their offsets.
    pub(super) fn saw(&mut self, messages: Vec<(i32, i64, i64)>) {
        for (p, o, ts) in messages {
            self.seen.entry(p).or_default().push((o, Some((o, ts))));
        }
    }

    /// The windows are found: the reader gives up the partitions it probed. Left assigned, a
    /// partition whose local queue holds the rest of a probed batch keeps its broker thread
    /// re-deciding at once that the queue is full (`fetch.queue.backoff.ms` 0, see
    /// [`probe_reader`](super::topics::probe_reader)): a core's worth of spinning for as long
    /// as the reader sits idle, which on two cores was most of a trace's CPU (BENCHMARKS.md).
    pub(super) fn rest(&mut self) -> anyhow::Result<()> {
        let gave_up = |r: &Reader| {
            r.unassign().map_err(|e| {
                anyhow::anyhow!(
                    "kafka: giving up the probed partitions of {}: {e}",
                    self.topic
                )
            })
        };
        gave_up(self.consumer)?;
        if let Some(second) = self.second.filter(|_| self.second_assigned) {
            gave_up(second)?;
            self.second_assigned = false;
        }
        Ok(())
    }

    /// The high watermark of `partition` the lookup's last fetch of it carried.
    fn fetched_end(&self, partition: i32) -> Option<i64> {
        let of = |r: &Reader| fetched_high_watermark(r, self.topic, partition);
        of(self.consumer).max(self.second.and_then(of))
    }

    /// Hands what the probes read to the process's index, each partition with its `end`
    /// (partition, low, end).
    pub(super) fn remember(&self, ends: &[(i32, i64, i64)]) {
        for &(p, _, end) in ends {
            let seen: Vec<(i64, i64)> = self
                .seen
                .get(&p)
                .into_iter()
                .flatten()
                .filter_map(|(_, got)| *got)
                .collect();
            self.index.learn(&self.key(p), end, &seen);
        }
    }

    /// One probe per partition, fetched together (half of them by the second reader, if any):
    /// for each (partition, offset), the offset and timestamp of the first message at or after
    /// the offset; `None` when there is none: the reader reports the partition's end, or the
    /// offset is out of range (the reader starts over below it). An offset below the partition's
    /// end always has a message, so a probe that gets nothing within [`PROBE_TIMEOUT`] is an
    /// error, never a guess.
    fn probe_round(&mut self, probes: &[(i32, i64)]) -> anyhow::Result<Vec<Probed>> {
        self.probes += probes.len() as u64;
        let (topic, servers) = (self.topic, self.servers);
        let out = match self.second {
            Some(second) if probes.len() > 1 => {
                let (mine, its) = probes.split_at(probes.len() / 2);
                let (mine, its) = std::thread::scope(|s| {
                    let its = s.spawn(|| probe_with(second, servers, topic, its));
                    let mine = probe_with(self.consumer, servers, topic, mine);
                    (mine, its.join().expect("a probe thread does not panic"))
                });
                self.second_assigned = true;
                let mut out = mine?;
                out.extend(its?);
                out
            }
            _ => {
                // A second reader left holding partitions would re-decide at once, for as long
                // as their queues stay full, that it cannot fetch (see `rest`).
                if let Some(second) = self.second.filter(|_| self.second_assigned) {
                    second.unassign()?;
                    self.second_assigned = false;
                }
                probe_with(self.consumer, servers, topic, probes)?
            }
        };
        for (&(p, at), got) in probes.iter().zip(&out) {
            self.seen.entry(p).or_default().push((at, *got));
        }
        Ok(out)
    }

    /// The offset after the last message of each partition of `marks` (partition, low, listed
    /// high) → (partition, low, end). The watermark a ListOffsets request answers is not
    /// enough: tansu 0.6.0's lags the last records (measured: 1 for 1,012 records, 4,388 for
    /// 4,638). The one a fetch response carries is exact on every broker measured, so each
    /// partition's first message is fetched (one round) and the client's cached watermark read.
    pub(super) fn ends(
        &mut self,
        marks: &[(i32, i64, i64)],
    ) -> anyhow::Result<Vec<(i32, i64, i64)>> {
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let probes: Vec<(i32, i64)> = marks.iter().map(|&(p, low, _)| (p, low)).collect();
        self.probe_round(&probes)?;
        Ok(self.reached(marks))
    }

    /// [`ends`](Self::ends) of `marks`, unless each partition's search learns its end on the
    /// way: a trace's windows (`past_edges`) in partitions too big to be read whole need no
    /// exact end first — the listed one bounds their search, the first fetch's extends it
    /// ([`Seek::reaching`]), and their reads stop by time, not at an offset. That saves every
    /// topic's trace a round of probes ([`reached`](Self::reached) gives the ends after).
    pub(super) fn ends_unless_learned(
        &mut self,
        marks: &[(i32, i64, i64)],
        past_edges: bool,
    ) -> anyhow::Result<Vec<(i32, i64, i64)>> {
        let searched = |&(_, low, high): &(i32, i64, i64)| high - low > SCAN_INSTEAD_OF_PROBING;
        if past_edges && marks.iter().all(searched) {
            return Ok(marks.to_vec());
        }
        self.ends(marks)
    }

    /// `ends` (partition, low, end) with each end the furthest a fetch of the lookup has seen.
    pub(super) fn reached(&self, ends: &[(i32, i64, i64)]) -> Vec<(i32, i64, i64)> {
        ends.iter()
            .map(|&(p, low, end)| {
                let fetched = self.fetched_end(p);
                (p, low, fetched.map_or(end, |h| h.max(end)))
            })
            .collect()
    }

    /// For each (partition, low, high, ms), one partition each: `(lo, hi)` with the first
    /// offset in `[low, high]` whose message's timestamp is at or after `ms` (`high` when there
    /// is none) in `[lo, hi]`. With `window_ms` 0 the offset itself (`lo == hi`); else a bound of
    /// a window of that length that may be read a little past ([`Seek::scanning`]).
    pub(super) fn first_at_or_after(
        &mut self,
        asks: &[(i32, i64, i64, i64)],
        window_ms: i64,
    ) -> anyhow::Result<Vec<(i64, i64)>> {
        // Partitions this small are read whole: neither the broker's answer nor a probe costs
        // less than reading them.
        let small =
            |&(_, low, high, _): &(i32, i64, i64, i64)| high - low <= SCAN_INSTEAD_OF_PROBING;
        if window_ms > 0 && asks.iter().all(small) {
            return Ok(asks.iter().map(|&(_, low, high, _)| (low, high)).collect());
        }
        if self.broker_truthful != Some(false) {
            if let Some(found) = self.broker_answers(asks)? {
                self.broker_truthful = Some(true);
                return Ok(found.into_iter().map(|o| (o, o)).collect());
            }
            self.broker_truthful = Some(false);
            self.index.note_untruthful(self.servers);
        }
        let mut seeks: Vec<(i32, Seek)> = asks
            .iter()
            .map(|&(p, low, high, ms)| {
                let known = self.seen.get(&p).map_or(&[][..], Vec::as_slice);
                // Nothing known at or after the time: the partition's last message is guessed
                // to be about now (a live topic's producers write as the incident goes on),
                // which saves probing it; a guess that is wrong (a topic quiet for days) costs
                // probes, never the answer ([`Seek::anchored`]).
                let mut anchors = self.index.points(&self.key(p), low, high);
                let now = now_ms();
                if high - low > 1 && now > ms && anchors.iter().all(|&(_, ts)| ts < ms) {
                    anchors.push((high - 1, now));
                }
                let seek = Seek::new(low, high, ms)
                    .scanning(window_ms)
                    .anchored(anchors);
                let seek = known.iter().fold(seek, |s, &(at, got)| s.knowing(at, got));
                (p, seek)
            })
            .collect();
        loop {
            if self.cancel.is_cancelled() {
                anyhow::bail!("reading {} was cancelled (finding its windows)", self.topic);
            }
            let round: Vec<(usize, i32, i64)> = seeks
                .iter_mut()
                .enumerate()
                .filter_map(|(i, (p, s))| s.next_probe().map(|at| (i, *p, at)))
                .collect();
            if round.is_empty() {
                break;
            }
            let probes: Vec<(i32, i64)> = round.iter().map(|&(_, p, at)| (p, at)).collect();
            let answers = self.probe_round(&probes)?;
            for (&(i, p, at), got) in round.iter().zip(answers) {
                seeks[i].1.answer(at, got);
                if let Some(end) = self.fetched_end(p) {
                    seeks[i].1.reaching(end);
                }
            }
        }
        Ok(seeks.iter().filter_map(|(_, s)| s.bracket()).collect())
    }

    /// The broker's `offsets_for_times` answers for `asks` (one partition each), when every
    /// one checks out against the messages around it ([`BrokerCheck`]); `None` when one does not
    /// (or the broker cannot answer). One request asks for every partition, and each check is one
    /// round of probes of them all. A broker that answers falsely (tansu's offset 0) fails the
    /// first round, whose probes the search then starts from (they are what it would probe
    /// first).
    fn broker_answers(
        &mut self,
        asks: &[(i32, i64, i64, i64)],
    ) -> anyhow::Result<Option<Vec<i64>>> {
        let mut q = TopicPartitionList::new();
        for &(p, _, _, ms) in asks {
            q.add_partition_offset(self.topic, p, Offset::Offset(ms))?;
        }
        let Ok(found) = self.consumer.offsets_for_times(q, KAFKA_TIMEOUT) else {
            return Ok(None);
        };
        let offsets: Vec<Option<Offset>> = asks
            .iter()
            .map(|a| found.find_partition(self.topic, a.0).map(|e| e.offset()))
            .collect();
        let Some(check) = BrokerCheck::new(asks, &offsets) else {
            return Ok(None);
        };
        check.verdict(|probes| self.probe_round(probes))
    }
}

/// The verdict on a broker's `offsets_for_times` answers, one per ask (partition, low, high,
/// ms): each answer holds when the message at it is at or after the time and the one before it
/// is before the time. An answer at `high` (nothing at or after the time) has no message to
/// check; one at `low` has none before it. A probe of the message before an answer that gets a
/// message at or past the answer (a broker that returns a record batch whole from its base
/// offset) leaves that side unchecked rather than failed.
struct BrokerCheck<'a> {
    asks: &'a [(i32, i64, i64, i64)],
    /// The answers, clamped into each partition's `[low, high]`.
    answers: Vec<i64>,
}

impl<'a> BrokerCheck<'a> {
    /// `None` when the broker left a partition unanswered.
    fn new(asks: &'a [(i32, i64, i64, i64)], offsets: &[Option<Offset>]) -> Option<Self> {
        let answers = asks
            .iter()
            .zip(offsets)
            .map(|(&(_, low, high, _), offset)| match offset {
                Some(Offset::Offset(o)) => Some((*o).clamp(low, high)),
                Some(Offset::End) => Some(high),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()?;
        Some(BrokerCheck { asks, answers })
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

    /// The asks whose answer is below their partition's end, with it.
    fn answered(&self) -> impl Iterator<Item = (&(i32, i64, i64, i64), i64)> {
        self.asks
            .iter()
            .zip(self.answers.iter().copied())
            .filter(|(a, o)| *o < a.2)
    }

    /// The asks whose answer is above their partition's start, with it.
    fn above_low(&self) -> impl Iterator<Item = (&(i32, i64, i64, i64), i64)> {
        self.asks
            .iter()
            .zip(self.answers.iter().copied())
            .filter(|(a, o)| *o > a.1)
    }

    /// The first round: the message at each answer below its partition's end.
    fn at_or_after_probes(&self) -> Vec<(i32, i64)> {
        self.answered().map(|(a, o)| (a.0, o)).collect()
    }

    fn at_or_after_holds(&self, got: &[Probed]) -> bool {
        self.answered()
            .zip(got)
            .all(|((a, _), got)| got.is_some_and(|(_, ts)| ts >= a.3))
    }

    /// The second round: the message before each answer above its partition's start.
    fn before_probes(&self) -> Vec<(i32, i64)> {
        self.above_low().map(|(a, o)| (a.0, o - 1)).collect()
    }

    fn before_holds(&self, got: &[Probed]) -> bool {
        self.above_low().zip(got).all(|((a, o), got)| match got {
            Some((at, ts)) => *at >= o || *ts < a.3,
            None => false,
        })
    }
}

/// [`OffsetLookup::probe_round`]'s probes of `probes` with one reader.
fn probe_with(
    consumer: &Reader,
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
    assign_known(consumer, servers, topic, &tpl)?;
    let mut out: Vec<Option<Probed>> = vec![None; probes.len()];
    let started = Instant::now();
    while out.iter().any(Option::is_none) {
        if started.elapsed() > PROBE_TIMEOUT {
            anyhow::bail!(
                "kafka: no message at {topic}/{probes:?} within {PROBE_TIMEOUT:?}, below the \
                 partitions' ends"
            )
        }
        let (p, got) = match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) if m.topic() != topic => continue,
            Some(Ok(m)) => {
                let at = probes
                    .iter()
                    .find(|(p, _)| *p == m.partition())
                    .map(|x| x.1);
                let ts = m.timestamp().to_millis().unwrap_or(0);
                let got = at.and_then(|at| (m.offset() >= at).then_some((m.offset(), ts)));
                (m.partition(), got)
            }
            Some(Err(KafkaError::PartitionEOF(p))) => (p, None),
            Some(Err(e)) => anyhow::bail!("reading {topic}/{probes:?}: {e}"),
            None => continue,
        };
        if let Some(i) = probes.iter().position(|(q, _)| *q == p) {
            out[i].get_or_insert(got);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// The high watermark of `partition` that the last fetch response carried (librdkafka caches
/// it; the Rust client does not expose it); `None` before any fetch of it.
fn fetched_high_watermark(consumer: &Reader, topic: &str, partition: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; `topic` is a NUL-terminated
    // string that outlives the call; `low`/`high` are valid out-pointers. The call only reads
    // the client's cached partition state.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
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

    /// `broker_answers`' verdict on `offsets` for the time `ms` in both partitions, and the
    /// number of probes it took.
    fn verdict(
        parts: &[Partition; 2],
        ms: i64,
        offsets: &[Option<Offset>],
    ) -> (Option<Vec<i64>>, usize) {
        let asks = [(0, 0, 100, ms), (1, 0, 100, ms)];
        let mut probes = 0;
        let answer = BrokerCheck::new(&asks, offsets).and_then(|check| {
            check
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

    #[test]
    fn a_false_answer_is_never_believed() {
        let parts = partitions(1);
        let ms = 40_200;
        // tansu 0.6.0: offset 0 whatever the time — fails the first round.
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
}
