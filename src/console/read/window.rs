//! Where a trace reads a topic: windows of time around what the database knows, not the whole
//! topic. Measured before this existed, `idemguard trace` of one order took 8.4 s with
//! 500,000 events on the trace topic and failed on its 30 s deadline past ~2,200,000: a trace
//! cost what the topic held, not what the order did.
//!
//! The database rows of the traced IDs carry times (record created and finished, order created
//! and paid, payment booked, outbox sent, event processed, sinks written); every message of the
//! trace was produced around one of them. So each topic is read only in
//! `[t − console.trace_margin, t + console.trace_margin]` around those times, and only in the
//! partitions the traced keys hash to ([`Partitioner`]). An ID the database does not know (an
//! eventId that only lives in Kafka) has no times: it is searched in an explicit window, the
//! `--since/--until` of `idemguard trace` ([`DEFAULT_UNKNOWN_WINDOW`] by default), and the
//! answer says so ([`ReadCost`]).
//!
//! Pure: the reads themselves are in [`kafka`](super::kafka) (the windows' offsets and
//! messages) and [`bounded`](super::bounded) (what is kept).

use std::time::Duration;

use serde::Serialize;

use crate::console::read::records::TraceRows;
use crate::stream::partitioner::Partitioner;

/// The window an ID the database does not know is searched in, when `--since/--until` are not
/// given: the last 24 hours.
pub const DEFAULT_UNKNOWN_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A span of Kafka timestamps, epoch ms, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimeWindow {
    pub from_ms: i64,
    pub to_ms: i64,
}

impl TimeWindow {
    /// `[until − DEFAULT_UNKNOWN_WINDOW, until]`.
    pub fn last_day(until_ms: i64) -> TimeWindow {
        TimeWindow {
            from_ms: until_ms - DEFAULT_UNKNOWN_WINDOW.as_millis() as i64,
            to_ms: until_ms,
        }
    }
}

/// Why a topic is read where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowBasis {
    /// Around the times of the traced IDs' database rows.
    DatabaseTimes,
    /// The database knows no row of the ID: the explicit window (`--since/--until`).
    UnknownIdWindow,
    /// A window asked for, every partition: the rates' last hour, a window report's incident.
    ExplicitWindow,
}

/// What one read of a topic for a trace is to cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPlan {
    pub topic: String,
    pub basis: WindowBasis,
    /// Sorted, disjoint.
    pub windows: Vec<TimeWindow>,
    /// The message keys whose partitions hold the trace; empty: every partition.
    pub keys: Vec<String>,
    pub partitioner: Partitioner,
    /// Partitions the database says a message of the trace was read from (`processed_event`):
    /// read as well, whatever the partitioner says (a producer may have chosen the partition
    /// itself).
    pub known_partitions: Vec<i32>,
}

impl TopicPlan {
    /// True for a trace's read: it keeps only the messages that name its IDs, so a partition
    /// small enough is read whole rather than its offsets looked up
    /// ([`kafka::plan`](super::kafka::plan)). A read of a window for its rates or a report keeps
    /// every message: its edges stay exact.
    pub fn selects_by_id(&self) -> bool {
        self.basis != WindowBasis::ExplicitWindow
    }

    /// The partitions to read among `partitions`; `None`: all of them.
    pub fn partitions(&self, partitions: i32) -> Option<Vec<i32>> {
        let mut out = partitions_of(&self.keys, self.partitioner, partitions)?;
        out.extend(self.known_partitions.iter().filter(|p| **p < partitions));
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
}

/// How one topic was read: the answer to "why was this trace slow".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicCost {
    pub topic: String,
    pub basis: WindowBasis,
    pub windows: Vec<TimeWindow>,
    pub partitions_total: usize,
    pub partitions_read: Vec<i32>,
    /// `offsets_for_times` when the broker's time index answered (and its answer checked out);
    /// `interpolation_search` when its answer failed the check (one message's timestamp read
    /// per probe, see [`kafka::offsets`](super::kafka::offsets)); `read_whole` when the
    /// partitions were small enough to read whole and no offset was looked up.
    pub offset_lookup: &'static str,
    /// Messages read to check the broker's offsets, or to search for them where it answered
    /// falsely.
    pub offset_probes: u64,
    /// The requests the read sent the brokers.
    pub round_trips: RoundTrips,
    /// Messages read inside the windows.
    pub messages_scanned: u64,
    /// Why every partition was read after all, when the partition of the traced keys turned
    /// out not to hold the topic's messages (unkeyed messages, keys the partitioner does not
    /// put there): the partitions added were read in the same windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions_widened: Option<String>,
    /// Where the read's time went.
    pub times: ReadTimes,
}

/// The requests a read sent the brokers — its round trips — by kind (librdkafka's count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoundTrips {
    /// Every request: these three and the rest (API versions, …).
    pub total: u64,
    pub metadata: u64,
    pub list_offsets: u64,
    pub fetch: u64,
}

/// For people: "9 round trip(s): 2 metadata, 3 list offsets, 4 fetch".
impl std::fmt::Display for RoundTrips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} round trip(s): {} metadata, {} list offsets, {} fetch",
            self.total, self.metadata, self.list_offsets, self.fetch
        )
    }
}

impl RoundTrips {
    pub fn add(&mut self, other: &RoundTrips) {
        self.total += other.total;
        self.metadata += other.metadata;
        self.list_offsets += other.list_offsets;
        self.fetch += other.fetch;
    }
}

/// Where one topic's read spent its time, ms: a slow trace says which part was slow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReadTimes {
    /// The reader, the topic's metadata and watermarks, each partition's exact end.
    pub setup_ms: u64,
    /// Finding the windows' offsets (the probes).
    pub lookup_ms: u64,
    /// Waiting, offsets found, for what to keep: the trace topic read beside the payment topic
    /// waits for the IDs the payment messages add ([`ReadCost::concurrent`]); 0 otherwise.
    pub wait_ms: u64,
    /// Reading the windows.
    pub scan_ms: u64,
}

/// How a trace read the topics (`read_cost` of the `trace` document).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReadCost {
    pub topics: Vec<TopicCost>,
    /// The topics were read at the same time (the database rows named the order and the
    /// request, so the trace topic's partitions and windows did not depend on the payment
    /// topic's answer): their times overlap, and the read took about the longest topic's
    /// `setup + lookup + wait + scan`, not their sum. False: one after the other.
    pub concurrent: bool,
    /// Set when the database knew no row of the ID: the topics were searched in this window
    /// only, and an older message of the ID would not be found.
    pub unknown_id_window: Option<TimeWindow>,
    /// With `unknown_id_window`: the database has rows of the ID, but none carries a time.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rows_without_time: bool,
    /// Set when no row carried the payment's own time: the window searched forward from the
    /// last time the rows carry (`console.forward_search`), part of `windows`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward_search: Option<TimeWindow>,
    /// The requests the topics' reads sent the brokers, all together.
    pub round_trips: RoundTrips,
}

impl TopicCost {
    /// How the read found its offsets, for people.
    pub fn offsets_found_by(&self) -> &'static str {
        match self.offset_lookup {
            "offsets_for_times" => "offsets by the broker's time index",
            "interpolation_search" => {
                "offsets by interpolation search (the broker's failed its check)"
            }
            _ => "partitions small enough to read whole",
        }
    }
}

impl ReadCost {
    /// `topic`'s read, counted in.
    pub fn add_topic(&mut self, topic: TopicCost) {
        self.round_trips.add(&topic.round_trips);
        self.topics.push(topic);
    }

    pub fn messages_scanned(&self) -> u64 {
        self.topics.iter().map(|t| t.messages_scanned).sum()
    }
}

/// Every time the rows carry, epoch ms.
pub fn row_times(rows: &TraceRows) -> Vec<i64> {
    let mut t = Vec::new();
    for r in &rows.idempotency {
        t.extend([Some(r.created_at), r.updated_at].into_iter().flatten());
    }
    for o in &rows.orders {
        t.extend([Some(o.created_at), o.updated_at].into_iter().flatten());
    }
    t.extend(rows.stock_movements.iter().map(|s| s.created_at));
    t.extend(rows.payments.iter().map(|p| p.created_at));
    for o in &rows.outbox {
        t.push(o.created_at);
        t.extend(o.sent_at);
    }
    t.extend(rows.processed.iter().map(|p| p.processed_at));
    t.extend(rows.points.iter().map(|p| p.created_at));
    t.extend(rows.notifications.iter().map(|n| n.created_at));
    t.retain(|&ms| ms > 0);
    t
}

/// Where a step whose time the rows do not carry is searched: forward from the last time they
/// do carry, `forward` long. The article's `order_record` has only `created_at`: an order whose
/// payment, processing and sink rows are all missing (a callback that failed, a table the team
/// does not have) still has its payment events found when they come twenty minutes — or hours,
/// as providers repeat callbacks — after the order. `None` when a row carries the payment's
/// time, there is no time at all, or `forward` is zero — and when the rows can speak for the
/// consumer ([`consumer_decisions_shown`]): its every decision on a payment event (applied,
/// rejected, dead-lettered) is a `processed_event` row naming the order, whose time gets a
/// window of its own, so no such row says no payment was consumed for the order, late or not.
/// Searched blindly, the two hours after an unpaid order cost a trace 224,000 messages read
/// and half a second on topics of 20 M events a week, against 34,000 without them
/// (BENCHMARKS.md). A payment still waiting in the consumer's lag is the lag's to show (the
/// Overview), not a trace window's.
pub fn forward_window(rows: &TraceRows, forward: Duration) -> Option<TimeWindow> {
    let payment_timed = !rows.payments.is_empty()
        || !rows.processed.is_empty()
        || !rows.points.is_empty()
        || !rows.notifications.is_empty()
        || rows
            .orders
            .iter()
            .any(|o| o.updated_at.is_some_and(|u| u > o.created_at));
    if payment_timed || forward.is_zero() || consumer_decisions_shown(rows) {
        return None;
    }
    let last = row_times(rows).into_iter().max()?;
    Some(TimeWindow {
        from_ms: last,
        to_ms: last + forward.as_millis() as i64,
    })
}

/// The rows were read from a database that shows every table a trace reads — the consumer's
/// decisions (`processed_event`) among them: no table of the source profile was marked absent
/// or refused to the console's role, so a decision that is not there was not made. (Rows of
/// decisions older than `consumer.dedup_ttl` are deleted; so are the topic's messages past its
/// retention, seven days by default.)
pub fn consumer_decisions_shown(rows: &TraceRows) -> bool {
    rows.unavailable.is_empty()
}

/// `windows` sorted and merged where they touch or overlap.
pub fn merge_windows(mut windows: Vec<TimeWindow>) -> Vec<TimeWindow> {
    windows.sort_by_key(|w| w.from_ms);
    let mut out: Vec<TimeWindow> = Vec::new();
    for w in windows {
        match out.last_mut() {
            Some(last) if w.from_ms <= last.to_ms + 1 => last.to_ms = last.to_ms.max(w.to_ms),
            _ => out.push(w),
        }
    }
    out
}

/// `[t − margin, t + margin]` around each time, overlapping windows merged, oldest first.
pub fn windows_around(times: &[i64], margin: Duration) -> Vec<TimeWindow> {
    let m = margin.as_millis() as i64;
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<TimeWindow> = Vec::new();
    for t in sorted {
        let w = TimeWindow {
            from_ms: t - m,
            to_ms: t + m,
        };
        match out.last_mut() {
            Some(last) if w.from_ms <= last.to_ms + 1 => last.to_ms = last.to_ms.max(w.to_ms),
            _ => out.push(w),
        }
    }
    out
}

/// The partitions `keys` hash to among `partitions`; `None` (read them all) when there is no key
/// or one cannot be computed.
pub fn partitions_of(
    keys: &[String],
    partitioner: Partitioner,
    partitions: i32,
) -> Option<Vec<i32>> {
    if keys.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for k in keys {
        out.push(partitioner.partition_of(k.as_bytes(), partitions)?);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Offset ranges `[start, end)` of one partition, merged where they touch or overlap.
pub fn merge_ranges(mut ranges: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    ranges.retain(|(s, e)| e > s);
    ranges.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_around_close_times_merge_and_far_ones_stay_apart() {
        let m = Duration::from_secs(10);
        let w = windows_around(&[50_000, 1_000_000, 45_000, 60_000], m);
        assert_eq!(
            w,
            [
                TimeWindow {
                    from_ms: 35_000,
                    to_ms: 70_000
                },
                TimeWindow {
                    from_ms: 990_000,
                    to_ms: 1_010_000
                }
            ]
        );
        assert!(windows_around(&[], m).is_empty());
    }

    #[test]
    fn the_partitions_of_keys_are_those_of_the_partitioner_or_all() {
        let keys = vec!["21".to_string(), "foobar".to_string()];
        // murmur2: "21" → 0 of 3; "foobar" → (-790332482 & 0x7fffffff) % 3 = 1357151166 % 3 = 0
        assert_eq!(
            partitions_of(&keys, Partitioner::Murmur2Random, 3),
            Some(vec![0])
        );
        assert_eq!(partitions_of(&[], Partitioner::Murmur2Random, 3), None);
        assert_eq!(partitions_of(&keys, Partitioner::None, 3), None);
    }

    #[test]
    fn offset_ranges_merge_where_they_overlap() {
        assert_eq!(
            merge_ranges(vec![(10, 20), (0, 5), (15, 30), (40, 40), (30, 35)]),
            [(0, 5), (10, 35)]
        );
    }

    /// An order without a payment-side row is searched forward from its last time — where the
    /// database cannot show the consumer's decisions; one whose payment row carries the time is
    /// not, nor one whose database shows that the consumer decided on no payment of it.
    #[test]
    fn a_step_without_a_time_is_searched_forward_only_where_no_row_can_say_it() {
        use crate::console::read::records::{OrderRow, PaymentFlowRow};
        let order = OrderRow {
            req_id: "r".into(),
            order_no: "o".into(),
            user_id: None,
            sku_id: None,
            quantity: None,
            amount: None,
            status: "CREATED".into(),
            version: None,
            fence: None,
            payment_event_id: None,
            created_at: 1_000_000,
            updated_at: None,
        };
        let mut rows = TraceRows {
            orders: vec![order],
            ..TraceRows::default()
        };
        let hour = Duration::from_secs(3600);
        assert_eq!(
            forward_window(&rows, hour),
            None,
            "every table read, no decision of the consumer names the order: nothing to search"
        );
        rows.unavailable
            .push("the consumer's decisions: not shown (processed_event marked absent)".into());
        assert_eq!(
            forward_window(&rows, hour),
            Some(TimeWindow {
                from_ms: 1_000_000,
                to_ms: 4_600_000
            })
        );
        assert_eq!(forward_window(&rows, Duration::ZERO), None);
        rows.payments.push(PaymentFlowRow {
            pay_no: "p".into(),
            order_no: "o".into(),
            amount: 1,
            status: "SUCCESS".into(),
            event_id: "e".into(),
            created_at: 2_200_000,
        });
        assert_eq!(forward_window(&rows, hour), None);
    }
}
