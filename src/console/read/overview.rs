//! What is wrong now, across the three layers: the on-call's first screen (the TUI's Overview)
//! and the queries the post-incident report shares with it.
//!
//! Two halves: the database reads of what only the tables can tell — duplicates that got through
//! ([`leaks`], two effects for one requestId or one order in any table) and records whose status
//! contradicts the orders ([`contradictions`]) — and [`findings`], a pure function from what the
//! collectors already read (leaks, stuck records, the lock scan, the consumer lag, the trace
//! log's rates) to the lines of the Overview, each naming where Enter takes the operator.

use serde::Serialize;
use sqlx::Row;

use crate::contracts::{Outcome, TraceTarget};
use crate::db::Database;
use crate::lock::{LockFlag, LockScan};
use crate::stream::lag::PartitionLag;

use crate::console::format::{age, short};
use crate::console::read::records::{query_error, StuckRecord};
use crate::console::read::store::RateTable;

/// How far back the Overview looks for duplicates that got through.
pub const LEAK_WINDOW_MS: i64 = 24 * 3_600_000;
/// The "last minutes" the Overview compares with the hour.
pub const RECENT_MINUTES: usize = 5;
/// Items listed one per line under a finding; the rest are counted (Enter opens the view).
pub const ITEMS_LISTED: usize = 3;

/// A duplicate that got through: `rows` effects for one `key` in `table`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leak {
    pub table: String,
    /// The column the rows share: `req_id` or `order_no`.
    pub by: String,
    pub key: String,
    pub rows: i64,
    /// The smallest and largest distinguishing value of the rows (pay_no, source_event_no,
    /// event_id, order_no): with two rows, both duplicates named.
    pub first: String,
    pub last: String,
}

impl Leak {
    /// What to trace to see it: the requestId or the order the rows share.
    pub fn target(&self) -> TraceTarget {
        if self.by == "req_id" {
            TraceTarget::RequestId(self.key.clone())
        } else {
            TraceTarget::OrderNo(self.key.clone())
        }
    }
}

/// The leak statements, one per table: a table the source profile marks absent is skipped.
pub const LEAK_QUERIES: [&str; 5] = [
    "report_leaks_order",
    "report_leaks_stock",
    "report_leaks_payment",
    "report_leaks_points",
    "report_leaks_notification",
];

/// Duplicates that got through among the rows created in `[since_ms, until_ms)`, in the tables
/// the source profile has.
pub async fn leaks(db: &Database, since_ms: i64, until_ms: i64) -> anyhow::Result<Vec<Leak>> {
    let mut out = Vec::new();
    for name in LEAK_QUERIES
        .iter()
        .filter(|n| db.queries.missing(n).is_none())
    {
        let read = sqlx::query(db.sql(name))
            .bind(since_ms)
            .bind(until_ms)
            .fetch_all(&db.pool);
        let rows = db
            .bounded(read)
            .await
            .map_err(|e| query_error(db, name, e))?;
        for r in &rows {
            out.push(Leak {
                table: r.try_get("tbl")?,
                by: r.try_get("by_col")?,
                key: r.try_get("dup_key")?,
                rows: r.try_get("n_rows")?,
                first: r.try_get("first_row")?,
                last: r.try_get("last_row")?,
            });
        }
    }
    Ok(out)
}

/// An idempotency record whose status contradicts the order tables: FAILED although an order
/// exists for its request id (the client was told to send a new key, so a second order may
/// follow: a duplicate risk), or SUCCEEDED although its order does not exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contradiction {
    pub request_id: String,
    pub status: String,
    /// The order that exists (FAILED) or that the record names (SUCCEEDED); empty if none.
    pub order_no: String,
    /// `failed_with_order` or `succeeded_without_order`.
    pub problem: String,
}

pub async fn contradictions(
    db: &Database,
    since_ms: i64,
    until_ms: i64,
) -> anyhow::Result<Vec<Contradiction>> {
    const STATEMENT: &str = "report_contradictions";
    let read = sqlx::query(db.sql(STATEMENT))
        .bind(since_ms)
        .bind(until_ms)
        .bind(10_000_i64)
        .fetch_all(&db.pool);
    let rows = db
        .bounded(read)
        .await
        .map_err(|e| query_error(db, STATEMENT, e))?;
    let found: Result<Vec<Contradiction>, sqlx::Error> = rows
        .iter()
        .map(|r| {
            Ok(Contradiction {
                request_id: r.try_get("request_id")?,
                status: r.try_get("status")?,
                order_no: r.try_get("order_no")?,
                problem: r.try_get("problem")?,
            })
        })
        .collect();
    Ok(found?)
}

/// Where Enter on a finding goes. The views are named here, not imported: `read/` knows no face.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jump {
    Trace(TraceTarget),
    Locks,
    Stuck,
    Rates,
    /// The DLQ's messages, each with what the consumer would do with it now.
    Dlq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Nothing wrong here (said, so a quiet screen is not mistaken for a broken one).
    Ok,
    /// Not known: a source has not answered.
    Unknown,
    Warn,
    Bad,
}

/// One line of the Overview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `api`, `lock`, `db`, `kafka` or `stream`.
    pub layer: &'static str,
    pub severity: Severity,
    pub text: String,
    pub jump: Option<Jump>,
    /// One of the items under the finding above it (a record, a lock, a leak), drawn under it.
    pub item: bool,
}

fn finding(layer: &'static str, severity: Severity, text: String, jump: Option<Jump>) -> Finding {
    Finding {
        layer,
        severity,
        text,
        jump,
        item: false,
    }
}

/// An item under a finding: its ID first, so a narrow screen cuts the rest, not the ID.
fn item(layer: &'static str, severity: Severity, text: String, jump: Jump) -> Finding {
    Finding {
        item: true,
        ..finding(layer, severity, text, Some(jump))
    }
}

/// What the collectors read so far; `None` = not read yet, `Err` = the source failed.
pub struct OverviewInput<'a> {
    pub leaks: Option<&'a Result<Vec<Leak>, String>>,
    pub stuck: Option<&'a [StuckRecord]>,
    pub locks: Option<&'a LockScan>,
    pub lag: Option<&'a Result<Vec<PartitionLag>, String>>,
    pub rates: &'a RateTable,
    /// Set while the trace topic's last hour is still being read (what is being read): the
    /// rates are not shown until it is, never a 0 that looks like "nothing happened".
    pub rates_reading: Option<&'a str>,
    /// `foreign_locks.patterns`: where a team's lock key names its order or request.
    pub lock_patterns: &'a [String],
    pub now_ms: i64,
}

/// The Overview's lines, worst first within each kind: leaks, stuck records, locks, the DLQ,
/// consumer lag, the interception rates.
pub fn findings(i: &OverviewInput<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    leak_findings(i, &mut out);
    stuck_findings(i, &mut out);
    lock_findings(i, &mut out);
    dlq_and_rate_findings(i, &mut out);
    lag_findings(i, &mut out);
    out
}

fn leak_findings(i: &OverviewInput<'_>, out: &mut Vec<Finding>) {
    let hours = LEAK_WINDOW_MS / 3_600_000;
    match i.leaks {
        None => out.push(finding(
            "db",
            Severity::Unknown,
            "duplicates that got through: reading …".into(),
            None,
        )),
        Some(Err(e)) => out.push(finding(
            "db",
            Severity::Unknown,
            format!("duplicates that got through: unknown — {e}"),
            None,
        )),
        Some(Ok(l)) if l.is_empty() => out.push(finding(
            "db",
            Severity::Ok,
            format!("no duplicate got through in the last {hours} h"),
            None,
        )),
        Some(Ok(l)) => {
            out.push(finding(
                "db",
                Severity::Bad,
                format!("{} duplicate(s) GOT THROUGH in the last {hours} h", l.len()),
                None,
            ));
            for leak in l {
                let text = format!(
                    "{} — {} rows in {} by {} ({} … {})",
                    leak.key, leak.rows, leak.table, leak.by, leak.first, leak.last
                );
                out.push(item("db", Severity::Bad, text, Jump::Trace(leak.target())));
            }
        }
    }
}

fn stuck_findings(i: &OverviewInput<'_>, out: &mut Vec<Finding>) {
    let Some(stuck) = i.stuck else {
        out.push(finding(
            "api",
            Severity::Unknown,
            "stuck records: reading …".into(),
            None,
        ));
        return;
    };
    if stuck.is_empty() {
        out.push(finding(
            "api",
            Severity::Ok,
            "no stuck PROCESSING record".into(),
            Some(Jump::Stuck),
        ));
        return;
    }
    let dead = stuck
        .iter()
        .filter(|s| s.owner_alive == Some(false))
        .count();
    let text = format!(
        "{} stuck PROCESSING record(s), {dead} with a dead owner",
        stuck.len()
    );
    out.push(finding("api", Severity::Warn, text, Some(Jump::Stuck)));
    for s in stuck.iter().take(ITEMS_LISTED) {
        let owner = match s.owner_alive {
            Some(true) => "alive",
            Some(false) => "DEAD",
            None => "owner?",
        };
        let text = format!(
            "{owner} {} · {} · held by {}{}",
            s.request_id,
            age(s.age_ms(i.now_ms)),
            short(&s.owner, 24),
            if s.order_exists {
                " · its order exists"
            } else {
                ""
            }
        );
        let severity = if s.owner_alive == Some(false) {
            Severity::Bad
        } else {
            Severity::Warn
        };
        let jump = Jump::Trace(TraceTarget::RequestId(s.request_id.clone()));
        out.push(item("api", severity, text, jump));
    }
    more(out, "api", stuck.len(), Jump::Stuck);
}

fn more(out: &mut Vec<Finding>, layer: &'static str, n: usize, jump: Jump) {
    if n > ITEMS_LISTED {
        out.push(finding(
            layer,
            Severity::Warn,
            format!("… {} more", n - ITEMS_LISTED),
            Some(jump),
        ));
    }
}

fn lock_findings(i: &OverviewInput<'_>, out: &mut Vec<Finding>) {
    let Some(scan) = i.locks else {
        out.push(finding(
            "lock",
            Severity::Unknown,
            "locks: scanning …".into(),
            None,
        ));
        return;
    };
    let bad: Vec<_> = scan
        .locks
        .iter()
        .filter(|l| {
            l.flags.iter().any(|f| {
                matches!(
                    f,
                    LockFlag::DeadOwner | LockFlag::NoTtl | LockFlag::HeldLong
                )
            })
        })
        .collect();
    if bad.is_empty() {
        let text = format!(
            "{} lock(s), none with a dead owner or without a TTL",
            scan.locks.len()
        );
        out.push(finding("lock", Severity::Ok, text, Some(Jump::Locks)));
        return;
    }
    let count = |flag| bad.iter().filter(|l| l.flags.contains(&flag)).count();
    let mut text = format!(
        "{} lock(s) with a dead owner, {} without a TTL",
        count(LockFlag::DeadOwner),
        count(LockFlag::NoTtl)
    );
    // A lock renewed for ever: its PTTL looks healthy, only its holding time gives it away.
    if count(LockFlag::HeldLong) > 0 {
        text.push_str(&format!(
            ", {} held past console.lock_held_warning",
            count(LockFlag::HeldLong)
        ));
    }
    out.push(finding("lock", Severity::Bad, text, Some(Jump::Locks)));
    for l in bad.iter().take(ITEMS_LISTED) {
        let flags: Vec<&str> = l.flags.iter().map(|f| f.as_str()).collect();
        let jump = match super::locks::ids_of(l, i.lock_patterns) {
            (Some(o), _) => Jump::Trace(TraceTarget::OrderNo(o)),
            (_, Some(r)) => Jump::Trace(TraceTarget::RequestId(r)),
            _ => Jump::Locks,
        };
        let text = format!("{} {}", l.key, flags.join(","));
        out.push(item("lock", Severity::Bad, text, jump));
    }
    more(out, "lock", bad.len(), Jump::Locks);
}

/// The DLQ over the hour, and each interception whose last minutes run above its hour.
fn dlq_and_rate_findings(i: &OverviewInput<'_>, out: &mut Vec<Finding>) {
    if let Some(reading) = i.rates_reading {
        let text = format!("DLQ and interceptions: {reading}");
        out.push(finding(
            "stream",
            Severity::Unknown,
            text,
            Some(Jump::Rates),
        ));
        return;
    }
    let recent = |per_minute: &[u64]| -> u64 { per_minute.iter().rev().take(RECENT_MINUTES).sum() };
    let dlq: u64 = i
        .rates
        .series
        .iter()
        .filter(|s| s.outcome == Outcome::Dlq)
        .map(|s| s.total)
        .sum();
    let (severity, text) = if dlq == 0 {
        (
            Severity::Ok,
            format!(
                "no message sent to the DLQ in the last {} min",
                i.rates.window_minutes
            ),
        )
    } else {
        (
            Severity::Bad,
            format!(
                "{dlq} message(s) sent to the DLQ in the last {} min",
                i.rates.window_minutes
            ),
        )
    };
    // Messages in the DLQ are stuck work: Enter opens them; none: the rates say so.
    let jump = if dlq == 0 { Jump::Rates } else { Jump::Dlq };
    out.push(finding("stream", severity, text, Some(jump)));
    if let Some(w) = &i.rates.undecodable_warning {
        // Rates of 0 from a topic of other messages would read as "nothing happened".
        out.push(finding(
            "kafka",
            Severity::Warn,
            w.clone(),
            Some(Jump::Rates),
        ));
    }
    let mut any = false;
    for s in i
        .rates
        .series
        .iter()
        .filter(|s| s.outcome != Outcome::Dlq && s.total > 0)
    {
        let last = recent(&s.per_minute);
        // The hour's pace over the same number of minutes.
        let usual = s.total as f64 * RECENT_MINUTES as f64 / i.rates.window_minutes.max(1) as f64;
        let rising = last >= 3 && last as f64 > 2.0 * usual;
        any = true;
        let text = format!(
            "{}: {last} in the last {RECENT_MINUTES} min · {} in the hour{}",
            s.label,
            s.total,
            if rising { " · RISING" } else { "" }
        );
        let severity = if rising { Severity::Warn } else { Severity::Ok };
        out.push(finding(s.layer.as_str(), severity, text, Some(Jump::Rates)));
    }
    if !any {
        out.push(finding(
            "api",
            Severity::Ok,
            format!(
                "no duplicate intercepted in the last {} min",
                i.rates.window_minutes
            ),
            Some(Jump::Rates),
        ));
    }
}

/// The consumer's lag, as [`crate::stream::lag`] reads it for the metrics too: a line per
/// partition behind, with its figure (where the group committed nothing the figure counts from
/// the partition's start, where the consumer will begin), or one line saying it is caught up.
/// Unknown only when the broker did not answer — and then the line says that, never "no lag".
fn lag_findings(i: &OverviewInput<'_>, out: &mut Vec<Finding>) {
    match i.lag {
        None => out.push(finding(
            "kafka",
            Severity::Unknown,
            "consumer lag: reading …".into(),
            None,
        )),
        Some(Err(e)) => out.push(finding(
            "kafka",
            Severity::Unknown,
            format!("consumer lag unknown — {e}"),
            Some(Jump::Rates),
        )),
        Some(Ok(parts)) => {
            let behind: Vec<_> = parts.iter().filter(|p| p.lag > 0).collect();
            if behind.is_empty() {
                out.push(finding(
                    "kafka",
                    Severity::Ok,
                    format!("consumer lag 0 on {} partition(s)", parts.len()),
                    Some(Jump::Rates),
                ));
            }
            for p in behind {
                let from = if p.committed.is_none() {
                    " (nothing committed yet: counted from the partition's start)"
                } else {
                    ""
                };
                let text = format!(
                    "consumer lag {} on p{} of {}{from}",
                    p.lag, p.partition, p.topic
                );
                out.push(finding("kafka", Severity::Warn, text, Some(Jump::Rates)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::read::store::RateSeries;
    use crate::contracts::Layer;

    fn rates(series: Vec<RateSeries>) -> RateTable {
        RateTable {
            window_minutes: 60,
            first_minute_ms: 0,
            events_seen: 0,
            undecodable: 0,
            undecodable_warning: None,
            series,
        }
    }

    fn series(outcome: Outcome, per_minute: Vec<u64>) -> RateSeries {
        let total = per_minute.iter().sum();
        RateSeries {
            layer: Layer::Api,
            outcome,
            label: "replayed",
            last_minute: *per_minute.last().unwrap(),
            per_minute,
            total,
        }
    }

    #[test]
    fn a_leak_is_a_bad_line_that_traces_its_key() {
        let leaks = Ok(vec![Leak {
            table: "payment_flow".into(),
            by: "order_no".into(),
            key: "O1".into(),
            rows: 2,
            first: "P1".into(),
            last: "P2".into(),
        }]);
        let r = rates(vec![]);
        let f = findings(&OverviewInput {
            leaks: Some(&leaks),
            stuck: Some(&[]),
            locks: None,
            lag: None,
            rates: &r,
            rates_reading: None,
            lock_patterns: &[],
            now_ms: 0,
        });
        let leak = f.iter().find(|l| l.text.contains("payment_flow")).unwrap();
        assert_eq!(
            (leak.severity, leak.jump.clone()),
            (
                Severity::Bad,
                Some(Jump::Trace(TraceTarget::OrderNo("O1".into())))
            )
        );
    }

    /// The consumer lag's lines, as the Overview says them.
    fn lag_lines(lag: &Result<Vec<PartitionLag>, String>) -> Vec<(Severity, String)> {
        let r = rates(vec![]);
        findings(&OverviewInput {
            leaks: None,
            stuck: None,
            locks: None,
            lag: Some(lag),
            rates: &r,
            rates_reading: None,
            lock_patterns: &[],
            now_ms: 0,
        })
        .into_iter()
        .filter(|l| l.text.starts_with("consumer lag"))
        .map(|l| (l.severity, l.text))
        .collect()
    }

    /// The lag is said as the reader read it: a partition the group committed nothing on has its
    /// figure from the partition's start, a caught-up group is said to be; "unknown" only when
    /// the broker did not answer, and the line says it did not.
    #[test]
    fn lag_is_said_as_read_and_unknown_only_when_the_broker_did_not_answer() {
        let part = |partition, committed, high_watermark, lag| PartitionLag {
            topic: "t".into(),
            partition,
            high_watermark,
            committed,
            lag,
        };
        let behind = Ok(vec![
            part(0, None, 5, 5),
            part(1, Some(7), 10, 3),
            part(2, Some(4), 4, 0),
        ]);
        assert_eq!(
            lag_lines(&behind),
            [
                (
                    Severity::Warn,
                    "consumer lag 5 on p0 of t (nothing committed yet: counted from the partition's start)".to_string()
                ),
                (Severity::Warn, "consumer lag 3 on p1 of t".to_string()),
            ]
        );
        let caught_up = Ok(vec![part(0, Some(5), 5, 0)]);
        assert_eq!(
            lag_lines(&caught_up),
            [(Severity::Ok, "consumer lag 0 on 1 partition(s)".to_string())]
        );
        let silent = Err(crate::stream::lag::LagFailure::Committed {
            servers: "127.0.0.1:9092".into(),
            group: "g".into(),
            topic: "t".into(),
            within: std::time::Duration::from_secs(3),
            error: rdkafka::error::KafkaError::OffsetFetch(
                rdkafka::error::RDKafkaErrorCode::RequestTimedOut,
            ),
        }
        .to_string());
        let said = lag_lines(&silent);
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].0, Severity::Unknown);
        assert!(
            said[0].1.starts_with(
                "consumer lag unknown — kafka 127.0.0.1:9092 did not answer with group g's committed offsets on topic t within 3s"
            ),
            "{said:?}"
        );
    }

    /// A team's lock without a TTL, under its own key pattern: the Overview's line jumps to the
    /// trace of the order its key names, as Enter on the Locks view does.
    #[test]
    fn a_bad_foreign_lock_jumps_to_the_order_its_key_names() {
        use crate::config::LockMode;
        use crate::lock::LockView;
        let node = LockView::held_on("127.0.0.1:6379", "3f2b8c1e-token".into(), -1);
        let view = LockView::new(
            "order:lock:O7".into(),
            LockMode::Single,
            vec![node],
            None,
            0,
        );
        let scan = LockScan {
            locks: vec![view],
            ..LockScan::default()
        };
        let r = rates(vec![]);
        let input = |patterns| OverviewInput {
            leaks: None,
            stuck: None,
            locks: Some(&scan),
            lag: None,
            rates: &r,
            rates_reading: None,
            lock_patterns: patterns,
            now_ms: 0,
        };
        let jump_of = |f: Vec<Finding>| {
            f.into_iter()
                .find(|l| l.text.starts_with("order:lock:O7"))
                .and_then(|l| l.jump)
        };
        let patterns = vec!["order:lock:{orderNo}".to_string()];
        assert_eq!(
            jump_of(findings(&input(&patterns))),
            Some(Jump::Trace(TraceTarget::OrderNo("O7".into())))
        );
        assert_eq!(jump_of(findings(&input(&[]))), Some(Jump::Locks));
    }

    /// A lock renewed for ever (its PTTL healthy) held past the warning is listed as bad.
    #[test]
    fn a_lock_held_past_the_warning_is_listed() {
        use crate::config::LockMode;
        use crate::lock::LockView;
        let node = LockView::held_on("127.0.0.1:6379", "3f2b8c1e-token".into(), 20_000);
        let mut view = LockView::new(
            "order:lock:O8".into(),
            LockMode::Single,
            vec![node],
            None,
            0,
        );
        crate::lock::judge_held(&mut view, -600_000, std::time::Duration::from_secs(300));
        let scan = LockScan {
            locks: vec![view],
            ..LockScan::default()
        };
        let r = rates(vec![]);
        let input = OverviewInput {
            leaks: None,
            stuck: None,
            locks: Some(&scan),
            lag: None,
            rates: &r,
            rates_reading: None,
            lock_patterns: &[],
            now_ms: 0,
        };
        let texts: Vec<String> = findings(&input).into_iter().map(|f| f.text).collect();
        assert!(
            texts
                .iter()
                .any(|t| t.ends_with("1 held past console.lock_held_warning")),
            "{texts:?}"
        );
        assert!(
            texts.iter().any(|t| t == "order:lock:O8 held_long"),
            "{texts:?}"
        );
    }

    #[test]
    fn the_last_minutes_are_compared_with_the_hour() {
        let mut quiet = vec![1; 60];
        quiet[0] = 0;
        let mut burst = vec![0; 60];
        burst[59] = 9;
        let r = rates(vec![
            series(Outcome::Replayed, quiet),
            series(Outcome::DedupHit, burst),
            series(Outcome::Dlq, vec![0; 60]),
        ]);
        let f = findings(&OverviewInput {
            leaks: None,
            stuck: None,
            locks: None,
            lag: None,
            rates: &r,
            rates_reading: None,
            lock_patterns: &[],
            now_ms: 0,
        });
        let lines: Vec<&Finding> = f
            .iter()
            .filter(|l| l.text.contains("in the last 5 min"))
            .collect();
        assert_eq!(lines.len(), 2, "{f:#?}");
        assert!(
            !lines[0].text.contains("RISING")
                && lines[1]
                    .text
                    .contains("9 in the last 5 min · 9 in the hour · RISING")
        );
        assert!(f
            .iter()
            .any(|l| l.text.starts_with("no message sent to the DLQ")));
    }

    /// A trace topic of other messages is a warning of its own, not rates of 0.
    #[test]
    fn messages_that_are_not_trace_events_are_said() {
        let mut log = crate::console::read::store::TraceLog::default();
        for _ in 0..3 {
            log.note_undecodable("orders.audit", || {
                "p0@7 \"{\\\"audit\\\"…\": missing field".into()
            });
        }
        let r = log.rates(0);
        let f = findings(&OverviewInput {
            leaks: None,
            stuck: None,
            locks: None,
            lag: None,
            rates: &r,
            rates_reading: None,
            lock_patterns: &[],
            now_ms: 0,
        });
        let warning = f
            .iter()
            .find(|l| l.severity == Severity::Warn && l.layer == "kafka")
            .unwrap_or_else(|| panic!("{f:#?}"));
        assert!(
            warning.text.starts_with(
                "3 message(s) on orders.audit could not be read as trace events (first: p0@7"
            ),
            "{}",
            warning.text
        );
    }
}
