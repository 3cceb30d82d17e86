//! Stock, taken inside the create transaction under a row lock (seed §2.2).
//!
//! `SELECT stock … FOR UPDATE` by primary key serializes the orders of one SKU, so two of them
//! can never both see the last unit; the decrement is booked in `stock_movement`, whose unique
//! `order_no` stops one order from taking stock twice; the table's `CHECK (stock >= 0)` refuses
//! a negative stock whatever the code does. Nothing remote happens while the lock is held.

use sqlx::AnyConnection;

use super::orders::{db_error, OrderError};
use super::Database;
use crate::contracts::now_ms;

/// What [`take`] did: the stock before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockTaken {
    pub before: i64,
    pub after: i64,
}

/// Take `quantity` of `sku_id` for `order_no`, inside the caller's transaction (the create
/// transaction, right after the order insert). On an error the caller rolls back, so an
/// unknown SKU or a short stock writes nothing.
pub(crate) async fn take(
    db: &Database,
    conn: &mut AnyConnection,
    sku_id: i64,
    quantity: i64,
    order_no: &str,
    req_id: &str,
) -> Result<StockTaken, OrderError> {
    let stock: Option<i64> = sqlx::query_scalar(db.sql("inventory_lock"))
        .bind(sku_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| db_error(db, "lock the inventory row", e))?;
    let Some(before) = stock else {
        return Err(OrderError::UnknownSku { sku_id });
    };
    if before < quantity {
        return Err(OrderError::OutOfStock { sku_id, available: before, wanted: quantity });
    }
    let now = now_ms();
    sqlx::query(db.sql("inventory_take"))
        .bind(quantity)
        .bind(now)
        .bind(sku_id)
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error(db, "decrement the stock", e))?;
    sqlx::query(db.sql("stock_movement_insert"))
        .bind(order_no)
        .bind(req_id)
        .bind(sku_id)
        .bind(-quantity)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(|e| db_error(db, "book the stock movement (order_no is unique: one decrement per order)", e))?;
    Ok(StockTaken { before, after: before - quantity })
}

/// Set the stock of a SKU, creating the SKU when it is new (tests, storms, the demo).
pub async fn set_stock(db: &Database, sku_id: i64, stock: i64) -> Result<(), OrderError> {
    if stock < 0 {
        return Err(OrderError::InvalidRequest(format!("stock of SKU {sku_id} must be 0 or more, not {stock}")));
    }
    sqlx::query(db.sql("inventory_set"))
        .bind(sku_id)
        .bind(stock)
        .bind(now_ms())
        .execute(&db.pool)
        .await
        .map_err(|e| db_error(db, "set the stock", e))?;
    Ok(())
}

/// The stock of a SKU, read from the pool of `db`; `None` for an unknown SKU.
pub async fn stock_of(db: &Database, sku_id: i64) -> Result<Option<i64>, OrderError> {
    sqlx::query_scalar(db.sql("inventory_stock"))
        .bind(sku_id)
        .fetch_optional(&db.pool)
        .await
        .map_err(|e| db_error(db, "read the stock", e))
}
