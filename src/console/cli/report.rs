//! The post-incident report: `idemguard report --id ID` or `--since T --until T`, as Markdown
//! (or JSON, schema `idemguard.report/v1`). For each affected order its cross-layer timeline
//! (the Trace view's, [`timeline::build`]) and which layer stopped each duplicate; every
//! duplicate that got through (two effects for one requestId or one order in any table); the
//! operator actions taken (`ops_audit`); and the interception rates over the window.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use sqlx::Row;

use crate::config::Config;
use crate::contracts::{format_ms, now_ms, TraceTarget};
use crate::db::Database;

use crate::console::cli::headless::{
    read_payments, read_topics_for, read_trace_log, EnvironmentInfo,
};
use crate::console::read::records::{self, TraceIds};
use crate::console::read::store::{PaymentIndex, TraceLog};
use crate::console::read::timeline::{self, Timeline, TimelineInputs};
use crate::console::read::topics::StartAt;
use crate::ops::{self, AuditRow};

pub const SCHEMA: &str = "idemguard.report/v1";
/// Orders given a full timeline in a window report (the rest are counted).
pub const MAX_ORDERS: i64 = 50;

/// What the report is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One orderNo, requestId or eventId.
    Id(String),
    /// Everything created in `[since_ms, until_ms)`.
    Window { since_ms: i64, until_ms: i64 },
}

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
) -> Result<Vec<Contradiction>, sqlx::Error> {
    sqlx::query(db.sql("report_contradictions"))
        .bind(since_ms)
        .bind(until_ms)
        .bind(10_000_i64)
        .fetch_all(&db.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(Contradiction {
                request_id: r.try_get("request_id")?,
                status: r.try_get("status")?,
                order_no: r.try_get("order_no")?,
                problem: r.try_get("problem")?,
            })
        })
        .collect()
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
    pub rates: Vec<RateLine>,
    /// Sources that could not be read (the report is partial).
    pub errors: Vec<String>,
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

pub async fn leaks(db: &Database, since_ms: i64, until_ms: i64) -> Result<Vec<Leak>, sqlx::Error> {
    let mut q = sqlx::query(db.sql("report_leaks"));
    for _ in 0..5 {
        q = q.bind(since_ms).bind(until_ms);
    }
    q.fetch_all(&db.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(Leak {
                table: r.try_get("tbl")?,
                by: r.try_get("by_col")?,
                key: r.try_get("dup_key")?,
                rows: r.try_get("n_rows")?,
                first: r.try_get("first_row")?,
                last: r.try_get("last_row")?,
            })
        })
        .collect()
}

/// The timeline of one ID from the database rows and the topics already read (no Redis: a
/// report is about what happened, and the keys of then are gone).
async fn timeline_of(
    db: &Database,
    query: &str,
    payments: &PaymentIndex,
    log: &TraceLog,
) -> anyhow::Result<Timeline> {
    let target = TraceTarget::classify(query);
    let mut rows = records::trace_rows(db, &TraceIds::of_target(&target)).await?;
    let ids = timeline::resolve_ids(query, Some(&rows), payments, log);
    if ids != rows.ids {
        rows = records::trace_rows(db, &ids).await?;
    }
    let ids = timeline::resolve_ids(query, Some(&rows), payments, log);
    let messages = payments.messages_for(ids.order_no.as_deref(), ids.event_id.as_deref());
    let event_ids = timeline::event_ids_of(&target, Some(&rows), &messages);
    let events = log.matching(
        ids.order_no.as_deref(),
        ids.request_id.as_deref(),
        &event_ids,
    );
    Ok(timeline::build(TimelineInputs {
        query,
        rows: Some(&rows),
        keys: None,
        messages: &messages,
        events: &events,
        now_ms: now_ms(),
    }))
}

/// Build the report (reads the database and both topics; bounded).
pub async fn build(config: &Config, scope: &Scope) -> anyhow::Result<IncidentReport> {
    let mut c = config.clone();
    c.database.max_connections = c.database.max_connections.min(4);
    let db = Database::connect_for_reads(&c).await?;
    let mut errors = Vec::new();
    // A report on one ID reads the topics for that ID's IDs only (see `Keep`); a window report
    // reads them whole, bounded by the stores.
    let (payments, log) = match scope {
        Scope::Id(id) => {
            let rows = records::trace_rows(&db, &TraceIds::of_target(&TraceTarget::classify(id)))
                .await
                .ok();
            read_topics_for(config, id, rows.as_ref()).await
        }
        Scope::Window { .. } => tokio::join!(
            read_payments(config),
            read_trace_log(config, StartAt::Beginning)
        ),
    };
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
    let now = now_ms();

    let (queries, since_ms, until_ms, orders_in_window) = match scope {
        Scope::Id(id) => (vec![id.clone()], 0, now + 1, 0),
        Scope::Window { since_ms, until_ms } => {
            let all: Vec<String> = sqlx::query(db.sql("report_orders"))
                .bind(*since_ms)
                .bind(*until_ms)
                .bind(i64::MAX / 2)
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|r| r.try_get::<String, _>("order_no"))
                .collect::<Result<_, _>>()?;
            (
                all.iter().take(MAX_ORDERS as usize).cloned().collect(),
                *since_ms,
                *until_ms,
                all.len(),
            )
        }
    };
    let mut timelines = Vec::new();
    for q in &queries {
        match timeline_of(&db, q, &payments, &log).await {
            Ok(t) => timelines.push(t),
            Err(e) => errors.push(format!("timeline of {q}: {e:#}")),
        }
    }
    // The IDs an --id report is about: its leaks, actions and rates only.
    let named: Vec<String> = timelines
        .iter()
        .flat_map(|t| [t.order_no.clone(), t.request_id.clone()])
        .flatten()
        .collect();
    let mine = |s: &str| named.iter().any(|n| s.contains(n.as_str()));

    let mut leaks = leaks(&db, since_ms, until_ms).await?;
    let mut contradictions = contradictions(&db, since_ms, until_ms).await?;
    let mut operator_actions = ops::audit_rows(&db, since_ms, until_ms, 10_000).await?;
    operator_actions.reverse(); // oldest first, as a timeline
    let (rate_since, rate_until) = match scope {
        Scope::Window { .. } => (since_ms, until_ms),
        Scope::Id(_) => {
            let times: Vec<i64> = timelines
                .iter()
                .flat_map(|t| t.entries.iter().filter_map(|e| e.at_ms))
                .collect();
            (
                times.iter().copied().min().unwrap_or(now),
                times.iter().copied().max().unwrap_or(now) + 1,
            )
        }
    };
    if let Scope::Id(_) = scope {
        leaks.retain(|l| mine(&l.key));
        contradictions.retain(|c| mine(&c.request_id));
        operator_actions.retain(|a| mine(&a.target));
    }
    let minutes = ((rate_until - rate_since) as f64 / 60_000.0).max(1.0 / 60.0);
    let mut rates: Vec<RateLine> = log
        .counts_between(rate_since, rate_until)
        .into_iter()
        .map(|((layer, outcome), count)| RateLine {
            layer,
            outcome,
            count,
            per_minute: count as f64 / minutes,
        })
        .collect();
    if let Scope::Id(_) = scope {
        // Only the events of this order: counted from its timeline's interceptions.
        let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
        for t in &timelines {
            for i in &t.interceptions {
                *by.entry((i.layer.clone(), i.outcome.clone())).or_default() += 1;
            }
        }
        rates = by
            .into_iter()
            .map(|((layer, outcome), count)| RateLine {
                layer,
                outcome,
                count,
                per_minute: count as f64 / minutes,
            })
            .collect();
    }
    db.pool.close().await;
    Ok(IncidentReport {
        schema: SCHEMA,
        environment: EnvironmentInfo {
            name: config.environment.name.clone(),
            color: config.environment.color.clone(),
            production: config.environment.production,
        },
        generated_at: format_ms(now),
        id: match scope {
            Scope::Id(id) => Some(id.clone()),
            Scope::Window { .. } => None,
        },
        since_ms,
        until_ms,
        orders_in_window: if orders_in_window == 0 {
            timelines.len()
        } else {
            orders_in_window
        },
        timelines,
        leaks,
        contradictions,
        operator_actions,
        rates,
        errors,
    })
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The report as Markdown.
pub fn markdown(r: &IncidentReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Post-incident report — {}",
        r.id.clone().unwrap_or_else(|| format!(
            "{} → {}",
            format_ms(r.since_ms),
            format_ms(r.until_ms)
        ))
    );
    let _ = writeln!(
        o,
        "\nEnvironment **{}**{} · generated {}\n",
        r.environment.name,
        if r.environment.production {
            " (production)"
        } else {
            ""
        },
        r.generated_at
    );
    let _ = writeln!(o, "## Summary\n");
    let _ = writeln!(
        o,
        "- orders: {} ({} with a timeline below)",
        r.orders_in_window,
        r.timelines.len()
    );
    let _ = writeln!(o, "- duplicates stopped: {}", r.duplicates_stopped());
    let _ = writeln!(o, "- **duplicates that got through: {}**", r.leaks.len());
    let _ = writeln!(
        o,
        "- **records that contradict the orders (duplicate risk): {}**",
        r.contradictions.len()
    );
    let _ = writeln!(o, "- operator actions: {}", r.operator_actions.len());
    for e in &r.errors {
        let _ = writeln!(o, "- ⚠ not read: {e} (the report is partial)");
    }

    let _ = writeln!(o, "\n## Duplicates that got through\n");
    if r.leaks.is_empty() {
        let _ = writeln!(o, "None: no requestId or order has two effects in orders, stock movements, payment flows, points or notifications.");
    } else {
        let _ = writeln!(
            o,
            "| table | rows | shared column = key | first | last |\n|---|---|---|---|---|"
        );
        for l in &r.leaks {
            let _ = writeln!(
                o,
                "| {} | {} | {} = `{}` | `{}` | `{}` |",
                l.table,
                l.rows,
                l.by,
                cell(&l.key),
                cell(&l.first),
                cell(&l.last)
            );
        }
    }

    let _ = writeln!(o, "\n## Records that contradict the orders\n");
    if r.contradictions.is_empty() {
        let _ = writeln!(
            o,
            "None: every FAILED record has no order and every SUCCEEDED record's order exists."
        );
    } else {
        let _ = writeln!(o, "A FAILED record with an order told its client to send a new key although the order exists: a second order may follow.\n");
        let _ = writeln!(
            o,
            "| requestId | record status | order | problem |\n|---|---|---|---|"
        );
        for c in &r.contradictions {
            let _ = writeln!(
                o,
                "| `{}` | {} | `{}` | {} |",
                cell(&c.request_id),
                c.status,
                cell(&c.order_no),
                c.problem.replace('_', " ")
            );
        }
    }

    let _ = writeln!(o, "\n## Operator actions\n");
    if r.operator_actions.is_empty() {
        let _ = writeln!(o, "None.");
    } else {
        let _ = writeln!(o, "| time | operator | action | target | outcome | reason | detail |\n|---|---|---|---|---|---|---|");
        for a in &r.operator_actions {
            let _ = writeln!(
                o,
                "| {} | {} | {} | `{}` | {} | {} | {} |",
                format_ms(a.created_at),
                cell(&a.operator),
                a.action,
                cell(&a.target),
                a.outcome,
                cell(a.reason.as_deref().unwrap_or("")),
                cell(a.detail.as_deref().unwrap_or(""))
            );
        }
    }

    let _ = writeln!(o, "\n## Rates\n");
    if r.rates.is_empty() {
        let _ = writeln!(o, "No trace events in the window.");
    } else {
        let _ = writeln!(
            o,
            "| layer | outcome | count | per minute |\n|---|---|---|---|"
        );
        for x in &r.rates {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.2} |",
                x.layer, x.outcome, x.count, x.per_minute
            );
        }
    }

    let _ = writeln!(o, "\n## Orders\n");
    for t in &r.timelines {
        let _ = writeln!(o, "### {} {}\n", t.kind.replace('_', " "), t.query);
        let _ = writeln!(
            o,
            "orderNo `{}` · requestId `{}`\n",
            t.order_no.as_deref().unwrap_or("?"),
            t.request_id.as_deref().unwrap_or("?")
        );
        if t.interceptions.is_empty() {
            let _ = writeln!(o, "No duplicate of this order was stopped.\n");
        } else {
            let _ = writeln!(o, "Duplicates stopped:\n");
            for i in &t.interceptions {
                let _ = writeln!(
                    o,
                    "- {} by **{}** ({}): {}",
                    i.at_ms.map_or("?".into(), format_ms),
                    i.layer,
                    i.outcome,
                    cell(&i.detail)
                );
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(
            o,
            "| time | layer | source | what | stopped by |\n|---|---|---|---|---|"
        );
        for e in &t.entries {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                e.at_ms.map_or("now".into(), format_ms),
                e.layer,
                cell(&e.source),
                cell(&e.summary),
                e.stopped_by.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(o);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaks_table_header_names_its_column_and_no_placeholder() {
        let r = IncidentReport {
            schema: "idemguard.report/v1",
            environment: EnvironmentInfo {
                name: "local".into(),
                color: "green".into(),
                production: false,
            },
            generated_at: "2026-11-29T23:07:42.123Z".into(),
            id: Some("APP:ORDER:20261129:abcdefgh".into()),
            since_ms: 0,
            until_ms: 0,
            orders_in_window: 2,
            timelines: vec![],
            leaks: vec![Leak {
                table: "order_record".into(),
                by: "req_id".into(),
                key: "APP:ORDER:20261129:abcdefgh".into(),
                rows: 2,
                first: "A".into(),
                last: "B".into(),
            }],
            contradictions: vec![],
            operator_actions: vec![],
            rates: vec![],
            errors: vec![],
        };
        let md = markdown(&r);
        assert!(
            md.contains("| table | rows | shared column = key | first | last |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| order_record | 2 | req_id = `APP:ORDER:20261129:abcdefgh` | `A` | `B` |"
            ),
            "{md}"
        );
        assert!(
            !md.contains('{'),
            "a format placeholder was printed literally: {md}"
        );
    }
}
