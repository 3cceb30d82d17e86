//! Where a live reader starts ([`LiveStart`], [`live_starts`]): per partition, the first offset
//! of the last hour (found like a trace's windows, [`OffsetLookup`]) and the end it has to reach
//! to be caught up — so the TUI's tail catches up with the hour in time proportional to the
//! hour, not to the retention. The reader assigns itself at those starts and knows when it
//! has caught up with [`CatchUp::assign_live`](super::catch_up::CatchUp::assign_live).

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::console::read::offset_lookup::OffsetLookup;
use crate::console::read::topics::{probe_reader, watermarks, Fetch};

/// Where a live reader of one partition starts, and the end it has to reach to be caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveStart {
    pub partition: i32,
    /// The first offset whose message is at or after the time asked for.
    pub start: i64,
    /// Every message the partition holds is at or after that time.
    pub whole: bool,
    /// The partition's end when the start was looked up (exact, see [`OffsetLookup::ends`]).
    pub end: i64,
}

/// Per partition of `topic`, the first offset at or after `since_ms` and the current end, found
/// like [`read_windows`](super::window_read::read_windows)' (the broker's `offsets_for_times` when it checks out, else a search
/// over offsets): a live reader starts there instead of at the topic's beginning, so it
/// catches up with the last hour in time proportional to the hour, not to the retention.
pub fn live_starts(config: &Config, topic: &str, since_ms: i64) -> anyhow::Result<Vec<LiveStart>> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer = probe_reader(config, Fetch::OneBatch)?;
    let marks = watermarks(&consumer, servers, topic)?;
    let never = CancellationToken::new();
    let mut lookup = OffsetLookup::new(&consumer, servers, topic, &never);
    let ends = lookup.ends(&marks)?;
    let asks: Vec<_> = ends
        .iter()
        .map(|&(p, low, end)| (p, low, end, since_ms))
        .collect();
    let starts = lookup.first_at_or_after(&asks, 0)?;
    lookup.remember(&ends);
    let out = ends
        .iter()
        .zip(starts)
        .map(|(&(partition, low, end), (start, _))| LiveStart {
            partition,
            start,
            whole: start <= low,
            end,
        })
        .collect();
    Ok(out)
}

/// How many messages a live reader starting at `starts` reads to catch up (the offsets between
/// each start and its end).
pub fn messages_to_read(starts: &[LiveStart]) -> u64 {
    starts.iter().map(|s| (s.end - s.start).max(0) as u64).sum()
}
