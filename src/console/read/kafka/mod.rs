//! A topic plan's windows read from Kafka: [`read_windows`] is where every windowed read of a
//! topic starts (a trace's, the rates', a window report's, the DLQ's, the log topic's). In order:
//! 1. the partitions to read ([`plan`]: the traced keys', by the profile's partitioner) and
//!    their watermarks;
//! 2. each window's offsets, from the broker's time index ([`offsets`]: `offsets_for_times`,
//!    checked, searched for where a broker answers falsely): where the window starts and the
//!    first offset past its end;
//! 3. the stretches between them read ([`scan`]), the partitions widened to every one when the
//!    messages say the producer did not partition by key.
//!
//! One reader per topic read, made here and let go at the end; what the read cost — windows,
//! partitions, messages, probes, round trips — is its [`TopicCost`].

pub mod offsets;
pub mod plan;
pub mod scan;

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::BorrowedMessage;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::console::read::topics::{
    let_go, partitions, round_trips, watermarks_of, window_reader, Reader,
};
use crate::console::read::window::{ReadTimes, TopicCost, TopicPlan};
use offsets::OffsetsAtTime;
use plan::ShortcutCheck;

/// Reads `plan`'s windows of its topic, in the partitions of its keys (blocking: run it on a
/// blocking thread): `each` gets every message of every window. Bounded by `deadline`, and ends
/// within one poll of `cancel`.
pub fn read_windows(
    config: &Config,
    plan: &TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    each: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<TopicCost> {
    read_windows_when(config, plan, deadline, cancel, || each)
}

/// [`read_windows`], its windows' offsets found first and `each` asked for only then: a read
/// that can find its offsets before it knows what to keep (the trace topic's, while the payment
/// topic is read) waits in `ready`. The wait is the cost's `wait_ms` and does not count against
/// `deadline`.
pub fn read_windows_when<F: FnMut(&BorrowedMessage<'_>)>(
    config: &Config,
    plan: &TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    ready: impl FnOnce() -> F,
) -> anyhow::Result<TopicCost> {
    let reader = window_reader(config)?;
    let read = Read {
        reader: &reader,
        servers: &config.kafka.bootstrap_servers,
        plan,
        cancel,
    };
    let cost = read.windows(deadline, ready);
    let_go(reader);
    cost
}

/// One read of a plan's topic.
struct Read<'a> {
    reader: &'a Reader,
    servers: &'a str,
    plan: &'a TopicPlan,
    cancel: &'a CancellationToken,
}

impl Read<'_> {
    fn windows<F: FnMut(&BorrowedMessage<'_>)>(
        &self,
        deadline: Duration,
        ready: impl FnOnce() -> F,
    ) -> anyhow::Result<TopicCost> {
        let (plan, topic) = (self.plan, self.plan.topic.as_str());
        let started = Instant::now();
        let all = partitions(self.reader, self.servers, topic)?;
        let shortcut = plan.partitions(all.len() as i32);
        let read = shortcut.clone().unwrap_or_else(|| all.clone());
        let mut offsets = offsets::of_topic(self.reader, self.servers, topic, self.cancel);
        let looking = Instant::now();
        let stretches = self.stretches(&mut offsets, &read)?;
        let mut times = ReadTimes {
            lookup_ms: looking.elapsed().as_millis() as u64,
            setup_ms: (looking - started).as_millis() as u64,
            ..ReadTimes::default()
        };
        let waiting = Instant::now();
        let mut each = ready();
        let waited = waiting.elapsed();
        times.wait_ms = waited.as_millis() as u64;
        let scanning = Instant::now();
        let left = deadline.saturating_sub(started.elapsed().saturating_sub(waited));
        let check = ShortcutCheck::default();
        let mut keep = |m: &BorrowedMessage<'_>| {
            check.see(plan.partitioner, all.len() as i32, m);
            each(m)
        };
        let on = (self.servers, topic);
        let mut scanned = scan::read(self.reader, on, &stretches, left, self.cancel, &mut keep)?;
        let widened = shortcut
            .filter(|read| read.len() < all.len())
            .and_then(|read| check.failed(plan.partitioner, &read));
        let read = match widened {
            None => read,
            Some(_) => {
                let others: Vec<i32> = all.iter().filter(|p| !read.contains(p)).copied().collect();
                let more = self.stretches(&mut offsets, &others)?;
                let left = left.saturating_sub(scanning.elapsed());
                scanned += scan::read(self.reader, on, &more, left, self.cancel, &mut keep)?;
                all.clone()
            }
        };
        times.scan_ms = scanning.elapsed().as_millis() as u64;
        self.reader
            .unassign()
            .map_err(|e| anyhow::anyhow!("kafka: giving up the partitions of {topic}: {e}"))?;
        Ok(TopicCost {
            topic: topic.to_string(),
            basis: plan.basis,
            windows: plan.windows.clone(),
            partitions_total: all.len(),
            partitions_widened: widened,
            partitions_read: read,
            offset_lookup: offsets.found_by().unwrap_or("read_whole"),
            offset_probes: offsets.probes(),
            messages_scanned: scanned,
            round_trips: round_trips(self.reader).unwrap_or_default(),
            times,
        })
    }

    /// The stretches of the plan's windows in `partitions`, their watermarks read first.
    fn stretches(
        &self,
        offsets: &mut impl OffsetsAtTime,
        partitions: &[i32],
    ) -> anyhow::Result<std::collections::BTreeMap<i32, Vec<plan::Stretch>>> {
        let topic = self.plan.topic.as_str();
        let marks = watermarks_of(self.reader, self.servers, topic, partitions)?;
        let whole_if_small = self.plan.selects_by_id();
        plan::stretches(offsets, &marks, &self.plan.windows, whole_if_small)
    }
}
