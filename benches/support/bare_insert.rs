//! The yardstick every order benchmark compares against: one autocommitted statement writing
//! the same columns `order_insert` writes, skipping duplicates the cheapest way each dialect
//! has. Written here, not under queries/: no part of idemguard runs it.

use idemguard::config::Dialect;
use idemguard::contracts::now_ms;
use idemguard::db::orders::NewOrder;
use idemguard::db::Database;

pub fn bare_insert_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => {
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING"
        }
        Dialect::Mysql => {
            "INSERT IGNORE INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        }
    }
}

/// Inserts `order` with the bare statement; panics unless a row was written.
pub async fn insert_one(db: &Database, order: &NewOrder) {
    let now = now_ms();
    let r = sqlx::query(bare_insert_sql(db.dialect()))
        .bind(order.request_id.as_str())
        .bind(order.order_no.as_str())
        .bind(order.user_id)
        .bind(order.sku_id)
        .bind(order.quantity)
        .bind(order.amount)
        .bind("CREATED")
        .bind(0_i64)
        .bind(now)
        .bind(now)
        .execute(&db.pool)
        .await
        .expect("bare insert");
    assert_eq!(r.rows_affected(), 1, "the baseline must insert, not skip");
}
