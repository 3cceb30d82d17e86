//! `idemguard migrate`: creates every table of the design, in either dialect, then installs the
//! create routine of line 1 (`order_create_routine`, run whole: its body has `;` of its own).
//!
//! Safe to run twice (every statement is IF NOT EXISTS, the routine is replaced) and from two
//! processes at once (an advisory lock — `pg_advisory_lock` / `GET_LOCK` — serializes them,
//! because two concurrent `CREATE TABLE IF NOT EXISTS` can still collide in PostgreSQL's
//! catalog).

use sqlx::pool::PoolConnection;
use sqlx::Any;

use super::queries::statements;
use super::Database;
use crate::config::Dialect;
use crate::contracts::now_ms;

/// The schema version `queries/<dialect>/schema.sql` and the create routine make. 2: the
/// create transaction became the `{order_record}_create` routine. 3: the routine locks the
/// idempotency record row first and refuses a request finalized FAILED. 4: the
/// report's created_at indexes. An older database is upgraded by `migrate`
/// itself: the routine is replaced and missing indexes are created on every run.
pub const SCHEMA_VERSION: i64 = 4;

/// Statements run after the schema, each whole.
const ROUTINES: &[&str] = &["order_create_routine_drop", "order_create_routine"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    pub version_before: i64,
    pub version_after: i64,
    pub statements: usize,
}

pub async fn migrate(db: &Database) -> anyhow::Result<MigrateReport> {
    let mut conn = db
        .pool
        .acquire()
        .await
        .map_err(|e| anyhow::anyhow!("database {}: {e}", db.shown_url))?;
    match db.dialect() {
        Dialect::Postgres => {
            sqlx::query(db.sql("migrate_lock"))
                .execute(&mut *conn)
                .await?;
        }
        Dialect::Mysql => {
            let got: Option<i64> = sqlx::query_scalar(db.sql("migrate_lock"))
                .fetch_one(&mut *conn)
                .await?;
            if got != Some(1) {
                anyhow::bail!("another `idemguard migrate` held the migration lock for 60s; try again when it has finished");
            }
        }
    }
    let version_before = schema_version(db, &mut conn).await.unwrap_or(0);
    let mut script = statements(db.sql("schema"));
    // The audit table has its own file: a team's DBA runs it alone on a foreign system.
    script.extend(statements(db.sql("console_audit_table")));
    // Routines are one statement each, whatever `;` their bodies hold.
    script.extend(ROUTINES.iter().map(|name| db.sql(name).to_string()));
    let mut failure = None;
    for stmt in &script {
        // A plain &str runs unprepared (DDL), like raw_sql, but keeps the future `Send`.
        if let Err(e) = sqlx::Executor::execute(&mut *conn, stmt.as_str()).await {
            if index_exists(&e, stmt) {
                continue;
            }
            let first = stmt
                .lines()
                .find(|l| !l.trim_start().starts_with("--"))
                .unwrap_or(stmt);
            failure = Some(anyhow::anyhow!(
                "migration failed at `{}`: {e}",
                first.trim()
            ));
            break;
        }
    }
    if failure.is_none() {
        if let Err(e) = sqlx::query(db.sql("schema_version_record"))
            .bind(SCHEMA_VERSION)
            .bind(now_ms())
            .execute(&mut *conn)
            .await
        {
            failure = Some(e.into());
        }
    }
    // Release whatever happened; a dropped connection releases it too.
    let _ = sqlx::query(db.sql("migrate_unlock"))
        .execute(&mut *conn)
        .await;
    if let Some(e) = failure {
        return Err(e);
    }
    let version_after = schema_version(db, &mut conn).await?;
    drop(conn);
    check_columns(db).await?;
    Ok(MigrateReport {
        version_before,
        version_after,
        statements: script.len(),
    })
}

/// A MySQL `CREATE INDEX` of an index the table already has (error 1061, duplicate key name):
/// MySQL has no `IF NOT EXISTS` for it, and a rerun of `migrate` must succeed.
fn index_exists(e: &sqlx::Error, stmt: &str) -> bool {
    let create_index = stmt
        .lines()
        .any(|l| l.trim_start().starts_with("CREATE INDEX "));
    let sqlx::Error::Database(d) = e else {
        return false;
    };
    create_index
        && d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|m| m.number() == 1061)
}

/// Every column the code uses exists. `CREATE TABLE IF NOT EXISTS` never alters a table that
/// already exists, so a database created by an older development schema would otherwise fail
/// later, mid-request, with "column does not exist".
pub async fn check_columns(db: &Database) -> anyhow::Result<()> {
    for stmt in statements(db.sql("schema_check")) {
        if let Err(e) = sqlx::Executor::execute(&db.pool, stmt.as_str()).await {
            let table = stmt
                .split(" FROM ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .unwrap_or("?");
            anyhow::bail!(
                "database {}: table {table} does not have the columns this version uses ({e}); it was created by an \
                 older schema — recreate the database (or migrate it by hand) and run `idemguard migrate`",
                db.shown_url
            );
        }
    }
    Ok(())
}

/// The highest schema version applied; an error when the version table is missing.
pub async fn schema_version(db: &Database, conn: &mut PoolConnection<Any>) -> anyhow::Result<i64> {
    let v: i64 = sqlx::query_scalar(db.sql("schema_version"))
        .fetch_one(&mut **conn)
        .await?;
    Ok(v)
}
