//! The columns of each view, written once: the TUI's tables and the headless commands' readable
//! tables show the same cells, and the `/` filter matches the same text. A cell is where a key,
//! a value or a row another system wrote meets the screen: every cell is [escaped](drawn).

use crate::console::format::{age, clock, pttl, short};
use crate::console::read::records::StuckRecord;
use crate::console::read::store::RateSeries;
use crate::console::read::timeline::TimelineEntry;
use crate::lock::LockView;
use crate::stream::lag::PartitionLag;

/// A column: header and the width the TUI gives it (0 = takes the rest).
pub struct Column {
    pub header: &'static str,
    pub width: u16,
}

const fn col(header: &'static str, width: u16) -> Column {
    Column { header, width }
}

pub static TIMELINE: &[Column] = &[
    col("TIME", 12),
    col("LAYER", 6),
    col("SOURCE", 42),
    col("WHAT", 0),
    col("STOPPED BY", 10),
];

/// Cells as every face draws them: each through [`crate::untrusted::escape`], so a value can
/// neither act on the terminal nor split a row.
pub fn drawn(cells: Vec<String>) -> Vec<String> {
    cells
        .into_iter()
        .map(|c| match crate::untrusted::escape(&c) {
            std::borrow::Cow::Borrowed(_) => c,
            std::borrow::Cow::Owned(escaped) => escaped,
        })
        .collect()
}

pub fn timeline_cells(e: &TimelineEntry) -> Vec<String> {
    drawn(vec![
        e.at_ms.map_or_else(|| "now".to_string(), clock),
        e.layer.to_string(),
        e.source.clone(),
        e.summary.clone(),
        e.stopped_by.clone().unwrap_or_default(),
    ])
}

pub static LOCKS: &[Column] = &[
    col("KEY", 0),
    col("SCOPE", 7),
    col("HOLDER", 24),
    col("PID", 7),
    col("HELD", 7),
    col("PTTL", 7),
    // Tokens start from the clock in microseconds (16 digits), plus how far the counter is ahead.
    col("FENCE", 19),
    col("OWNER", 5),
    col("QUORUM", 6),
    col("FLAGS", 22),
];

/// HOLDER, PID, HELD and FENCE of a lock idemguard did not write (`lock/formats.rs`): a
/// Redisson lock's client id, thread id and reentrancy count; a token raw (and the request it
/// names); any other key its type.
fn foreign_cells(l: &LockView) -> (String, String, String, String) {
    use crate::lock::formats::LockFormat;
    let dash = || "-".to_string();
    match &l.format {
        LockFormat::Redisson {
            client_id,
            thread_id,
            count,
            ..
        } => (
            format!("redisson {}", short(client_id, 15)),
            format!("t{thread_id}"),
            format!("×{count}"),
            dash(),
        ),
        LockFormat::Token {
            token, request_id, ..
        } => {
            let shown = match request_id {
                Some(_) => format!("req {}", short(token, 20)),
                None => short(token, 24),
            };
            (shown, dash(), dash(), dash())
        }
        _ => match l.other_type() {
            Some(t) => (format!("({t}, not a lock value)"), dash(), dash(), dash()),
            None => (short(l.value(), 24), dash(), dash(), dash()),
        },
    }
}

pub fn lock_cells(l: &LockView, now_ms: i64) -> Vec<String> {
    let (holder, pid, held, fence) = match l.holder() {
        Some(h) => (
            h.instance.clone(),
            h.pid.to_string(),
            age(now_ms - h.acquired_at),
            h.fence.to_string(),
        ),
        None => foreign_cells(l),
    };
    // A value counted from when this reader first saw it was held at least that long.
    let held = match l.held {
        Some(h) if h.since == crate::lock::HeldSince::FirstSeen => {
            format!("≥{}", age(h.held_ms + (now_ms - l.read_at_ms).max(0)))
        }
        _ => held,
    };
    // The fence counter ahead of the holder's token means a newer holder took a token since.
    let fence = match (l.fence_counter, l.holder()) {
        (Some(c), Some(h)) if c != h.fence => format!("{fence}{:+}", c - h.fence),
        _ => fence,
    };
    // On a Redis Cluster the key says where it lives: its master and its slot.
    let key = match (l.slot, l.nodes.first()) {
        (Some(slot), Some(n)) => format!("{}  @{} slot {slot}", l.key, n.node),
        _ => l.key.clone(),
    };
    drawn(vec![
        key,
        l.scope.to_string(),
        holder,
        pid,
        held,
        pttl(l.pttl_now(now_ms)),
        fence,
        match l.owner_alive {
            Some(true) => "alive".into(),
            Some(false) => "DEAD".into(),
            None => "?".into(),
        },
        l.quorum().map_or_else(
            || "-".into(),
            |q| {
                format!(
                    "{}/{}{}",
                    q.agreeing,
                    q.nodes,
                    if q.reached { "" } else { "!" }
                )
            },
        ),
        l.flags
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(","),
    ])
}

pub static STUCK: &[Column] = &[
    col("REQUEST ID", 0),
    col("AGE", 7),
    col("OWNER", 24),
    col("ALIVE", 5),
    col("LEASE", 12),
    col("REPLAYS", 7),
    col("ORDER", 30),
    col("STATUS", 9),
];

pub fn stuck_cells(s: &StuckRecord, now_ms: i64) -> Vec<String> {
    let left = s.lease_left_ms(now_ms);
    drawn(vec![
        s.request_id.clone(),
        age(s.age_ms(now_ms)),
        s.owner.clone(),
        match s.owner_alive {
            Some(true) => "alive".into(),
            Some(false) => "DEAD".into(),
            None => "?".into(),
        },
        match left {
            Some(left) if left >= 0 => format!("{} left", age(left)),
            Some(left) => format!("over {}", age(-left)),
            None => crate::console::read::records::UNKNOWN.into(),
        },
        crate::console::read::records::or_unknown(s.replay_count),
        s.found_order_no
            .clone()
            .unwrap_or_else(|| "no order".into()),
        s.order_status.clone().unwrap_or_else(|| "-".into()),
    ])
}

pub static RATES: &[Column] = &[
    col("LAYER", 6),
    col("INTERCEPTION", 28),
    col("LAST MIN", 8),
    col("60 MIN", 7),
    col("PER MINUTE (60 MIN)", 0),
];

/// The per-minute counts as block characters, for the headless table.
pub fn sparkline_text(values: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|v| {
            if *v == 0 {
                ' '
            } else if max <= 1 {
                BARS[7]
            } else {
                BARS[((*v - 1) * 7 / (max - 1).max(1)) as usize]
            }
        })
        .collect()
}

pub fn rate_cells(s: &RateSeries) -> Vec<String> {
    vec![
        s.layer.as_str().to_string(),
        s.label.to_string(),
        s.last_minute.to_string(),
        s.total.to_string(),
        sparkline_text(&s.per_minute),
    ]
}

pub static LAG: &[Column] = &[
    col("TOPIC", 0),
    col("PARTITION", 9),
    col("COMMITTED", 10),
    col("END", 10),
    col("LAG", 8),
];

pub fn lag_cells(l: &PartitionLag) -> Vec<String> {
    drawn(vec![
        l.topic.clone(),
        l.partition.to_string(),
        l.committed.map_or_else(|| "-".into(), |c| c.to_string()),
        l.high_watermark.to_string(),
        l.lag.to_string(),
    ])
}

/// The widths of a table's columns in `total` cells (between the borders), column spacing 1:
/// the identifying column `keep` gets `keep_len` (its widest cell on screen) whole; then, left
/// to right while room lasts, each fixed column its width and each `width == 0` column at least
/// [`FILL_MIN`] (then truncated, then hidden); what is left goes to the `width == 0` columns —
/// the identifying one too when it is one of them. At 80 columns a lock's key or a stuck
/// record's request ID stays whole; the rest is cut.
pub fn fit(cols: &[Column], total: u16, keep: usize, keep_len: u16) -> Vec<u16> {
    let n = cols.len();
    let mut avail = total.saturating_sub(n.saturating_sub(1) as u16);
    let mut widths = vec![0u16; n];
    widths[keep] = keep_len.max(cols[keep].width).min(avail);
    avail -= widths[keep];
    for (i, c) in cols.iter().enumerate() {
        if i != keep {
            let want = if c.width > 0 { c.width } else { FILL_MIN };
            widths[i] = want.min(avail);
            avail -= widths[i];
        }
    }
    let fills: Vec<usize> = (0..n).filter(|i| cols[*i].width == 0).collect();
    for (k, i) in fills.iter().enumerate() {
        let share = avail / (fills.len() - k) as u16;
        widths[*i] += share;
        avail -= share;
    }
    widths
}

/// The least a `width == 0` column gets before the fixed columns right of it.
pub const FILL_MIN: u16 = 16;

pub static OVERVIEW: &[Column] = &[col("LAYER", 6), col("STATE", 5), col("WHAT", 0)];

/// A plain text table: headers, then rows, columns padded to their widest cell.
pub fn text_table(columns: &[Column], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.chars().count()).collect();
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(c);
                out.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(columns.iter().map(|c| c.header).collect());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// True when `cells` pass a view's filter (case-insensitive substring; `invert` keeps the rest).
pub fn passes(cells: &[String], needle_lower: &str, invert: bool) -> bool {
    if needle_lower.is_empty() {
        return true;
    }
    let hit = cells
        .iter()
        .any(|c| c.to_lowercase().contains(needle_lower));
    hit != invert
}

pub static AUDIT: &[Column] = &[
    col("TIME", 12),
    col("OPERATOR", 12),
    col("ENV", 8),
    col("ACTION", 12),
    col("TARGET", 44),
    col("OUTCOME", 8),
    col("REASON", 20),
    col("DETAIL", 0),
];

/// Which column of each view identifies its row (kept whole at any width).
pub const TIMELINE_ID: usize = 2;
pub const LOCKS_ID: usize = 0;
pub const STUCK_ID: usize = 0;
pub const AUDIT_ID: usize = 4;
pub const DLQ_ID: usize = 3;

pub static DLQ: &[Column] = &[
    col("AGE", 7),
    col("AT", 10),
    col("SOURCE", 28),
    col("ORDER", 30),
    col("EVENT ID", 36),
    col("REDRIVEN", 14),
    col("NOW", 28),
    // The instance that dead-lettered it (an instance id is `host-pid-tag`); the rest of who it
    // was is in the view's Selected pane and under the headless table ([`dlq_by`]).
    col("BY", 27),
    col("REASON", 0),
];

/// What a message without `dlq.by.*` headers says of who dead-lettered it: not a guess.
pub const DLQ_BY_UNKNOWN: &str = "unknown (no dlq.by headers)";

/// Who sent `m` to the DLQ, on one line: `instance I · host H · group G · idemguard V · at
/// TIME (AGE ago)`, each value escaped and at most [`DLQ_BY_VALUE_MAX`] characters, `?` for one
/// its headers lack; [`DLQ_BY_UNKNOWN`] without any.
pub fn dlq_by(m: &crate::console::read::dlq::DlqMessage, now_ms: i64) -> String {
    let Some(by) = &m.dead_lettered_by else {
        return DLQ_BY_UNKNOWN.into();
    };
    let v = |x: &Option<String>| {
        x.as_deref()
            .map_or("?".into(), |x| short(x, DLQ_BY_VALUE_MAX))
    };
    let at = by.at_ms.map_or("?".into(), |t| {
        format!("{} ({} ago)", clock(t), age(now_ms - t))
    });
    format!(
        "instance {} · host {} · group {} · idemguard {} · at {at}",
        v(&by.instance),
        v(&by.host),
        v(&by.group),
        v(&by.version),
    )
}

/// The headless `dlq`'s second table: each message's position and who dead-lettered it, whole.
pub static DLQ_WHO: &[Column] = &[col("AT", 10), col("DEAD-LETTERED BY", 0)];

pub fn dlq_who_cells(m: &crate::console::read::dlq::DlqMessage, now_ms: i64) -> Vec<String> {
    drawn(vec![
        format!("{}@{}", m.partition, m.offset),
        dlq_by(m, now_ms),
    ])
}

/// At most this many characters of a `dlq.by.*` value are shown (as many as are read).
const DLQ_BY_VALUE_MAX: usize = crate::stream::poison::by::VALUE_MAX;

pub fn dlq_cells(m: &crate::console::read::dlq::DlqMessage, now_ms: i64) -> Vec<String> {
    use crate::console::read::dlq::Verdict;
    let redriven = match (&m.redriven, &m.returned_from) {
        (Some(r), _) => format!("{} #{}", r.outcome, r.audit_id),
        (None, Some(back)) => format!("returned #{}", back.audit_id),
        (None, None) => "no".into(),
    };
    let now = match &m.verdict {
        Verdict::StillPoison {
            same_reason: true, ..
        } => "still poison".into(),
        Verdict::StillPoison { reason, .. } => format!("poison: {reason}"),
        Verdict::WouldApply => "would apply".into(),
        Verdict::WouldBeRejected { status } => format!("would be rejected ({status})"),
        Verdict::AlreadyApplied { how } => format!("already applied: {how}"),
        Verdict::NotLookedUp { why } => format!("? {why}"),
    };
    drawn(vec![
        m.timestamp_ms.map_or("?".into(), |t| age(now_ms - t)),
        format!("{}@{}", m.partition, m.offset),
        // The position first, whole; then the topic it names (the header's, which a redrive
        // refuses unless it is the payment topic).
        m.source.as_ref().map_or("?".into(), |s| {
            format!("{}@{} {}", s.partition, s.offset, s.topic)
        }),
        m.order_no.clone().unwrap_or_default(),
        m.event_id.clone().unwrap_or_default(),
        redriven,
        now,
        match &m.dead_lettered_by {
            Some(by) => by
                .instance
                .as_deref()
                .map_or("?".into(), |i| short(i, DLQ_BY_VALUE_MAX)),
            None => DLQ_BY_UNKNOWN.into(),
        },
        m.reason.clone(),
    ])
}

pub fn audit_cells(r: &crate::ops::AuditRow) -> Vec<String> {
    drawn(vec![
        clock(r.created_at),
        r.operator.clone(),
        r.environment.clone(),
        r.action.clone(),
        r.target.clone(),
        r.outcome.clone(),
        r.reason.clone().unwrap_or_default(),
        r.detail.clone().unwrap_or_default(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identifying_column_stays_whole_and_the_others_are_cut() {
        // Locks at 80 columns: 78 between the borders, a 64-character key.
        let w = fit(LOCKS, 78, LOCKS_ID, 64);
        assert_eq!(w[0], 64);
        assert_eq!(w.iter().sum::<u16>() + (LOCKS.len() as u16 - 1), 78);
        assert_eq!((w[1], w[2]), (5, 0), "{w:?}");
        // Wide: every fixed column its width, the key the rest.
        let w = fit(LOCKS, 168, LOCKS_ID, 30);
        assert_eq!(&w[1..], &[7, 24, 7, 7, 7, 19, 5, 6, 22]);
        assert_eq!(w[0], 168 - 9 - 104);
        // A fixed identifying column grows to its cell; a fill column shares the rest.
        let w = fit(TIMELINE, 168, TIMELINE_ID, 49);
        assert_eq!((w[2], w[3]), (49, 168 - 4 - 12 - 6 - 49 - 10));
        // At 80 columns the timeline's WHAT keeps what is left before STOPPED BY.
        assert_eq!(fit(TIMELINE, 78, TIMELINE_ID, 49), [12, 6, 49, 7, 0]);
        // Narrower than the ID itself: the ID takes everything.
        assert_eq!(fit(STUCK, 40, STUCK_ID, 55)[0], 33);
    }
}
