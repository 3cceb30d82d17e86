//! Where a live reader starts ([`LiveStart`], [`live_starts`]): per partition, the first offset
//! of the last hour (found like a trace's windows, [`kafka::offsets`](super::kafka::offsets))
//! and the end it has to reach to be caught up — so the TUI's tail catches up with the hour in
//! time proportional to the hour, not to the retention. The reader assigns itself at those
//! starts and knows when it has caught up with
//! [`CatchUp::assign_live`](super::catch_up::CatchUp::assign_live).

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::console::read::kafka::offsets::{self, Ask, OffsetsAtTime};
use crate::console::read::topics::{let_go, watermarks, window_reader};

/// Where a live reader of one partition starts, and the end it has to reach to be caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveStart {
    pub partition: i32,
    /// The first offset whose message is at or after the time asked for.
    pub start: i64,
    /// Every message the partition holds is at or after that time.
    pub whole: bool,
    /// The partition's end (its high watermark) when the start was looked up.
    pub end: i64,
}

/// Per partition of `topic`, the first offset at or after `since_ms` and the current end: a
/// live reader starts there instead of at the topic's beginning, so it catches up with the last
/// hour in time proportional to the hour, not to the retention.
pub fn live_starts(config: &Config, topic: &str, since_ms: i64) -> anyhow::Result<Vec<LiveStart>> {
    let servers = &config.kafka.bootstrap_servers;
    let reader = window_reader(config)?;
    let never = CancellationToken::new();
    let starts = (|| {
        let marks = watermarks(&reader, servers, topic)?;
        let asks: Vec<Ask> = marks
            .iter()
            .map(|&(partition, low, end)| Ask {
                partition,
                low,
                end,
                ms: since_ms,
            })
            .collect();
        let starts = offsets::of_topic(&reader, servers, topic, &never).first_at_or_after(&asks)?;
        let out = asks.iter().zip(starts).map(|(a, start)| LiveStart {
            partition: a.partition,
            start,
            whole: start <= a.low,
            end: a.end,
        });
        Ok(out.collect())
    })();
    let_go(reader);
    starts
}

/// How many messages a live reader starting at `starts` reads to catch up (the offsets between
/// each start and its end).
pub fn messages_to_read(starts: &[LiveStart]) -> u64 {
    starts.iter().map(|s| (s.end - s.start).max(0) as u64).sum()
}
