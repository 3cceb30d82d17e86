//! How long one statement may take, on both sides of the connection.
//!
//! - **On the server**: every session is given its bound as it is opened
//!   (`queries/<dialect>/session_bound.sql`: PostgreSQL `statement_timeout` and `lock_timeout`;
//!   MariaDB `max_statement_time`; MySQL `max_execution_time`; both `lock_wait_timeout`). The
//!   server ends a statement that waits too long, so a read that gives up leaves nothing behind.
//!   A client that only stopped waiting would leave its statement queued on the lock until the
//!   lock was released (measured: the console's timed-out reads left 16 sessions waiting in
//!   `pg_stat_activity` behind one `LOCK TABLE`), and a pooled connection whose statement is
//!   still running cannot serve the next read either.
//! - **On the client**: [`Database::bounded`] gives up [`CLIENT_GRACE`] after the server's bound,
//!   for a server that does not answer at all (a host gone, a frozen process).
//!
//! The services' sessions are bounded by `database.statement_timeout`, the read faces' by
//! `database.read_timeout` ([`crate::config::Config::for_reads`]); `migrate` by nothing.
//! A statement ended by either side is said the same way ([`no_answer`]): the table it read,
//! how long it was given, and where to look for the session in its way.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::AnyConnection;

use super::Database;
use crate::config::Dialect;

/// How much longer than the server's bound the client waits before it gives up itself: the
/// server's own answer (the statement ended, the table named) normally comes first.
pub const CLIENT_GRACE: Duration = Duration::from_secs(1);

/// The step run on every new connection of a pool: its statement bound (`sql`:
/// `session_bound.sql` of the pool's dialect, which takes the bound in milliseconds twice).
/// Nothing is set for a zero bound.
pub fn after_connect(
    sql: String,
    bound: Duration,
) -> impl for<'c> Fn(
    &'c mut AnyConnection,
    PoolConnectionMetadata,
) -> BoxFuture<'c, Result<(), sqlx::Error>>
       + Send
       + Sync
       + 'static {
    move |conn, _| {
        let sql = sql.clone();
        Box::pin(async move {
            if bound.is_zero() {
                return Ok(());
            }
            let ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
            sqlx::query(&sql)
                .bind(ms)
                .bind(ms)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }
}

/// True when the statement was ended for taking too long: by the server's bound (PostgreSQL
/// 57014 "statement timeout" and 55P03 "lock timeout"; MariaDB 1969 `max_statement_time`; MySQL
/// 3024 `max_execution_time` and 1205 `lock_wait_timeout` / `innodb_lock_wait_timeout`) or by
/// the client's deadline ([`Database::bounded`]).
pub fn is_timeout(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            let pg = match d.code().as_deref() {
                Some("55P03") => true,
                Some("57014") => d.message().contains("timeout"),
                _ => false,
            };
            let mysql = d
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|m| matches!(m.number(), 1969 | 3024 | 1205));
            pg || mysql
        }
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::TimedOut,
        _ => false,
    }
}

impl Database {
    /// `statement` under the client-side deadline: the server's bound plus [`CLIENT_GRACE`].
    /// A statement still unanswered then fails as a timed-out I/O ([`is_timeout`]); its
    /// connection is not reused, and the server ends the statement at its own bound.
    pub async fn bounded<T>(
        &self,
        statement: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        if self.statement_bound.is_zero() {
            return statement.await;
        }
        let deadline = self.statement_bound + CLIENT_GRACE;
        match tokio::time::timeout(deadline, statement).await {
            Ok(result) => result,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {deadline:?}"),
            ))),
        }
    }
}

/// What to say when statement `name` was ended for taking too long (`e`, [`is_timeout`]): the
/// database, the tables the statement reads, the bound and its setting, and where to see the
/// session in its way.
pub fn no_answer(db: &Database, name: &str, e: &sqlx::Error) -> anyhow::Error {
    let tables = db.queries.tables_in(name);
    let what = if tables.is_empty() {
        format!("statement {name}")
    } else {
        format!("{} (statement {name})", tables.join(", "))
    };
    let ended = if matches!(e, sqlx::Error::Io(_)) {
        "the server did not answer at all"
    } else {
        "the server ended the statement"
    };
    let first = tables.first().map_or("the table", String::as_str);
    let look = match db.dialect() {
        Dialect::Postgres => format!(
            "is another session holding a lock on it? look at pg_locks: SELECT l.pid, l.mode, \
             a.state, a.query FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE \
             l.relation = '{first}'::regclass"
        ),
        Dialect::Mysql => format!(
            "is another session holding a lock on it? look at SHOW PROCESSLIST (a session \
             holding LOCK TABLES {first} or a long transaction on it; those behind it show \
             \"Waiting for table metadata lock\")"
        ),
    };
    anyhow::Error::new(NoAnswer(format!(
        "database {}: {what} did not answer within {:?} ({ended}) — {look}; each read is \
         bounded by database.read_timeout",
        db.shown_url, db.statement_bound,
    )))
}

/// A statement that was ended for taking too long, said by [`no_answer`]: typed, so the console
/// shows its database as slow rather than down (it answers, its reads do not finish).
#[derive(Debug)]
pub struct NoAnswer(String);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoAnswer {}
