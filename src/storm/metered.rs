//! What the metrics said during a run, beside what the database holds. The run's service,
//! consumer and own writers count their decisions in the rig's registry — one per run, so storms
//! side by side in one test process never mix their counts — and the registry is new, so its
//! values are the run's deltas. A counter that disagrees with the database's count would page
//! (or stay silent) wrongly: it fails the run like any other invariant, naming the counter.

use serde::Serialize;
use sqlx::Row;

use super::invariants::Check;
use crate::contracts::{Layer, Outcome};
use crate::db::Database;
use crate::metrics::{Metrics, OUTCOMES};

/// One series of `idemguard_decisions_total` that moved during the run.
#[derive(Debug, Clone, Serialize)]
pub struct Delta {
    pub layer: &'static str,
    pub outcome: &'static str,
    pub counted: u64,
    /// The database's own count of the same thing, when it has one.
    pub database: Option<u64>,
}

/// The run's metrics: every decision series that moved, and which ones were held to the truth.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MetricsSeen {
    pub deltas: Vec<Delta>,
    /// Why the counters were not compared with the database (they were counted elsewhere).
    pub not_compared: Option<String>,
}

impl MetricsSeen {
    /// The series of `layer`/`outcome`, when it moved during the run.
    pub fn delta(&self, layer: Layer, outcome: Outcome) -> Option<&Delta> {
        self.deltas
            .iter()
            .find(|d| d.layer == layer.as_str() && d.outcome == outcome.as_str())
    }
}

/// The counters the database can count: an order row per `order_created`, a payment flow per
/// `payment_recorded`.
const HELD_TO_TRUTH: [(Layer, Outcome, &str); 2] = [
    (Layer::Db, Outcome::OrderCreated, "orders"),
    (Layer::Db, Outcome::PaymentRecorded, "payment flows"),
];

/// Reads the run's deltas and, unless `elsewhere` says why not, holds them to the database's
/// counts of the run's rows (`order_pattern`: the LIKE pattern of its requestIds).
pub async fn read(
    metrics: &Metrics,
    db: &Database,
    order_pattern: &str,
    elsewhere: Option<String>,
) -> anyhow::Result<(MetricsSeen, Option<Check>)> {
    let truth = match elsewhere {
        None => Some(database_counts(db, order_pattern).await?),
        Some(_) => None,
    };
    let mut deltas = Vec::new();
    for (layer, outcomes) in OUTCOMES {
        for outcome in *outcomes {
            let counted = metrics.decisions_of(*layer, *outcome);
            let held = HELD_TO_TRUTH
                .iter()
                .position(|(l, o, _)| l == layer && o == outcome);
            let database = held.zip(truth).map(|(i, t)| t[i]);
            if counted > 0 || database.is_some_and(|d| d > 0) {
                deltas.push(Delta {
                    layer: layer.as_str(),
                    outcome: outcome.as_str(),
                    counted,
                    database,
                });
            }
        }
    }
    let check = truth.map(|_| agreement(&deltas));
    let seen = MetricsSeen {
        deltas,
        not_compared: elsewhere,
    };
    Ok((seen, check))
}

/// The invariant: every counter held to the truth equals the database's count.
fn agreement(deltas: &[Delta]) -> Check {
    let offenders = deltas
        .iter()
        .filter_map(|d| {
            let database = d.database?;
            let what = HELD_TO_TRUTH
                .iter()
                .find(|(l, o, _)| l.as_str() == d.layer && o.as_str() == d.outcome)
                .map_or("rows", |(_, _, what)| *what);
            (database != d.counted).then(|| {
                format!(
                    "idemguard_decisions_total{{layer=\"{}\",outcome=\"{}\"}} counted {}, the database holds {database} {what} of the run",
                    d.layer, d.outcome, d.counted
                )
            })
        })
        .collect();
    Check::new(
        "metrics_agree_with_database",
        "the run's counters agree with the database: order_created = its orders, payment_recorded = its payment flows",
        offenders,
    )
}

/// [orders, payment flows] of the run, as the database holds them.
async fn database_counts(db: &Database, order_pattern: &str) -> anyhow::Result<[u64; 2]> {
    let row = sqlx::query(db.sql("storm_metrics_truth"))
        .bind(order_pattern)
        .bind(order_pattern)
        .fetch_one(&db.pool)
        .await?;
    let count = |c: &str| -> anyhow::Result<u64> { Ok(row.try_get::<i64, _>(c)?.max(0) as u64) };
    Ok([count("orders")?, count("payments")?])
}
