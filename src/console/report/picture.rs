//! What the HTML report draws of one order, before it is drawn: one lane per line of defense,
//! every row of the timeline as a mark on its layer's lane, the layer that stopped a duplicate
//! marked where it stopped it, lock holds and leases as bars, operator actions as flags, and
//! every copy that got through (a row of a table the leak queries found twice for this order)
//! as a crossing of every lane. Pure: [`super::svg`] lays it out; the tests read it.
//!
//! Texts here are raw (what the sources hold): they are escaped where they are written out.

use serde_json::Value;

use crate::console::read::overview::Leak;
use crate::console::read::timeline::{Timeline, TimelineEntry};
use crate::contracts::format_ms;
use crate::ops::AuditRow;

/// A swimlane. The first five are the lines of defense and always drawn; `Logs` only when the
/// trace holds log lines (they belong to no line of defense).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    Api,
    Locks,
    Database,
    StreamAndSinks,
    Operator,
    Logs,
}

impl Lane {
    /// The lines of defense, top to bottom in the order a request meets them.
    pub const LINES_OF_DEFENSE: [Lane; 5] = [
        Lane::Api,
        Lane::Locks,
        Lane::Database,
        Lane::StreamAndSinks,
        Lane::Operator,
    ];

    /// The lane of a timeline entry's layer.
    pub fn of_layer(layer: &str) -> Lane {
        match layer {
            "api" => Lane::Api,
            "lock" => Lane::Locks,
            "db" => Lane::Database,
            "kafka" | "stream" | "sink" => Lane::StreamAndSinks,
            "console" => Lane::Operator,
            _ => Lane::Logs,
        }
    }

    /// As the picture labels it.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Api => "API",
            Lane::Locks => "locks",
            Lane::Database => "database",
            Lane::StreamAndSinks => "stream and sinks",
            Lane::Operator => "operator",
            Lane::Logs => "logs",
        }
    }

    /// Its id in the SVG (`data-lane`) and the stylesheet.
    pub fn id(self) -> &'static str {
        match self {
            Lane::Api => "api",
            Lane::Locks => "locks",
            Lane::Database => "database",
            Lane::StreamAndSinks => "stream",
            Lane::Operator => "operator",
            Lane::Logs => "logs",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// A row, a decision, a message.
    Event,
    /// A copy of the payment event on the broker.
    KafkaCopy,
    /// A decision that stopped a duplicate: on the lane of the layer that stopped it.
    Stopped,
    /// A copy that got through: drawn across every lane too ([`Crossing`]).
    GotThrough,
}

/// One row of the timeline, drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Its index in the timeline's entries (and its row in the table under the picture).
    pub row: usize,
    pub lane: Lane,
    /// `None`: state without a time of its own, drawn in a column of its own.
    pub at_ms: Option<i64>,
    pub kind: MarkKind,
    pub stopped_by: Option<String>,
    /// Its row of the table, as one line (the `<title>` shown on hover).
    pub title: String,
}

/// A lock held (acquired → released) or a lease (until its end, no release seen).
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub lane: Lane,
    pub from_ms: i64,
    pub to_ms: i64,
    /// False for a lease whose end is a promise, not an observed release.
    pub released: bool,
    pub title: String,
}

/// An operator action on this order.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub at_ms: i64,
    pub label: String,
    pub title: String,
}

/// A copy that got through, drawn across every lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    pub row: usize,
    pub at_ms: i64,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Picture {
    pub marks: Vec<Mark>,
    pub holds: Vec<Hold>,
    pub flags: Vec<Flag>,
    pub crossings: Vec<Crossing>,
    /// Leaks of this order whose extra rows the timeline does not hold: said above the picture.
    pub unplaced_leaks: Vec<String>,
}

impl Picture {
    /// The lanes drawn: the lines of defense, and logs when there are log lines.
    pub fn lanes(&self) -> Vec<Lane> {
        let mut lanes = Lane::LINES_OF_DEFENSE.to_vec();
        if self.marks.iter().any(|m| m.lane == Lane::Logs) {
            lanes.push(Lane::Logs);
        }
        lanes
    }

    /// Every time drawn on the axis.
    pub fn times(&self) -> Vec<i64> {
        let mut times: Vec<i64> = self.marks.iter().filter_map(|m| m.at_ms).collect();
        times.extend(self.holds.iter().flat_map(|h| [h.from_ms, h.to_ms]));
        times.extend(self.flags.iter().map(|f| f.at_ms));
        times
    }
}

/// The cells of a timeline row as the report's tables show them: time, layer, source, what,
/// stopped by.
pub fn row_cells(e: &TimelineEntry) -> [String; 5] {
    [
        e.at_ms.map_or("now".into(), format_ms),
        e.layer.to_string(),
        e.source.clone(),
        e.summary.clone(),
        e.stopped_by.clone().unwrap_or_default(),
    ]
}

/// The picture of one order: its timeline, the leaks of the report, the operator actions.
pub fn picture(t: &Timeline, leaks: &[Leak], actions: &[AuditRow]) -> Picture {
    let (got_through, unplaced_leaks) = leaked_rows(t, leaks);
    let mut p = Picture {
        unplaced_leaks,
        ..Picture::default()
    };
    for (row, e) in t.entries.iter().enumerate() {
        let leak = got_through.iter().find(|(r, _)| *r == row);
        let kind = if leak.is_some() {
            MarkKind::GotThrough
        } else if e.stopped_by.is_some() {
            MarkKind::Stopped
        } else if e.layer == "kafka" {
            MarkKind::KafkaCopy
        } else {
            MarkKind::Event
        };
        let title = row_cells(e)
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>()
            .join(" · ");
        if let (Some((_, leak)), Some(at_ms)) = (leak, e.at_ms) {
            p.crossings.push(Crossing {
                row,
                at_ms,
                title: format!("GOT THROUGH: {leak} · {title}"),
            });
        }
        p.marks.push(Mark {
            row,
            lane: Lane::of_layer(e.layer),
            at_ms: e.at_ms,
            kind,
            stopped_by: e.stopped_by.clone(),
            title,
        });
    }
    p.holds = lock_holds(&t.entries);
    p.holds.extend(t.entries.iter().filter_map(record_hold));
    let names = [t.order_no.as_deref(), t.request_id.as_deref()];
    p.flags = actions
        .iter()
        .filter(|a| names.iter().flatten().any(|n| a.target.contains(n)))
        .map(|a| Flag {
            at_ms: a.created_at,
            label: a.action.clone(),
            title: format!(
                "{} · {} by {} on {} · {}{}",
                format_ms(a.created_at),
                a.action,
                a.operator,
                a.target,
                a.outcome,
                a.reason
                    .as_deref()
                    .map(|r| format!(" · reason: {r}"))
                    .unwrap_or_default()
            ),
        })
        .collect();
    p
}

/// The rows of this order that a leak found twice: every row of the leak's table after the
/// first, in time order. A leak whose rows the timeline does not hold twice is returned as a
/// sentence instead (it is still drawn nowhere else than said).
fn leaked_rows(t: &Timeline, leaks: &[Leak]) -> (Vec<(usize, String)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut unplaced = Vec::new();
    let names = [t.order_no.as_deref(), t.request_id.as_deref()];
    for l in leaks
        .iter()
        .filter(|l| names.contains(&Some(l.key.as_str())))
    {
        let said = format!("{} rows in {} for {} {}", l.rows, l.table, l.by, l.key);
        let mut of_table: Vec<(usize, Option<i64>)> = t
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.source == l.table && e.at_ms.is_some())
            .map(|(i, e)| (i, e.at_ms))
            .collect();
        of_table.sort_by_key(|(i, at)| (*at, *i));
        if of_table.len() < 2 {
            unplaced.push(said);
            continue;
        }
        rows.extend(of_table.into_iter().skip(1).map(|(i, _)| (i, said.clone())));
    }
    (rows, unplaced)
}

/// `name=value` in a trace event's detail (`key=lock:order:… fence=… ttl_ms=30000`).
fn detail_value<'a>(detail: &'a str, name: &str) -> Option<&'a str> {
    detail
        .split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

fn trace_event(e: &TimelineEntry) -> Option<(&str, &str)> {
    if e.source != "trace" {
        return None;
    }
    let outcome = e.fields.get("outcome").and_then(Value::as_str)?;
    let detail = e.fields.get("detail").and_then(Value::as_str).unwrap_or("");
    Some((outcome, detail))
}

/// Each lock acquisition and the release (or loss) of the same key after it; an acquisition
/// with none is a lease until its TTL ran out.
fn lock_holds(entries: &[TimelineEntry]) -> Vec<Hold> {
    let mut holds = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let (Some(("lock_acquired", detail)), Some(from)) = (trace_event(e), e.at_ms) else {
            continue;
        };
        let key = detail_value(detail, "key").unwrap_or("?");
        let end = entries[i + 1..].iter().find_map(|later| {
            let (outcome, d) = trace_event(later)?;
            let ends = matches!(outcome, "lock_released" | "lock_lost");
            (ends && detail_value(d, "key") == Some(key)).then_some((later.at_ms?, outcome))
        });
        let hold = match end {
            Some((to, how)) => Hold {
                lane: Lane::Locks,
                from_ms: from,
                to_ms: to.max(from),
                released: true,
                title: format!("{key} held {} ({how})", span(from, to)),
            },
            None => {
                let ttl = detail_value(detail, "ttl_ms").and_then(|v| v.parse::<i64>().ok());
                Hold {
                    lane: Lane::Locks,
                    from_ms: from,
                    to_ms: from + ttl.unwrap_or(0).max(0),
                    released: false,
                    title: format!(
                        "{key} acquired; no release seen: its lease ran {}",
                        ttl.map_or("? (no ttl_ms in the event)".into(), |t| span(0, t))
                    ),
                }
            }
        };
        holds.push(hold);
    }
    holds
}

/// An idempotency record's claim: PROCESSING from its creation to its last update (finished),
/// or to the end of its lease (still PROCESSING).
fn record_hold(e: &TimelineEntry) -> Option<Hold> {
    if e.source != "idempotency_record" {
        return None;
    }
    let int = |k: &str| e.fields.get(k).and_then(Value::as_i64);
    let created = int("created_at")?;
    let status = e.fields.get("status").and_then(Value::as_str)?;
    let request = e
        .fields
        .get("request_id")
        .and_then(Value::as_str)
        .unwrap_or("?");
    if status == "PROCESSING" {
        let until = int("lease_until")?;
        return Some(Hold {
            lane: Lane::Api,
            from_ms: created,
            to_ms: until.max(created),
            released: false,
            title: format!(
                "record {request} PROCESSING, lease until {}",
                format_ms(until)
            ),
        });
    }
    let done = int("updated_at").filter(|u| *u > created)?;
    Some(Hold {
        lane: Lane::Api,
        from_ms: created,
        to_ms: done,
        released: true,
        title: format!(
            "record {request} PROCESSING for {} → {status}",
            span(created, done)
        ),
    })
}

fn span(from: i64, to: i64) -> String {
    crate::console::format::age(to - from)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    fn entry(at: i64, layer: &'static str, source: &str, fields: Value) -> TimelineEntry {
        TimelineEntry {
            at_ms: Some(at),
            layer,
            source: source.into(),
            summary: format!("{source} at {at}"),
            stopped_by: None,
            fields,
        }
    }

    fn decision(at: i64, layer: &'static str, outcome: &str, detail: &str) -> TimelineEntry {
        let stops = matches!(outcome, "in_flight_rejected" | "replayed" | "dedup_hit");
        TimelineEntry {
            summary: format!("{outcome}: {detail}"),
            stopped_by: stops.then(|| layer.to_string()),
            ..entry(
                at,
                layer,
                "trace",
                json!({ "outcome": outcome, "detail": detail }),
            )
        }
    }

    /// The demo's order, in small: five clicks (one claimed, three rejected, one replayed), the
    /// lock, the order, a payment event copied twice, a dedup hit, and two points rows.
    pub(crate) fn demo_like() -> Timeline {
        let t = 1_796_068_527_912;
        let lock = "key=lock:req:APP:ORDER:20261129:x fence=1 ttl_ms=30000";
        let entries = vec![
            entry(
                t,
                "api",
                "idempotency_record",
                json!({"request_id": "APP:ORDER:20261129:x", "status": "SUCCEEDED", "created_at": t, "updated_at": t + 21}),
            ),
            decision(t + 1, "api", "in_flight_rejected", "fast path"),
            decision(t + 2, "api", "claimed", ""),
            decision(t + 3, "lock", "lock_acquired", lock),
            decision(t + 4, "api", "in_flight_rejected", "fast path"),
            decision(t + 5, "api", "in_flight_rejected", "fast path"),
            entry(t + 9, "db", "order_record", json!({})),
            decision(t + 12, "lock", "lock_released", lock),
            decision(t + 15, "api", "replayed", "fast path: 201"),
            entry(t + 40_000, "kafka", "payment.succeeded p0@1", json!({})),
            entry(t + 40_001, "kafka", "payment.succeeded p0@2", json!({})),
            decision(t + 40_005, "stream", "dedup_hit", "copy 2"),
            entry(t + 40_006, "sink", "points_ledger", json!({})),
            entry(t + 40_900, "sink", "points_ledger", json!({})),
        ];
        Timeline {
            query: "202611290001".into(),
            kind: "order_no",
            order_no: Some("202611290001".into()),
            request_id: Some("APP:ORDER:20261129:x".into()),
            event_ids: vec![],
            found: true,
            partial: false,
            unanswered: vec![],
            entries,
            interceptions: vec![],
            events: vec![],
            read_cost: None,
            warnings: vec![],
        }
    }

    pub(crate) fn points_leak() -> Leak {
        Leak {
            table: "points_ledger".into(),
            by: "order_no".into(),
            key: "202611290001".into(),
            rows: 2,
            first: "e1".into(),
            last: "e2".into(),
        }
    }

    #[test]
    fn every_row_is_a_mark_on_its_layers_lane_and_stopped_ones_say_by_whom() {
        let t = demo_like();
        let p = picture(&t, &[], &[]);
        assert_eq!(p.marks.len(), t.entries.len());
        for (m, e) in p.marks.iter().zip(&t.entries) {
            assert_eq!(m.lane, Lane::of_layer(e.layer));
            assert_eq!(m.kind == MarkKind::Stopped, e.stopped_by.is_some());
        }
        let stopped: Vec<Lane> = p
            .marks
            .iter()
            .filter(|m| m.kind == MarkKind::Stopped)
            .map(|m| m.lane)
            .collect();
        assert_eq!(
            stopped,
            [
                Lane::Api,
                Lane::Api,
                Lane::Api,
                Lane::Api,
                Lane::StreamAndSinks
            ]
        );
        assert!(p.crossings.is_empty() && p.unplaced_leaks.is_empty());
        assert_eq!(p.lanes(), Lane::LINES_OF_DEFENSE);
    }

    #[test]
    fn a_lock_held_and_a_record_claimed_are_bars() {
        let p = picture(&demo_like(), &[], &[]);
        let t = 1_796_068_527_912;
        let lock = p.holds.iter().find(|h| h.lane == Lane::Locks).unwrap();
        assert_eq!(
            (lock.from_ms, lock.to_ms, lock.released),
            (t + 3, t + 12, true)
        );
        let record = p.holds.iter().find(|h| h.lane == Lane::Api).unwrap();
        assert_eq!((record.from_ms, record.to_ms), (t, t + 21));
        // Without its release the lock is a lease for its TTL.
        let mut t2 = demo_like();
        t2.entries.remove(7);
        let lease = picture(&t2, &[], &[]).holds.remove(0);
        assert_eq!((lease.to_ms, lease.released), (t + 3 + 30_000, false));
    }

    #[test]
    fn the_second_row_a_leak_found_is_the_copy_that_got_through() {
        let t = demo_like();
        let p = picture(&t, &[points_leak()], &[]);
        assert_eq!(p.crossings.len(), 1);
        assert_eq!(p.crossings[0].row, 13, "the later points row");
        assert_eq!(p.marks[13].kind, MarkKind::GotThrough);
        assert_eq!(
            p.marks[12].kind,
            MarkKind::Event,
            "the first one is legitimate"
        );
        // A leak whose rows this trace does not hold twice is said, not drawn.
        let other = Leak {
            table: "payment_flow".into(),
            ..points_leak()
        };
        let p = picture(&t, &[other], &[]);
        assert!(p.crossings.is_empty());
        assert_eq!(p.unplaced_leaks.len(), 1);
    }

    #[test]
    fn the_operator_actions_on_this_order_are_flags() {
        let action = |target: &str, at: i64| AuditRow {
            id: at,
            operator: "alice".into(),
            environment: "prod".into(),
            action: "release_lock".into(),
            target: target.into(),
            before_state: None,
            after_state: None,
            reason: Some("stale".into()),
            outcome: "done".into(),
            detail: None,
            created_at: at,
        };
        let actions = [
            action("lock:order:202611290001", 10),
            action("APP:ORDER:20261129:x", 20),
            action("lock:order:someone-else", 30),
        ];
        let p = picture(&demo_like(), &[], &actions);
        let at: Vec<i64> = p.flags.iter().map(|f| f.at_ms).collect();
        assert_eq!(
            at,
            [10, 20],
            "by orderNo and by requestId, not another order's"
        );
        assert!(p.flags[0]
            .title
            .contains("release_lock by alice on lock:order:202611290001"));
        assert!(p.times().contains(&10), "a flag is on the axis");
    }
}
