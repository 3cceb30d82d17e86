//! Stock (seed §2.2). It is taken inside the create transaction, which is the database routine
//! `queries/<dialect>/order_create_routine.sql`: `SELECT stock … FOR UPDATE` by primary key
//! serializes the orders of one SKU, so two of them can never both see the last unit; the
//! decrement is booked in `stock_movement`, whose unique `order_no` stops one order from taking
//! stock twice; the table's `CHECK (stock >= 0)` refuses a negative stock whatever the code
//! does. Nothing remote happens while the lock is held: the routine runs on the server.

use super::errors::{db_error, OrderError};
use super::Database;
use crate::contracts::now_ms;

/// What the create routine did to the stock: before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockTaken {
    pub before: i64,
    pub after: i64,
}

/// Set the stock of a SKU, creating the SKU when it is new (tests, storms, the demo).
pub async fn set_stock(db: &Database, sku_id: i64, stock: i64) -> Result<(), OrderError> {
    if stock < 0 {
        return Err(OrderError::InvalidRequest(format!(
            "stock of SKU {sku_id} must be 0 or more, not {stock}"
        )));
    }
    sqlx::query(db.sql("inventory_set"))
        .bind(sku_id)
        .bind(stock)
        .bind(now_ms())
        .execute(db)
        .await
        .map_err(|e| db_error(db, "set the stock", e))?;
    Ok(())
}

/// The stock of a SKU, read from the pool of `db`; `None` for an unknown SKU.
pub async fn stock_of(db: &Database, sku_id: i64) -> Result<Option<i64>, OrderError> {
    sqlx::query_scalar(db.sql("inventory_stock"))
        .bind(sku_id)
        .fetch_optional(db)
        .await
        .map_err(|e| db_error(db, "read the stock", e))
}
