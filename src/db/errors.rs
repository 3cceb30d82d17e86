//! The errors of the order table and of the stock it takes: one type, below both
//! `orders.rs` and `inventory.rs` so neither reaches into the other for it.

use super::Database;

#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error(
        "SKU {sku_id} has {available} in stock and the order wants {wanted}; nothing was written"
    )]
    OutOfStock {
        sku_id: i64,
        available: i64,
        wanted: i64,
    },
    #[error("SKU {sku_id} is not in the inventory table; nothing was written (seed it with db::inventory::set_stock)")]
    UnknownSku { sku_id: i64 },
    /// The request's idempotency record says FAILED (an operator closed it: the client was told
    /// to send a new key), so the create routine refused to create an order for it.
    #[error("request {request_id} was closed as FAILED (the client was told to send a new key); no order is created for it")]
    RequestAbandoned { request_id: String },
    #[error("order number {order_no} already belongs to another request; generate a new orderNo and create again")]
    OrderNoTaken { order_no: String },
    #[error("no order {order_no} in the order database")]
    NotFound { order_no: String },
    #[error("payment event {event_id} already paid another order, so it cannot pay order {order_no}; check the payment flow of both orders")]
    PaymentEventTaken { event_id: String, order_no: String },
    #[error("order {order_no} has status `{status}`, which the state machine does not know (known: CREATED, PAID, CANCELLED, REFUNDED)")]
    UnknownStatus { order_no: String, status: String },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("database {url}: cannot {what}: {source}")]
    Database {
        what: &'static str,
        url: String,
        #[source]
        source: sqlx::Error,
    },
}

/// A database failure, naming the database and the step.
pub(crate) fn db_error(db: &Database, what: &'static str, source: sqlx::Error) -> OrderError {
    OrderError::Database {
        what,
        url: db.shown_url.clone(),
        source,
    }
}
