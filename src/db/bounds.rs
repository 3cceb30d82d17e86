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
//! - **On the client**: every statement gives up [`CLIENT_GRACE`] after the server's bound, for a
//!   server that does not answer at all (a host gone, a frozen process), whose own bound never
//!   fires. The services' statements run through `&Database` and [`Transaction`] (begin and
//!   commit included), which are sqlx executors that wait no longer; the read faces wrap theirs
//!   in [`Database::bounded`]. A transaction that gave up is dropped, so it rolls back like one
//!   any other error ended; its connection is not reused.
//!
//! The services' sessions are bounded by `database.statement_timeout`, the read faces' by
//! `database.read_timeout` ([`crate::config::Config::for_reads`]); `migrate` by nothing.
//! A statement ended by either side is said the same way ([`no_answer`]): the table it read,
//! how long it was given, and where to look for the session in its way.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use sqlx::any::{AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::pool::PoolConnectionMetadata;
use sqlx::{Any, AnyConnection, Describe, Either, Execute, Executor};

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
        let Some(deadline) = self.client_deadline() else {
            return statement.await;
        };
        match tokio::time::timeout(deadline, statement).await {
            Ok(result) => result,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {deadline:?}"),
            ))),
        }
    }

    /// The server's bound plus [`CLIENT_GRACE`]; None when the sessions have no bound.
    fn client_deadline(&self) -> Option<Duration> {
        (!self.statement_bound.is_zero()).then(|| self.statement_bound + CLIENT_GRACE)
    }

    /// A timed-out I/O error ([`is_timeout`]) whose text is [`no_answer`]'s for statement `name`.
    fn unanswered(&self, name: &str) -> sqlx::Error {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer");
        let said = no_answer(self, name, &sqlx::Error::Io(io));
        sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            said.to_string(),
        ))
    }

    /// The statement's name for [`no_answer`]: from its text, so no SQL reaches a log.
    fn name_of_sql(&self, sql: &str) -> &'static str {
        self.queries.name_of(sql).unwrap_or("(unnamed)")
    }

    /// `step` (a statement, begin or commit) under the client deadline.
    async fn answered<T>(
        &self,
        name: &str,
        step: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        let Some(deadline) = self.client_deadline() else {
            return step.await;
        };
        tokio::time::timeout(deadline, step)
            .await
            .unwrap_or_else(|_| Err(self.unanswered(name)))
    }

    /// A transaction on the pool, its begin, statements and commit under the client deadline.
    pub async fn begin(&self) -> Result<Transaction<'_>, sqlx::Error> {
        let inner = self.answered("begin", self.pool.begin()).await?;
        Ok(Transaction { inner, db: self })
    }
}

/// A transaction of [`Database::begin`]: an executor (`&mut tx`) whose every statement waits
/// no longer than the client deadline. Dropped unfinished, it rolls back.
pub struct Transaction<'d> {
    inner: sqlx::Transaction<'static, Any>,
    db: &'d Database,
}

impl Transaction<'_> {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.db.answered("commit", self.inner.commit()).await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.db.answered("rollback", self.inner.rollback()).await
    }
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Transaction on {}", self.db.shown_url)
    }
}

/// Each row (or the statement's end) of `rows` within the client deadline.
fn rows_answered<'e, T: Send + 'e>(
    db: &'e Database,
    sql: &'e str,
    rows: BoxStream<'e, Result<T, sqlx::Error>>,
) -> BoxStream<'e, Result<T, sqlx::Error>> {
    let Some(deadline) = db.client_deadline() else {
        return rows;
    };
    futures::stream::unfold(Some(rows), move |rows| async move {
        let mut rows = rows?;
        match tokio::time::timeout(deadline, rows.next()).await {
            Ok(Some(row)) => Some((row, Some(rows))),
            Ok(None) => None,
            Err(_) => Some((Err(db.unanswered(db.name_of_sql(sql))), None)),
        }
    })
    .boxed()
}

/// The executor methods of `&Database` and `&mut Transaction`: `$inner` runs the statement,
/// `$db` bounds it.
macro_rules! bounded_executor {
    ($this:ident, $inner:expr, $db:expr) => {
        type Database = Any;

        fn fetch_many<'e, 'q: 'e, E>(
            $this,
            query: E,
        ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
        where
            'c: 'e,
            E: 'q + Execute<'q, Any>,
        {
            let sql = query.sql();
            let db = $db;
            rows_answered(db, sql, $inner.fetch_many(query))
        }

        fn fetch_optional<'e, 'q: 'e, E>(
            $this,
            query: E,
        ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
        where
            'c: 'e,
            E: 'q + Execute<'q, Any>,
        {
            let sql = query.sql();
            let db = $db;
            let row = $inner.fetch_optional(query);
            Box::pin(async move { db.answered(db.name_of_sql(sql), row).await })
        }

        fn prepare_with<'e, 'q: 'e>(
            $this,
            sql: &'q str,
            parameters: &'e [AnyTypeInfo],
        ) -> BoxFuture<'e, Result<AnyStatement<'q>, sqlx::Error>>
        where
            'c: 'e,
        {
            let db = $db;
            let prepared = $inner.prepare_with(sql, parameters);
            Box::pin(async move { db.answered(db.name_of_sql(sql), prepared).await })
        }

        fn describe<'e, 'q: 'e>(
            $this,
            sql: &'q str,
        ) -> BoxFuture<'e, Result<Describe<Any>, sqlx::Error>>
        where
            'c: 'e,
        {
            let db = $db;
            let described = $inner.describe(sql);
            Box::pin(async move { db.answered(db.name_of_sql(sql), described).await })
        }
    };
}

impl<'c> Executor<'c> for &'c Database {
    bounded_executor!(self, &self.pool, self);
}

impl<'c, 'd: 'c> Executor<'c> for &'c mut Transaction<'d> {
    bounded_executor!(self, &mut *self.inner, self.db);
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
        "database {}: {what} did not answer within {:?} ({ended}) — {look}; each statement is \
         bounded by {}",
        db.shown_url, db.statement_bound, db.bound_setting,
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
