//! The invariants checked after every scenario — read from the DATABASE, never from the storm's
//! own counters: a count the tool kept could be wrong the same way the system is.
//!
//! Each check is one SQL file under `queries/<dialect>/storm_*.sql` returning the offenders; an
//! empty result is a pass. Every offender names its IDs (requestId / orderNo / eventId / payNo),
//! so the trace view can follow it.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::db::Database;

/// One invariant and what broke it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub rule: &'static str,
    pub passed: bool,
    /// "ID: what is wrong", one per offender.
    pub offenders: Vec<String>,
}

impl Check {
    pub fn new(name: &'static str, rule: &'static str, offenders: Vec<String>) -> Check {
        Check {
            name,
            rule,
            passed: offenders.is_empty(),
            offenders,
        }
    }
}

/// What the checks need to know about the run.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// LIKE pattern of the run's order requestIds.
    pub order_pattern: String,
    /// LIKE pattern of every requestId of the run (orders and payment callbacks).
    pub record_pattern: String,
    pub group: String,
    /// (sku_id, stock the storm set before the run).
    pub skus: Vec<(i64, i64)>,
    /// requestId → every orderNo a successful response named.
    pub orders_named: HashMap<String, BTreeSet<String>>,
    /// Every requestId the client was answered 201 Created for.
    pub created: BTreeSet<String>,
}

/// Runs every invariant of [`Scope`] against `db`.
pub async fn check(db: &Database, scope: &Scope) -> anyhow::Result<Vec<Check>> {
    let mut checks = Vec::new();
    orders(db, scope, &mut checks).await?;
    stock(db, scope, &mut checks).await?;
    payments(db, scope, &mut checks).await?;
    effects(db, scope, &mut checks).await?;
    records(db, scope, &mut checks).await?;
    Ok(checks)
}

/// One order per answered requestId, and every response names that order.
async fn orders(db: &Database, scope: &Scope, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let pattern = scope.order_pattern.as_str();
    let rows = sqlx::query(db.sql("storm_orders_of_run"))
        .bind(pattern)
        .fetch_all(&db.pool)
        .await?;
    let mut in_db: HashMap<String, String> = HashMap::new();
    for r in &rows {
        in_db.insert(r.get::<String, _>("req_id"), r.get::<String, _>("order_no"));
    }

    // A GROUP BY of the orders only sees requestIds that have one: the ones answered 201 with
    // none are found from the client's side.
    let rows = sqlx::query(db.sql("storm_check_orders_per_request"))
        .bind(pattern)
        .fetch_all(&db.pool)
        .await?;
    let mut offenders: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "requestId {}: {} orders",
                r.get::<String, _>(0),
                r.get::<i64, _>(1)
            )
        })
        .collect();
    offenders.extend(
        scope
            .created
            .iter()
            .filter(|rid| !in_db.contains_key(*rid))
            .map(|rid| format!("requestId {rid}: answered 201, 0 orders")),
    );
    checks.push(Check::new(
        "one_order_per_request",
        "exactly one order per requestId answered 201 (and never more than one)",
        offenders,
    ));

    // Every response that named an order named THE order of its requestId.
    let mut offenders = Vec::new();
    let mut named: Vec<_> = scope.orders_named.iter().collect();
    named.sort();
    for (request_id, orders) in named {
        match in_db.get(request_id) {
            None => offenders.push(format!("requestId {request_id}: answered with order(s) {orders:?} but the database has none")),
            Some(o) if orders.len() != 1 || !orders.contains(o) => {
                offenders.push(format!("requestId {request_id}: responses named {orders:?}, the database has {o}"))
            }
            Some(_) => {}
        }
    }
    checks.push(Check::new(
        "responses_name_the_order",
        "every response for a requestId names the one order the database holds for it",
        offenders,
    ));
    Ok(())
}

/// Stock taken once per order, and every SKU balanced.
async fn stock(db: &Database, scope: &Scope, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let pattern = scope.order_pattern.as_str();
    let rows = sqlx::query(db.sql("storm_check_stock_movements"))
        .bind(pattern)
        .fetch_all(&db.pool)
        .await?;
    let offenders = each_row(&rows, |r| {
        format!(
            "order {}: {} stock movements totalling {}",
            r.get::<String, _>(0),
            r.get::<i64, _>(1),
            r.get::<i64, _>(2)
        )
    });
    checks.push(Check::new(
        "one_stock_movement_per_order",
        "stock decremented once per order (one stock_movement of -quantity)",
        offenders,
    ));

    let mut offenders = Vec::new();
    for (sku, initial) in &scope.skus {
        let row = sqlx::query(db.sql("storm_stock_balance"))
            .bind(*sku)
            .bind(*sku)
            .bind(*sku)
            .fetch_optional(&db.pool)
            .await?;
        let Some(row) = row else {
            offenders.push(format!("sku {sku}: missing from the inventory table"));
            continue;
        };
        let (stock, ordered, taken): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        if stock < 0 {
            offenders.push(format!("sku {sku}: stock is negative ({stock})"));
        }
        if initial - stock != ordered || ordered != taken {
            offenders.push(format!("sku {sku}: stock {initial} -> {stock} (-{}), orders want {ordered}, movements took {taken}", initial - stock));
        }
    }
    checks.push(Check::new(
        "stock_balances",
        "stock never negative; initial - final stock = sum of order quantities = sum of movements",
        offenders,
    ));
    Ok(())
}

/// One payment flow per payNo, one PAID transition per order.
async fn payments(db: &Database, scope: &Scope, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let pattern = scope.order_pattern.as_str();
    let rows = sqlx::query(db.sql("storm_check_payment_flows"))
        .bind(pattern)
        .fetch_all(&db.pool)
        .await?;
    let offenders = each_row(&rows, |r| {
        format!(
            "order {}: {} payment flows (payNo {})",
            r.get::<String, _>(0),
            r.get::<i64, _>(1),
            r.get::<String, _>(2)
        )
    });
    checks.push(Check::new(
        "one_payment_flow_per_pay_no",
        "one payment_flow per payNo (and per order: the storm pays each once)",
        offenders,
    ));

    let rows = sqlx::query(db.sql("storm_check_paid_transitions"))
        .bind(scope.group.as_str())
        .bind(pattern)
        .fetch_all(&db.pool)
        .await?;
    let offenders = each_row(&rows, |r| {
        format!(
            "order {} ({}, payment event {}): {} applied event(s) [{}]",
            r.get::<String, _>(0),
            r.get::<String, _>(1),
            r.get::<String, _>(2),
            r.get::<i64, _>(3),
            r.get::<String, _>(4)
        )
    });
    checks.push(Check::new(
        "one_paid_transition_per_order",
        "a PAID order was moved there once, by one of its own payment events",
        offenders,
    ));
    Ok(())
}

/// One points row and one notification per payment event and paid order.
async fn effects(db: &Database, scope: &Scope, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let pattern = scope.order_pattern.as_str();
    for (name, rule, sql, what) in [
        (
            "one_points_row_per_event_and_order",
            "one points_ledger row per payment event and per paid order",
            "storm_check_points",
            "points rows",
        ),
        (
            "one_notification_per_event_and_order",
            "one notification per payment event and per paid order",
            "storm_check_notification",
            "notifications",
        ),
    ] {
        let rows = sqlx::query(db.sql(sql))
            .bind(pattern)
            .fetch_all(&db.pool)
            .await?;
        let offenders = each_row(&rows, |r| {
            format!(
                "order {} ({}, paid by event {}): {} {what}, events [{}]",
                r.get::<String, _>(0),
                r.get::<String, _>(1),
                r.get::<String, _>(2),
                r.get::<i64, _>(3),
                r.get::<String, _>(4)
            )
        });
        checks.push(Check::new(name, rule, offenders));
    }
    Ok(())
}

/// No idempotency record of the run left PROCESSING past its lease.
async fn records(db: &Database, scope: &Scope, checks: &mut Vec<Check>) -> anyhow::Result<()> {
    let rows = sqlx::query(db.sql("storm_check_processing"))
        .bind(scope.record_pattern.as_str())
        .bind(crate::contracts::now_ms())
        .fetch_all(&db.pool)
        .await?;
    let offenders = each_row(&rows, |r| {
        format!(
            "requestId {}: PROCESSING under {}, lease ended at {}",
            r.get::<String, _>(0),
            r.get::<String, _>(1),
            r.get::<i64, _>(2)
        )
    });
    checks.push(Check::new(
        "no_record_processing_past_its_lease",
        "every idempotency record of the run ended SUCCEEDED or FAILED: none left PROCESSING past its lease",
        offenders,
    ));
    Ok(())
}

/// The run's orders as the database holds them: (requestId, orderNo, status).
pub async fn orders_of_run(
    db: &Database,
    pattern: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let rows = sqlx::query(db.sql("storm_orders_of_run"))
        .bind(pattern)
        .fetch_all(&db.pool)
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get("req_id"), r.get("order_no"), r.get("status")))
        .collect())
}

/// Each row of an invariant query is an offender, described by `describe`.
fn each_row(rows: &[AnyRow], describe: impl Fn(&AnyRow) -> String) -> Vec<String> {
    rows.iter().map(describe).collect()
}
