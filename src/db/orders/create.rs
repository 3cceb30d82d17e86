//! Create by requestId (seed §2.1, §2.2, §6.1): one short transaction inserts the order — the
//! unique keys `req_id` and `order_no` decide duplicates — then takes the stock under a row lock
//! ([`crate::db::inventory`]). The transaction is one database routine,
//! `queries/<dialect>/order_create_routine.sql`, called in one round trip. A duplicate is never
//! an error: the losing transaction ends, the first order is read back from the primary and
//! returned as this request's result. The routine first locks the request's idempotency record
//! row and refuses a FAILED record ([`OrderError::RequestAbandoned`]): an operator's finalize
//! locks the same row, so the database orders the two.

use std::time::{Duration, Instant};

use sqlx::Row;

use super::{db_error, order_from_row, OrderError, OrderRecord, Orders};
use crate::contracts::{now_ms, Layer, OrderNo, Outcome, RequestId, TraceEvent};
use crate::db::inventory;
use crate::db::is_transient_conflict;
use crate::db::state_machine::OrderStatus;

/// A create transaction the database aborted as a deadlock victim or serialization failure
/// wrote nothing; it is run again this many times in all.
const CREATE_ATTEMPTS: u32 = 5;

/// What the API layer asks to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    /// The Idempotency-Key; unique in `order_record.req_id`.
    pub request_id: RequestId,
    /// Chosen by the caller (it locks `lock:order:{orderNo}` before creating). A duplicate
    /// request gets the first request's orderNo back, not this one.
    pub order_no: OrderNo,
    pub user_id: i64,
    pub sku_id: i64,
    pub quantity: i64,
    /// Minor units (cents).
    pub amount: i64,
    /// Fence token of the lock held while creating; stored on the row, so later writes under
    /// an older token of the same lock key are refused. `None`: created without a lock.
    pub fence: Option<i64>,
}

/// The result of [`Orders::create`]: either way the caller answers with this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// This request created the order and took its stock.
    Created(OrderRecord),
    /// The unique keys found an earlier request with the same requestId: its order, read back
    /// from the primary. Nothing was written for this request (besides `replay_count`).
    Replayed(OrderRecord),
}

impl CreateOutcome {
    pub fn order(&self) -> &OrderRecord {
        match self {
            CreateOutcome::Created(o) | CreateOutcome::Replayed(o) => o,
        }
    }
    pub fn into_order(self) -> OrderRecord {
        match self {
            CreateOutcome::Created(o) | CreateOutcome::Replayed(o) => o,
        }
    }
    pub fn is_replay(&self) -> bool {
        matches!(self, CreateOutcome::Replayed(_))
    }
}

/// The PostgreSQL routine refuses an unknown SKU (SQLSTATE IGS01) or a short stock (IGS02, the
/// stock there is in DETAIL) by raising, which undoes its order insert; MySQL's procedure
/// answers with a row instead.
fn stock_refusal(order: &NewOrder, e: &sqlx::Error) -> Option<OrderError> {
    let d = e.as_database_error()?;
    match d.code().as_deref()? {
        "IGS01" => Some(OrderError::UnknownSku {
            sku_id: order.sku_id,
        }),
        "IGS02" => {
            let available = d
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.detail())
                .and_then(|detail| detail.trim().parse().ok())?;
            Some(OrderError::OutOfStock {
                sku_id: order.sku_id,
                available,
                wanted: order.quantity,
            })
        }
        _ => None,
    }
}

/// How one create attempt ended.
enum Attempt {
    Created(OrderRecord, inventory::StockTaken),
    Replayed(OrderRecord),
}

impl Orders {
    /// Create the order of `order.request_id`, taking its stock in the same short transaction.
    ///
    /// Any number of concurrent calls with one requestId create one order and one stock
    /// movement; every one of them returns that order. A short stock or an unknown SKU is an
    /// error and writes nothing.
    pub async fn create(&self, order: &NewOrder) -> Result<CreateOutcome, OrderError> {
        let start = Instant::now();
        if order.quantity <= 0 || order.amount < 0 {
            return Err(OrderError::InvalidRequest(format!(
                "an order needs a quantity of at least 1 and an amount of 0 or more (got quantity {}, amount {})",
                order.quantity, order.amount
            )));
        }
        let mut attempt = 1;
        let result = loop {
            match self.create_once(order).await {
                Err(OrderError::Database { source, .. })
                    if is_transient_conflict(&source) && attempt < CREATE_ATTEMPTS =>
                {
                    // The database rolled the whole transaction back (deadlock victim): nothing
                    // was written, so running it again cannot duplicate anything.
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(
                        rand::random_range(1..=10_u64) * u64::from(attempt),
                    ))
                    .await;
                }
                other => break other,
            }
        };
        let ids = |outcome| {
            TraceEvent::new(Layer::Db, outcome)
                .request_id(order.request_id.as_str())
                .since(start)
        };
        match result {
            Ok(Attempt::Created(o, stock)) => {
                self.tracer.emit(
                    ids(Outcome::OrderCreated)
                        .order_no(&o.order_no)
                        .detail(format!(
                            "sku {} stock {} -> {}, fence {}",
                            o.sku_id, stock.before, stock.after, o.fence
                        )),
                );
                Ok(CreateOutcome::Created(o))
            }
            Ok(Attempt::Replayed(o)) => {
                self.tracer.emit(ids(Outcome::UniqueViolationReplayed).order_no(&o.order_no).detail(format!(
                    "req_id already created order {} (status {}); returned it instead of new order {}",
                    o.order_no,
                    o.status,
                    order.order_no
                )));
                Ok(CreateOutcome::Replayed(o))
            }
            Err(e) => {
                if matches!(
                    e,
                    OrderError::OutOfStock { .. } | OrderError::UnknownSku { .. }
                ) {
                    self.tracer.emit(
                        ids(Outcome::StockRejected)
                            .order_no(order.order_no.as_str())
                            .detail(e.to_string()),
                    );
                }
                Err(e)
            }
        }
    }

    /// One call of the create routine and the reading of its answer; long because each
    /// answer (created, duplicate of ours, order_no taken, record already FAILED, no stock)
    /// needs its own read from the primary before the transaction is gone.
    async fn create_once(&self, order: &NewOrder) -> Result<Attempt, OrderError> {
        let db = &self.db;
        let now = now_ms();
        let fence = order.fence.unwrap_or(0);
        // One round trip: the routine is the whole create transaction (queries/<dialect>/
        // order_create_routine.sql), autocommitted.
        let row = sqlx::query(db.sql("order_create"))
            .bind(order.request_id.as_str())
            .bind(order.order_no.as_str())
            .bind(order.user_id)
            .bind(order.sku_id)
            .bind(order.quantity)
            .bind(order.amount)
            .bind(OrderStatus::Created.as_str())
            .bind(fence)
            .bind(now)
            .fetch_one(db)
            .await
            .map_err(|e| {
                stock_refusal(order, &e)
                    .unwrap_or_else(|| db_error(db, "create the order (order_create routine)", e))
            })?;
        // By position: MySQL describes a CALL's result set only when it runs, and sqlx names
        // columns from the prepared statement, which has none.
        let outcome: String = row
            .try_get(0)
            .map_err(|e| db_error(db, "read the create routine's outcome", e))?;
        let order_id: Option<i64> = row
            .try_get(1)
            .map_err(|e| db_error(db, "read the new order's id", e))?;
        let stock_before: Option<i64> = row
            .try_get(2)
            .map_err(|e| db_error(db, "read the stock before the order", e))?;
        match (outcome.trim(), order_id, stock_before) {
            ("created", Some(id), Some(before)) => Ok(Attempt::Created(
                created(order, id, fence, now),
                inventory::StockTaken { before, after: before - order.quantity },
            )),
            ("replayed", _, _) => {
                // Duplicate: the routine's transaction has ended (it wrote nothing but, on
                // MySQL, a replay count). Read the first order from the primary: the answer
                // it got is ours.
                let row = sqlx::query(db.sql("order_replay"))
                    .bind(order.request_id.as_str())
                    .fetch_optional(db)
                    .await
                    .map_err(|e| db_error(db, "read back the first order of this requestId", e))?;
                match row {
                    Some(row) => Ok(Attempt::Replayed(order_from_row(db, &row)?)),
                    // Not our req_id: another request's order already has this order_no.
                    None => Err(OrderError::OrderNoTaken { order_no: order.order_no.to_string() }),
                }
            }
            // The record was finalized FAILED before this create got its row lock (a statement of
            // an instance an operator gave up on): nothing was written.
            ("abandoned", _, _) => Err(OrderError::RequestAbandoned { request_id: order.request_id.to_string() }),
            ("unknown_sku", _, _) => Err(OrderError::UnknownSku { sku_id: order.sku_id }),
            ("out_of_stock", _, Some(available)) => {
                Err(OrderError::OutOfStock { sku_id: order.sku_id, available, wanted: order.quantity })
            }
            (other, id, stock) => Err(db_error(
                db,
                "understand the create routine's answer",
                sqlx::Error::Protocol(format!(
                    "unexpected row ({other:?}, {id:?}, {stock:?}); is `{{order_record}}_create` the version of this build? run `idemguard migrate`"
                )),
            )),
        }
    }
}

/// The row the create routine wrote for `order` as `id`, CREATED at version 0: built from the
/// request, not read back (the routine answers with the new id and the stock it took from).
fn created(order: &NewOrder, id: i64, fence: i64, now: i64) -> OrderRecord {
    OrderRecord {
        id,
        req_id: order.request_id.to_string(),
        order_no: order.order_no.to_string(),
        user_id: order.user_id,
        sku_id: order.sku_id,
        quantity: order.quantity,
        amount: order.amount,
        status: OrderStatus::Created,
        version: 0,
        fence,
        payment_event_id: None,
        replay_count: 0,
        created_at: now,
        updated_at: now,
    }
}
