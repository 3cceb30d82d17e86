//! Orders on line of defense 1: the order row, its reads by each unique key, and [`Orders`],
//! the handle every layer writes through. Its create by requestId (`orders/create.rs`) and its
//! status transitions under fencing (`orders/transitions.rs`) are files of their own below this
//! one; their types are named from here.
//!
//! Every decision emits a trace event on [`crate::contracts::Layer::Db`] with the order's IDs.
mod create;
mod transitions;

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::bounds::Transaction;

pub(crate) use super::errors::db_error;
pub use super::errors::OrderError;
use super::inventory;
use super::state_machine::OrderStatus;
use super::Database;
use crate::trace::Tracer;
pub use create::{CreateOutcome, NewOrder};
pub use transitions::{Transition, TransitionOutcome};

/// An order row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderRecord {
    pub id: i64,
    pub req_id: String,
    pub order_no: String,
    pub user_id: i64,
    pub sku_id: i64,
    pub quantity: i64,
    /// Minor units (cents).
    pub amount: i64,
    pub status: OrderStatus,
    /// Raised by every status transition (optimistic lock).
    pub version: i64,
    /// The highest lock fence token that wrote this row (0: never written under a lock).
    pub fence: i64,
    /// The payment event that moved the order to PAID.
    pub payment_event_id: Option<String>,
    /// Duplicate creates the unique keys turned into replays of this order.
    pub replay_count: i64,
    /// Epoch milliseconds.
    pub created_at: i64,
    pub updated_at: i64,
}

/// The order table of line 1. Cheap to clone.
#[derive(Clone)]
pub struct Orders {
    db: Database,
    tracer: Tracer,
}

impl Orders {
    /// `db` must be the primary ([`Database::connect`]): every decision and every read-back
    /// after a duplicate is made there, never on a replica (seed §2.4).
    pub fn new(db: Database, tracer: Tracer) -> Orders {
        Orders { db, tracer }
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    async fn read(
        &self,
        conn: &mut Transaction<'_>,
        query: &'static str,
        order_no: &str,
    ) -> Result<OrderRecord, OrderError> {
        let row = sqlx::query(self.db.sql(query))
            .bind(order_no)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| db_error(&self.db, "read the order", e))?;
        match row {
            Some(row) => order_from_row(&self.db, &row),
            None => Err(OrderError::NotFound {
                order_no: order_no.to_string(),
            }),
        }
    }

    /// The latest committed row, locked until the transaction ends.
    async fn current(
        &self,
        conn: &mut Transaction<'_>,
        order_no: &str,
    ) -> Result<OrderRecord, OrderError> {
        self.read(conn, "order_current", order_no).await
    }

    /// The order with this orderNo, from the primary.
    pub async fn find_by_order_no(
        &self,
        order_no: &str,
    ) -> Result<Option<OrderRecord>, OrderError> {
        find_order(&self.db, OrderKey::OrderNo(order_no)).await
    }

    /// The order created for this requestId, from the primary.
    pub async fn find_by_request_id(
        &self,
        request_id: &str,
    ) -> Result<Option<OrderRecord>, OrderError> {
        find_order(&self.db, OrderKey::RequestId(request_id)).await
    }

    /// The order a payment event moved to PAID, from the primary.
    pub async fn find_by_payment_event_id(
        &self,
        event_id: &str,
    ) -> Result<Option<OrderRecord>, OrderError> {
        find_order(&self.db, OrderKey::PaymentEventId(event_id)).await
    }

    /// The stock of a SKU; `None` for an unknown SKU.
    pub async fn stock_of(&self, sku_id: i64) -> Result<Option<i64>, OrderError> {
        inventory::stock_of(&self.db, sku_id).await
    }

    /// Set the stock of a SKU, creating it when new (tests, storms, the demo).
    pub async fn set_stock(&self, sku_id: i64, stock: i64) -> Result<(), OrderError> {
        inventory::set_stock(&self.db, sku_id, stock).await
    }
}

/// A unique key of `order_record`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderKey<'a> {
    OrderNo(&'a str),
    RequestId(&'a str),
    PaymentEventId(&'a str),
}

/// One order by a unique key, from the pool of `db`: the defense layers pass the primary; the
/// console may pass its replica ([`Database::connect_for_reads`]) for views that decide nothing.
pub async fn find_order(
    db: &Database,
    key: OrderKey<'_>,
) -> Result<Option<OrderRecord>, OrderError> {
    let (query, value) = match key {
        OrderKey::OrderNo(v) => ("order_by_order_no", v),
        OrderKey::RequestId(v) => ("order_by_req_id", v),
        OrderKey::PaymentEventId(v) => ("order_by_payment_event_id", v),
    };
    let row = sqlx::query(db.sql(query))
        .bind(value)
        .fetch_optional(db)
        .await
        .map_err(|e| db_error(db, "read the order", e))?;
    row.map(|r| order_from_row(db, &r)).transpose()
}

/// The order of `request_id`, by a locking read inside the caller's transaction (finalize, under
/// its lock of the record row): it sees the latest committed row, never an older snapshot.
pub async fn find_order_locked(
    db: &Database,
    conn: &mut AnyConnection,
    request_id: &str,
) -> Result<Option<OrderRecord>, OrderError> {
    let row = sqlx::query(db.sql("order_by_req_id_locked"))
        .bind(request_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| db_error(db, "read the order under the record's lock", e))?;
    row.map(|r| order_from_row(db, &r)).transpose()
}

fn order_from_row(db: &Database, row: &AnyRow) -> Result<OrderRecord, OrderError> {
    let get_i64 = |c: &str| {
        row.try_get::<i64, _>(c)
            .map_err(|e| db_error(db, "decode an order row", e))
    };
    let get_str = |c: &str| {
        row.try_get::<String, _>(c)
            .map_err(|e| db_error(db, "decode an order row", e))
    };
    let order_no = get_str("order_no")?;
    let raw_status = get_str("status")?;
    let status = OrderStatus::parse(&raw_status).map_err(|_| OrderError::UnknownStatus {
        order_no: order_no.clone(),
        status: raw_status,
    })?;
    Ok(OrderRecord {
        id: get_i64("id")?,
        req_id: get_str("req_id")?,
        order_no,
        user_id: get_i64("user_id")?,
        sku_id: get_i64("sku_id")?,
        quantity: get_i64("quantity")?,
        amount: get_i64("amount")?,
        status,
        version: get_i64("version")?,
        fence: get_i64("fence")?,
        payment_event_id: row
            .try_get::<Option<String>, _>("payment_event_id")
            .map_err(|e| db_error(db, "decode an order row", e))?,
        replay_count: get_i64("replay_count")?,
        created_at: get_i64("created_at")?,
        updated_at: get_i64("updated_at")?,
    })
}
