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
//! A unique key saying "already there" is a duplicate stopped, never an error. Each sink writes a
//! whole batch with one statement whose rows travel as one JSON parameter (`json_to_recordset`
//! in PostgreSQL, `JSON_TABLE` in MySQL/MariaDB) and skips conflicts, so the cost per event is a
//! few bytes, not a round trip.

use crate::contracts::{now_ms, PaymentSucceeded};
use crate::db::orders::{db_error, OrderError, Orders, Transition, TransitionOutcome};
use crate::db::Database;

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
    /// The eventId already paid another order, so it cannot pay this one (named): a poison
    /// message.
    EventUsedElsewhere(String),
}

/// Order → PAID for each delivery, in one transaction of three statements, through the
/// database layer's state machine ([`Orders::transition_batch_in`]: the batch's orders locked
/// at once, each move judged by the one table of transitions, one versioned UPDATE;
/// `payment_event_id` unique).
pub async fn mark_paid(
    orders: &Orders,
    batch: &[Delivery],
) -> Result<Vec<PaidDecision>, OrderError> {
    let db = orders.database();
    let transitions: Vec<Transition> = batch
        .iter()
        .map(|d| Transition::paid(d.event.order_no.as_str(), d.event.event_id.as_str()))
        .collect();
    let mut tx = db
        .begin()
        .await
        .map_err(|e| db_error(db, "begin the order sink", e))?;
    let results = orders.transition_batch_in(&mut tx, &transitions).await?;
    let mut out = Vec::with_capacity(batch.len());
    for (d, result) in batch.iter().zip(results) {
        let e = &d.event;
        let decision = match result {
            Ok(TransitionOutcome::Applied(_)) => PaidDecision::Applied,
            Ok(TransitionOutcome::AlreadyApplied(o)) => match o.payment_event_id {
                Some(by) if by == e.event_id => PaidDecision::AlreadyApplied,
                Some(by) => PaidDecision::PaidByOther(by),
                None => PaidDecision::Rejected(o.status.as_str().to_string()),
            },
            Ok(TransitionOutcome::Rejected(o)) => {
                PaidDecision::Rejected(o.status.as_str().to_string())
            }
            Ok(TransitionOutcome::FenceRejected { current, .. }) => {
                PaidDecision::Rejected(current.status.as_str().to_string())
            }
            Err(OrderError::NotFound { .. }) => PaidDecision::UnknownOrder,
            // This event already paid ANOTHER order: the message is inconsistent, not a retry.
            Err(OrderError::PaymentEventTaken { order_no, .. }) => {
                PaidDecision::EventUsedElsewhere(order_no)
            }
            Err(other) => return Err(other),
        };
        out.push(decision);
    }
    tx.commit()
        .await
        .map_err(|e| db_error(db, "commit the order sink", e))?;
    Ok(out)
}

/// Points for the payment: one point per 100 minor units.
pub fn points_for(amount: i64) -> i64 {
    amount.max(0) / 100
}

/// Writes a batch into one sink in one transaction: first the events its unique key already
/// holds (`{name}_existing`), then one insert of the rest that skips conflicts
/// (`{name}_insert`), so a concurrent writer can never make it fail or double a row.
/// `insert_binds` come before the JSON rows; `existing_binds` before the JSON ids.
async fn write_batch(
    db: &Database,
    name: &str,
    existing_binds: &[&str],
    insert_binds: &[i64],
    ids: &[&str],
    rows: serde_json::Value,
) -> Result<Vec<SinkWrite>, sqlx::Error> {
    let ids_json = serde_json::to_string(ids).expect("ids serialize");
    let mut tx = db.begin().await?;
    let mut existing = sqlx::query_scalar::<_, String>(db.sql(&format!("{name}_existing")))
        .persistent(db.keep_batch_plans());
    for b in existing_binds {
        existing = existing.bind(*b);
    }
    let already: std::collections::HashSet<String> = existing
        .bind(ids_json)
        .fetch_all(&mut tx)
        .await?
        .into_iter()
        .collect();
    let mut insert =
        sqlx::query(db.sql(&format!("{name}_insert"))).persistent(db.keep_batch_plans());
    for b in existing_binds {
        insert = insert.bind(*b);
    }
    for b in insert_binds {
        insert = insert.bind(*b);
    }
    insert.bind(rows.to_string()).execute(&mut tx).await?;
    tx.commit().await?;
    Ok(ids
        .iter()
        .map(|id| {
            if already.contains(*id) {
                SinkWrite::Duplicate
            } else {
                SinkWrite::Applied
            }
        })
        .collect())
}

pub async fn write_points(
    db: &Database,
    batch: &[&Delivery],
) -> Result<Vec<SinkWrite>, sqlx::Error> {
    let ids: Vec<&str> = batch.iter().map(|d| d.event.event_id.as_str()).collect();
    let rows = batch
        .iter()
        .map(|d| {
            serde_json::json!({"event_id": d.event.event_id, "order_no": d.event.order_no, "user_id": d.event.user_id, "points": points_for(d.event.amount)})
        })
        .collect();
    write_batch(db, "stream_points", &[], &[now_ms()], &ids, rows).await
}

pub async fn write_notifications(
    db: &Database,
    batch: &[&Delivery],
) -> Result<Vec<SinkWrite>, sqlx::Error> {
    let ids: Vec<&str> = batch.iter().map(|d| d.event.event_id.as_str()).collect();
    let rows = batch
        .iter()
        .map(|d| {
            let e = &d.event;
            let body = format!("Payment of {}.{:02} received for order {}", e.amount / 100, e.amount % 100, e.order_no);
            serde_json::json!({"event_id": e.event_id, "order_no": e.order_no, "user_id": e.user_id, "channel": "app", "body": body})
        })
        .collect();
    write_batch(db, "stream_notification", &[], &[now_ms()], &ids, rows).await
}

/// The persisted dedup state: written last, once every other sink of the batch has committed.
pub async fn record_processed(
    db: &Database,
    group: &str,
    ttl_ms: i64,
    batch: &[(&Delivery, &'static str)],
) -> Result<Vec<SinkWrite>, sqlx::Error> {
    let now = now_ms();
    let ids: Vec<&str> = batch
        .iter()
        .map(|(d, _)| d.event.event_id.as_str())
        .collect();
    let rows = batch
        .iter()
        .map(|(d, outcome)| {
            serde_json::json!({"event_id": d.event.event_id, "order_no": d.event.order_no, "topic": d.topic,
                "kafka_partition": d.partition, "kafka_offset": d.offset, "outcome": outcome})
        })
        .collect();
    write_batch(
        db,
        "stream_processed",
        &[group],
        &[now, now + ttl_ms],
        &ids,
        rows,
    )
    .await
}

/// A poison message dead-lettered, recorded in `processed_event` under its source position
/// (outcome `dlq`, or `dlq_failed` when the DLQ refused even a record of it), so that a retried
/// or redelivered batch does not publish it again.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    pub id: &'a str,
    pub order_no: Option<String>,
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// `dlq` (published, whole or as a record cut to fit) or `dlq_failed` (the DLQ refused even
    /// a record of it: this row is all there is of it).
    pub outcome: &'static str,
}

pub async fn record_dead_letters(
    db: &Database,
    group: &str,
    ttl_ms: i64,
    sent: &[DeadLetter<'_>],
) -> Result<(), sqlx::Error> {
    if sent.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let ids: Vec<&str> = sent.iter().map(|d| d.id).collect();
    let rows = sent
        .iter()
        .map(|d| {
            serde_json::json!({"event_id": d.id, "order_no": d.order_no, "topic": d.topic,
                "kafka_partition": d.partition, "kafka_offset": d.offset, "outcome": d.outcome})
        })
        .collect();
    write_batch(
        db,
        "stream_processed",
        &[group],
        &[now, now + ttl_ms],
        &ids,
        rows,
    )
    .await?;
    Ok(())
}

/// The eventIds of `ids` this group processed within the dedup TTL: one query per batch.
pub async fn already_processed(
    db: &Database,
    group: &str,
    ids: &[&str],
) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let found: Vec<String> = sqlx::query_scalar(db.sql("stream_processed_find"))
        .persistent(db.keep_batch_plans())
        .bind(group.to_string())
        .bind(now_ms())
        .bind(serde_json::to_string(ids).expect("ids serialize"))
        .fetch_all(db)
        .await?;
    Ok(found.into_iter().collect())
}
