//! The post-incident report: `idemguard report --id ID` or `--since T --until T`, as Markdown,
//! as an HTML page (`--format html`) or as JSON (schema `idemguard.report/v1`). For each affected order its cross-layer timeline
//! (the Trace view's: the same [`read_trace`]) and which layer stopped each duplicate; every
//! duplicate that got through (two effects for one requestId or one order in any table); the
//! operator actions taken (`ops_audit`); and the interception rates over the window. `:report`
//! writes it into `console.report_dir` ([`write`]).
//!
//! Below every face: `idemguard report` and the TUI's `:report` both call it. [`build`] reads
//! the report once; [`markdown`] lays it out for a ticket, [`html`] as a page for the review
//! whose [`svg`] pictures ([`picture`] of each order on a broken time [`axis`]) show which line
//! of defense stopped each copy, and any copy that got through.

pub mod axis;
pub mod dlq;
pub mod html;
pub mod markdown;
pub mod picture;
pub mod svg;

pub use html::html;
pub use markdown::markdown;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use serde::Serialize;
use sqlx::Row;

use crate::config::Config;
use crate::contracts::{format_ms, now_ms, TraceTarget};
use crate::db::Database;

use crate::console::read::bounded::read_window;
use crate::console::read::sources::EnvironmentInfo;
// The leak and contradiction queries are the Overview's too: one reader, two faces.
pub use crate::console::read::overview::{contradictions, leaks, Contradiction, Leak};
use crate::console::read::records;
use crate::console::read::sources::BackendId;
use crate::console::read::store::{PaymentIndex, RateTable, TraceLog};
use crate::console::read::timeline::Timeline;
use crate::console::read::trace::{read_trace, TopicsFrom, TraceSources};
use crate::console::read::window::TimeWindow;
use crate::ops::{self, AuditRow};

pub const SCHEMA: &str = "idemguard.report/v1";
/// Orders given a full timeline in a window report (the rest are counted).
pub const MAX_ORDERS: i64 = 50;

/// What a post-incident report is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportScope {
    /// One orderNo, requestId or eventId, parsed where it was typed.
    Id(TraceTarget),
    /// Everything created in `[since_ms, until_ms)`.
    Window { since_ms: i64, until_ms: i64 },
}

#[derive(Debug, Clone, Serialize)]
pub struct RateLine {
    pub layer: String,
    pub outcome: String,
    pub count: u64,
    pub per_minute: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct IncidentReport {
    pub schema: &'static str,
    pub environment: EnvironmentInfo,
    pub generated_at: String,
    /// The same moment in ms: the DLQ messages' ages are counted to it.
    #[serde(skip)]
    pub generated_ms: i64,
    /// `--id` as given, or null for a window.
    pub id: Option<String>,
    pub since_ms: i64,
    pub until_ms: i64,
    /// Orders created in the window (all of them, even past [`MAX_ORDERS`]).
    pub orders_in_window: usize,
    pub timelines: Vec<Timeline>,
    pub leaks: Vec<Leak>,
    /// Records whose status contradicts the order tables (a duplicate risk).
    pub contradictions: Vec<Contradiction>,
    pub operator_actions: Vec<AuditRow>,
    /// The DLQ messages of the affected orders, oldest first, each with its redrive and what
    /// the consumer would do with it now (also placed in their order's timeline).
    pub dlq_messages: Vec<crate::console::read::dlq::DlqMessage>,
    pub rates: Vec<RateLine>,
    /// The interceptions of [`IncidentReport::rates`] per minute, as the Rates view counts them
    /// (the HTML report's chart; not in the JSON, whose `rates` say the same per window).
    #[serde(skip)]
    pub rate_minutes: RateTable,
    /// Sources that could not be read (the report is partial).
    pub errors: Vec<String>,
}

/// Where each count of a report's summary comes from, said beside it in every face: the trace
/// events can be written by anyone who can write to the trace topic, the rows only by those who
/// can write to the database.
pub mod provenance {
    pub const TRACE_EVENTS: &str =
        "from trace events: anyone who can write to the trace topic can add to this count";
    pub const ROWS: &str = "from the database's rows";
    pub const AUDIT: &str = "from the ops_audit rows";
    pub const DLQ: &str = "from the DLQ topic";
}

impl IncidentReport {
    pub fn duplicates_stopped(&self) -> usize {
        self.timelines.iter().map(|t| t.stopped_count()).sum()
    }
}

/// Parse `--since`/`--until`: RFC 3339 (`2026-11-29T14:00:00Z`) or epoch milliseconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| {
            format!("`{s}` is neither RFC 3339 (2026-11-29T14:00:00Z) nor epoch milliseconds: {e}")
        })
        .and_then(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_err(|e| e.to_string())
        })
        .map(|d| d.as_millis() as i64)
}

/// The topics a window report reads: both, in its incident window (`console.trace_margin` more
/// on each side), every partition, bounded by the stores — never from their beginning (a topic
/// of seven days' retention would cost what it holds, not what the incident did). A report of
/// one ID reads the windows of its trace instead ([`read_trace`]).
async fn read_topics(
    config: &Config,
    since_ms: i64,
    until_ms: i64,
    errors: &mut Vec<String>,
) -> (PaymentIndex, TraceLog) {
    let margin = config.console.trace_margin.as_millis() as i64;
    let window = TimeWindow {
        from_ms: since_ms - margin,
        to_ms: until_ms + margin,
    };
    let never = tokio_util::sync::CancellationToken::new();
    let (payments, log, _cost) = read_window(config, window, &never).await;
    let payments = payments.unwrap_or_else(|e| {
        errors.push(format!(
            "payment topic {}: {e:#}",
            config.kafka.payment_topic
        ));
        PaymentIndex::default()
    });
    let log = log.unwrap_or_else(|e| {
        errors.push(format!("trace topic {}: {e:#}", config.kafka.trace_topic));
        TraceLog::default()
    });
    (payments, log)
}

/// The timeline of one target (no Redis: a report is about what happened, and the keys of then
/// are gone); a source that failed is named in `errors`.
async fn timeline_of(
    config: &Config,
    db: &Database,
    target: &TraceTarget,
    topics: TopicsFrom<'_>,
    errors: &mut Vec<String>,
) -> Timeline {
    let sources = TraceSources {
        database: Some(db),
        topics,
        redis: false,
    };
    let read = read_trace(config, target, sources).await;
    for s in read.statuses.iter().filter(|s| !s.ok) {
        let e = s.error.as_deref().unwrap_or("?");
        errors.push(if s.is(BackendId::Database) {
            format!("timeline of {}: {e}", target.id())
        } else if s.is(BackendId::PaymentTopic) {
            format!("payment topic {}: {e}", config.kafka.payment_topic)
        } else {
            format!("trace topic {}: {e}", config.kafka.trace_topic)
        });
    }
    read.timeline
}

/// The orders a window report is about: every order created in it (counted), the first
/// [`MAX_ORDERS`] traced.
async fn orders_in(db: &Database, since_ms: i64, until_ms: i64) -> anyhow::Result<Vec<String>> {
    let read = sqlx::query(db.sql("report_orders"))
        .bind(since_ms)
        .bind(until_ms)
        .bind(i64::MAX / 2)
        .fetch_all(&db.pool);
    let rows = db
        .bounded(read)
        .await
        .map_err(|e| records::query_error(db, "report_orders", e))?;
    Ok(rows
        .iter()
        .map(|r| r.try_get::<String, _>("order_no"))
        .collect::<Result<_, _>>()?)
}

/// The timelines of the scope: one for an ID, up to [`MAX_ORDERS`] for a window, with the
/// window itself and how many orders it holds.
struct Traced {
    timelines: Vec<Timeline>,
    since_ms: i64,
    until_ms: i64,
    orders_in_window: usize,
    /// The trace topic in the incident window (a window report's rates); empty for an ID.
    log: TraceLog,
}

async fn trace_scope(
    config: &Config,
    db: &Database,
    scope: &ReportScope,
    now: i64,
    errors: &mut Vec<String>,
) -> anyhow::Result<Traced> {
    match scope {
        ReportScope::Id(target) => {
            let t = timeline_of(config, db, target, TopicsFrom::ReadForTarget, errors).await;
            Ok(Traced {
                timelines: vec![t],
                since_ms: 0,
                until_ms: now + 1,
                orders_in_window: 1,
                log: TraceLog::default(),
            })
        }
        ReportScope::Window { since_ms, until_ms } => {
            let (payments, log) = read_topics(config, *since_ms, *until_ms, errors).await;
            let all = orders_in(db, *since_ms, *until_ms).await?;
            let mut timelines = Vec::new();
            for order_no in all.iter().take(MAX_ORDERS as usize) {
                let target = TraceTarget::OrderNo(order_no.clone());
                let topics = TopicsFrom::Stores {
                    payments: &payments,
                    log: &log,
                };
                timelines.push(timeline_of(config, db, &target, topics, errors).await);
            }
            Ok(Traced {
                timelines,
                since_ms: *since_ms,
                until_ms: *until_ms,
                orders_in_window: all.len(),
                log,
            })
        }
    }
}

/// Interceptions per layer and outcome: for an ID those of its timeline, for a window every
/// event of the trace topic in it.
fn rates_of(scope: &ReportScope, traced: &Traced, now: i64) -> Vec<RateLine> {
    let (since, until, counts) = match scope {
        ReportScope::Window { .. } => (
            traced.since_ms,
            traced.until_ms,
            traced.log.counts_between(traced.since_ms, traced.until_ms),
        ),
        ReportScope::Id(_) => {
            let times: Vec<i64> = traced
                .timelines
                .iter()
                .flat_map(|t| t.entries.iter().filter_map(|e| e.at_ms))
                .collect();
            let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
            for i in traced.timelines.iter().flat_map(|t| &t.interceptions) {
                *by.entry((i.layer.clone(), i.outcome.clone())).or_default() += 1;
            }
            (
                times.iter().copied().min().unwrap_or(now),
                times.iter().copied().max().unwrap_or(now) + 1,
                by,
            )
        }
    };
    let minutes = ((until - since) as f64 / 60_000.0).max(1.0 / 60.0);
    counts
        .into_iter()
        .map(|((layer, outcome), count)| RateLine {
            layer,
            outcome,
            count,
            per_minute: count as f64 / minutes,
        })
        .collect()
}

/// The interceptions per minute over the report's minutes: for a window every interception of
/// the trace topic in it, for an ID those of its timeline (the same events [`rates_of`] counts).
fn rate_minutes(scope: &ReportScope, traced: &Traced, now: i64) -> RateTable {
    match scope {
        ReportScope::Window { .. } => traced.log.rates_between(traced.since_ms, traced.until_ms),
        ReportScope::Id(_) => {
            let mut by: BTreeMap<(i64, &str), u64> = BTreeMap::new();
            for i in traced.timelines.iter().flat_map(|t| &t.interceptions) {
                let minute = i.at_ms.unwrap_or(now).div_euclid(60_000);
                *by.entry((minute, i.outcome.as_str())).or_default() += 1;
            }
            let minutes = || by.keys().map(|(m, _)| *m);
            let first = minutes().min().unwrap_or(now.div_euclid(60_000));
            let last = minutes().max().unwrap_or(first);
            RateTable::over(first, last, |m, outcome| {
                by.get(&(m, outcome.as_str())).copied().unwrap_or(0)
            })
        }
    }
}

/// Build the report (reads the database and both topics; bounded).
pub async fn build(config: &Config, scope: &ReportScope) -> anyhow::Result<IncidentReport> {
    let db = crate::console::read::sources::connect_database(config).await?;
    let now = now_ms();
    let mut errors = Vec::new();
    let mut traced = trace_scope(config, &db, scope, now, &mut errors).await?;
    let (since_ms, until_ms) = (traced.since_ms, traced.until_ms);
    let from = dlq_from(config, scope, &traced, now);
    let dlq_messages = match dlq::messages_of(config, &db, &traced.timelines, from, now).await {
        Ok(m) => m,
        Err(e) => {
            errors.push(format!("DLQ {}: {e:#}", config.kafka.dlq_topic));
            Vec::new()
        }
    };
    dlq::place(
        &mut traced.timelines,
        &dlq_messages,
        &config.kafka.dlq_topic,
    );
    let mut leaks = leaks(&db, since_ms, until_ms).await?;
    let mut contradictions = contradictions(&db, since_ms, until_ms).await?;
    let mut operator_actions = ops::audit_rows(&db, since_ms, until_ms, 10_000).await?;
    operator_actions.reverse(); // oldest first, as a timeline
    mask_audited_states(&mut operator_actions, &crate::mask::Mask::of(config));
    db.pool.close().await;
    if let ReportScope::Id(_) = scope {
        // The IDs an --id report is about: its leaks, actions and rates only.
        let named: Vec<String> = traced
            .timelines
            .iter()
            .flat_map(|t| [t.order_no.clone(), t.request_id.clone()])
            .flatten()
            .collect();
        let mine = |s: &str| named.iter().any(|n| s.contains(n.as_str()));
        leaks.retain(|l| mine(&l.key));
        contradictions.retain(|c| mine(&c.request_id));
        // A redrive's target is its DLQ position; its `before_state` names the message's IDs.
        let redrive_of_mine =
            |a: &AuditRow| a.action == "redrive" && a.before_state.as_deref().is_some_and(mine);
        operator_actions.retain(|a| mine(&a.target) || redrive_of_mine(a));
    }
    Ok(IncidentReport {
        schema: SCHEMA,
        environment: EnvironmentInfo::of(config),
        generated_at: format_ms(now),
        generated_ms: now,
        id: match scope {
            ReportScope::Id(target) => Some(target.id().to_string()),
            ReportScope::Window { .. } => None,
        },
        since_ms,
        until_ms,
        orders_in_window: traced.orders_in_window,
        rates: rates_of(scope, &traced, now),
        rate_minutes: rate_minutes(scope, &traced, now),
        timelines: traced.timelines,
        leaks,
        contradictions,
        operator_actions,
        dlq_messages,
        errors,
    })
}

/// Where the DLQ is read from: the window's start (an ID: its first event), less the trace
/// margin; an ID with no timed event, the DLQ view's default window.
fn dlq_from(config: &Config, scope: &ReportScope, traced: &Traced, now: i64) -> i64 {
    let margin = config.console.trace_margin.as_millis() as i64;
    let first = match scope {
        ReportScope::Window { since_ms, .. } => Some(*since_ms),
        ReportScope::Id(_) => traced
            .timelines
            .iter()
            .flat_map(|t| t.entries.iter().filter_map(|e| e.at_ms))
            // A time a client wrote (`paidAt: 0`) is no bound: the broker refuses one before 1970.
            .filter(|ms| *ms > margin)
            .min(),
    };
    match first {
        Some(ms) => (ms - margin).max(0),
        None => now - crate::console::read::dlq::DEFAULT_DLQ_WINDOW.as_millis() as i64,
    }
}

/// An audited record's before/after state holds its response (the customer's order): its
/// masked members masked.
fn mask_audited_states(actions: &mut [AuditRow], mask: &crate::mask::Mask) {
    for a in actions {
        for s in [&mut a.before_state, &mut a.after_state]
            .into_iter()
            .flatten()
        {
            *s = mask.json_text(s);
        }
    }
}

/// Where `:report` writes: `console.report_dir`, else `$XDG_DATA_HOME/idemguard/reports`
/// (`~/.local/share/idemguard/reports`), else `reports` in the working directory.
pub fn report_dir(config: &Config) -> PathBuf {
    report_dir_of(
        &config.console.report_dir,
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`report_dir`] from its inputs (the environment passed in, so it is testable).
pub fn report_dir_of(
    configured: &str,
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    if !configured.is_empty() {
        return PathBuf::from(configured);
    }
    let data = xdg_data_home
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            home.filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        });
    match data {
        Some(dir) => dir.join("idemguard").join("reports"),
        None => PathBuf::from("reports"),
    }
}

/// A report `:report` wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Absolute.
    pub path: PathBuf,
    pub duplicates_stopped: usize,
    pub leaks: usize,
    pub operator_actions: usize,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "report written to {}: {} duplicate(s) stopped, {} got through, {} operator action(s)",
            self.path.display(),
            self.duplicates_stopped,
            self.leaks,
            self.operator_actions
        )
    }
}

/// How a report is written out (the JSON document is the report itself, serialized).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    /// Pastes into a ticket.
    Markdown,
    /// One self-contained page with a picture of each order ([`html`]).
    Html,
}

impl ReportFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ReportFormat::Markdown => "md",
            ReportFormat::Html => "html",
        }
    }

    pub fn render(self, r: &IncidentReport) -> String {
        match self {
            ReportFormat::Markdown => markdown(r),
            ReportFormat::Html => html(r),
        }
    }
}

/// `:report [html]`: the same report as `idemguard report --id ID [--format html]`, in
/// [`report_dir`] (created if missing), named `idemguard-report-{ID}.md` (or `.html`) — or
/// `idemguard-report-{ID}-2.md`, … when that name is taken: a name already there, a link
/// planted in a shared directory included, is never written through
/// ([`crate::private_file::write_new`]). The owner's only: 0600 in a directory created 0700.
pub async fn write(
    config: &Config,
    target: &TraceTarget,
    format: ReportFormat,
) -> anyhow::Result<Written> {
    let r = build(config, &ReportScope::Id(target.clone())).await?;
    let safe: String = target
        .id()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = report_dir(config);
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    crate::private_file::create_dir_all(&dir).map_err(|e| {
        anyhow::anyhow!("cannot create {} (console.report_dir): {e}", dir.display())
    })?;
    let stem = format!("idemguard-report-{safe}");
    let ext = format.extension();
    let path = crate::private_file::write_new(&dir, &stem, ext, &format.render(&r))
        .map_err(|e| anyhow::anyhow!("cannot write {stem}.{ext} in {}: {e}", dir.display()))?;
    Ok(Written {
        path,
        duplicates_stopped: r.duplicates_stopped(),
        leaks: r.leaks.len(),
        operator_actions: r.operator_actions.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_dir_is_configured_else_the_users_data_dir_else_the_working_dir() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            report_dir_of("/srv/reports", os("/data"), os("/home/a")),
            PathBuf::from("/srv/reports")
        );
        assert_eq!(
            report_dir_of("", os("/data"), os("/home/a")),
            PathBuf::from("/data/idemguard/reports")
        );
        assert_eq!(
            report_dir_of("", os(""), os("/home/a")),
            PathBuf::from("/home/a/.local/share/idemguard/reports")
        );
        assert_eq!(report_dir_of("", None, None), PathBuf::from("reports"));
    }
}
