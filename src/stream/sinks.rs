//! The consumer's sinks (seed §4.4, §6.3). Each runs in ONE local transaction per batch and has
//! its own unique key, so applying an event twice — after a crash before the offset commit, a
//! rebalance, a producer retry — changes nothing the second time:
//!
//! | sink              | unique key                         |
//! |-------------------|------------------------------------|
//! | order → PAID      | state machine + version; `payment_event_id` |
//! | `points_ledger`   | `source_event_no`                  |
//! | `notification`    | `event_id`                         |
//! | `processed_event` | `consumer_group` + `event_id`      |
//!
//! A unique key saying "already there" is a duplicate stopped, never an error: in PostgreSQL the
//! insert is `ON CONFLICT DO NOTHING` (0 rows), in MySQL a plain insert whose duplicate-key error
//! rolls back only that statement, not the transaction.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::Any;

use crate::contracts::{now_ms, PaymentSucceeded};
use crate::db::{is_unique_violation, Database};

/// One event of a batch, with where it came from.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event: PaymentSucceeded,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// What one sink did with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkWrite {
    Applied,
    /// The sink's unique key already had this event.
    Duplicate,
}

/// What the order sink decided for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaidDecision {
    /// CREATED → PAID by this event.
    Applied,
    /// Already PAID by this same event (a redelivery that got past the dedup state).
    AlreadyApplied,
    /// PAID by another event (a second payment for one order): no further effects.
    PaidByOther(String),
    /// The state machine refuses PAID from the current status (e.g. CANCELLED).
    Rejected(String),
    /// No such order: a poison message.
    UnknownOrder,
}

/// Order → PAID for each delivery, in one transaction.
pub async fn mark_paid(db: &Database, batch: &[Delivery]) -> Result<Vec<PaidDecision>, sqlx::Error> {
    let mut tx = db.pool.begin().await?;
    let mut out = Vec::with_capacity(batch.len());
    for d in batch {
        let e = &d.event;
        let moved = sqlx::query(db.sql("stream_order_mark_paid"))
            .bind(e.event_id.as_str())
            .bind(now_ms())
            .bind(e.order_no.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if moved == 1 {
            out.push(PaidDecision::Applied);
            continue;
        }
        let row: Option<(String, Option<String>)> =
            sqlx::query_as(db.sql("stream_order_status")).bind(e.order_no.as_str()).fetch_optional(&mut *tx).await?;
        out.push(match row {
            None => PaidDecision::UnknownOrder,
            Some((status, Some(by))) if status == "PAID" && by == e.event_id => PaidDecision::AlreadyApplied,
            Some((status, Some(by))) if status == "PAID" => PaidDecision::PaidByOther(by),
            Some((status, _)) => PaidDecision::Rejected(status),
        });
    }
    tx.commit().await?;
    Ok(out)
}

/// Points for the payment: one point per 100 minor units.
pub fn points_for(amount: i64) -> i64 {
    amount.max(0) / 100
}

pub async fn write_points(db: &Database, batch: &[&Delivery]) -> Result<Vec<SinkWrite>, sqlx::Error> {
    insert_each(db, "stream_points_insert", batch, |q, d| {
        q.bind(d.event.event_id.clone())
            .bind(d.event.order_no.clone())
            .bind(d.event.user_id)
            .bind(points_for(d.event.amount))
            .bind(now_ms())
    })
    .await
}

pub async fn write_notifications(db: &Database, batch: &[&Delivery]) -> Result<Vec<SinkWrite>, sqlx::Error> {
    insert_each(db, "stream_notification_insert", batch, |q, d| {
        let body = format!("Payment of {}.{:02} received for order {}", d.event.amount / 100, d.event.amount % 100, d.event.order_no);
        q.bind(d.event.event_id.clone()).bind(d.event.order_no.clone()).bind(d.event.user_id).bind("app").bind(body).bind(now_ms())
    })
    .await
}

/// The persisted dedup state: written last, once every other sink of the batch has committed.
pub async fn record_processed(
    db: &Database,
    group: &str,
    ttl_ms: i64,
    batch: &[(&Delivery, &'static str)],
) -> Result<Vec<SinkWrite>, sqlx::Error> {
    let now = now_ms();
    let mut tx = db.pool.begin().await?;
    let mut out = Vec::with_capacity(batch.len());
    for (d, outcome) in batch {
        let q = sqlx::query(db.sql("stream_processed_insert"))
            .bind(group.to_string())
            .bind(d.event.event_id.clone())
            .bind(d.event.order_no.clone())
            .bind(d.topic.clone())
            .bind(d.partition)
            .bind(d.offset)
            .bind(*outcome)
            .bind(now)
            .bind(now + ttl_ms);
        out.push(classify(q.execute(&mut *tx).await)?);
    }
    tx.commit().await?;
    Ok(out)
}

/// Whether `processed_event` already has this event for the group within its TTL.
pub async fn was_processed(db: &Database, group: &str, event_id: &str) -> Result<bool, sqlx::Error> {
    let n: i64 = sqlx::query_scalar(db.sql("stream_processed_find"))
        .bind(group.to_string())
        .bind(event_id.to_string())
        .bind(now_ms())
        .fetch_one(&db.pool)
        .await?;
    Ok(n > 0)
}

type AnyQuery<'q> = Query<'q, Any, AnyArguments<'q>>;

/// Runs one insert per delivery inside one transaction; a unique key that already holds the row
/// is a `Duplicate`, any other error aborts the whole sink (and the batch is retried).
async fn insert_each<'a, F>(db: &'a Database, name: &str, batch: &[&Delivery], bind: F) -> Result<Vec<SinkWrite>, sqlx::Error>
where
    F: for<'q> Fn(AnyQuery<'q>, &Delivery) -> AnyQuery<'q>,
{
    let mut tx = db.pool.begin().await?;
    let mut out = Vec::with_capacity(batch.len());
    for d in batch {
        let q = bind(sqlx::query(db.sql(name)), d);
        out.push(classify(q.execute(&mut *tx).await)?);
    }
    tx.commit().await?;
    Ok(out)
}

fn classify(result: Result<sqlx::any::AnyQueryResult, sqlx::Error>) -> Result<SinkWrite, sqlx::Error> {
    match result {
        Ok(r) if r.rows_affected() == 0 => Ok(SinkWrite::Duplicate),
        Ok(_) => Ok(SinkWrite::Applied),
        Err(e) if is_unique_violation(&e) => Ok(SinkWrite::Duplicate),
        Err(e) => Err(e),
    }
}
