//! Line of defense 1, the order database: the final arbiter. Its unique keys decide what is a
//! duplicate even when every layer above has failed (seed §2, §5.4).
//!
//! One code base serves PostgreSQL and MySQL/MariaDB through sqlx's `Any` driver; what differs
//! between them lives in the SQL files under `queries/<dialect>/`, never in Rust.

pub mod bounds;
pub mod clock;
mod errors;
pub mod inventory;
pub mod migrate;
pub mod orders;
pub mod queries;
pub mod retention;
pub mod state_machine;

use std::sync::{Arc, Once};

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

use crate::config::{host_port, redact_url, Config, Dialect};
pub use queries::Queries;

/// A pool on the order database plus the statements of its dialect.
#[derive(Clone)]
pub struct Database {
    pub pool: AnyPool,
    pub queries: Arc<Queries>,
    /// The URL with its password hidden, for messages.
    pub shown_url: String,
    /// The newest wall-clock time of each mapped `datetime` table, read once per connection
    /// (a `MAX` may read a table): what each trace checks `source.time_zone` against.
    pub newest_rows: Arc<tokio::sync::OnceCell<Vec<clock::NewestRow>>>,
    /// How long the server lets one statement of this pool's sessions run (zero: no bound):
    /// [`bounds`].
    pub statement_bound: std::time::Duration,
    /// The setting `statement_bound` came from, for messages: `database.statement_timeout`, or
    /// `database.read_timeout` for the read faces.
    pub bound_setting: &'static str,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database {}", self.shown_url)
    }
}

static INSTALL_DRIVERS: Once = Once::new();

impl Database {
    /// The primary: every write, and every read-back after a unique violation.
    pub async fn connect(config: &Config) -> anyhow::Result<Database> {
        Database::connect_url(config, &config.database.url).await
    }

    /// The replica when one is configured (console reads only), else the primary; each
    /// statement bounded by `database.read_timeout` ([`Config::for_reads`]).
    pub async fn connect_for_reads(config: &Config) -> anyhow::Result<Database> {
        let config = &config.for_reads();
        let mut db = if config.database.replica_url.is_empty() {
            Database::connect(config).await?
        } else {
            Database::connect_url(config, &config.database.replica_url).await?
        };
        db.bound_setting = "database.read_timeout";
        Ok(db)
    }

    /// The actions' own credentials (`database.actions_url`, least privilege) when configured,
    /// else the primary.
    pub async fn connect_for_actions(config: &Config) -> anyhow::Result<Database> {
        if config.database.actions_url.is_empty() {
            Database::connect(config).await
        } else {
            Database::connect_url(config, &config.database.actions_url).await
        }
    }

    pub async fn connect_url(config: &Config, url: &str) -> anyhow::Result<Database> {
        INSTALL_DRIVERS.call_once(sqlx::any::install_default_drivers);
        let dialect = Dialect::of_url(url);
        let override_dir = (!config.database.queries_dir.is_empty())
            .then(|| std::path::Path::new(&config.database.queries_dir));
        let queries = Queries::load(dialect, &queries::Templating::of(config), override_dir)?;
        probe_tcp(url, config.database.connect_timeout).await?;
        let with_password = config
            .database
            .url_with_password(url)
            .map_err(|e| anyhow::anyhow!("database {}: {e}", redact_url(url)))?;
        let connected = AnyPoolOptions::new()
            .max_connections(config.database.max_connections)
            .acquire_timeout(config.database.connect_timeout)
            .after_connect(bounds::after_connect(
                queries.get("session_bound").to_string(),
                config.database.statement_timeout,
            ))
            .connect(&with_password)
            .await;
        let pool = match connected {
            Ok(pool) => pool,
            Err(e) => {
                return Err(tls_refusal(url, &e)
                    .await
                    .unwrap_or_else(|| connect_error(url, &e)))
            }
        };
        Ok(Database {
            pool,
            queries: Arc::new(queries),
            shown_url: redact_url(url),
            newest_rows: Arc::default(),
            statement_bound: config.database.statement_timeout,
            bound_setting: "database.statement_timeout",
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.queries.dialect()
    }

    /// Whether a batch statement — one whose rows travel as one JSON parameter: the consumer's
    /// lookups and writes, the batched transition — keeps a server-side prepared plan. Not on
    /// PostgreSQL: after five runs it caches a generic plan, and one made while a table was
    /// young keeps scanning all of it as it grows (measured: the processed_event lookup took
    /// 50 ms a batch at 20,000 rows). An unnamed statement is planned with the table as it is,
    /// once per batch. MySQL plans every execution anyway and keeps its statements.
    pub fn keep_batch_plans(&self) -> bool {
        self.dialect() != Dialect::Postgres
    }

    /// The text of a statement under `queries/<dialect>/`.
    pub fn sql(&self, name: &str) -> &str {
        self.queries.get(name)
    }

    /// "PostgreSQL 15.19 …" / "mariadb.org binary distribution 10.11.19-MariaDB …".
    pub async fn server_version(&self) -> anyhow::Result<String> {
        let v: String = sqlx::query_scalar(self.sql("server_version"))
            .fetch_one(&self.pool)
            .await?;
        Ok(v)
    }
}

/// Says "refused" at once instead of after the pool's acquire timeout, which hides the cause.
async fn probe_tcp(url: &str, timeout: std::time::Duration) -> anyhow::Result<()> {
    let target = host_port(url);
    let shown = redact_url(url);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&target)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => anyhow::bail!("database {shown} ({target}) refused the connection: {e} (is it running? `scripts/stack up` starts the local stack)"),
        Err(_) => anyhow::bail!("database {shown} ({target}) did not answer within {timeout:?} (is the host reachable?)"),
    }
}

/// A connection our TLS settings (or their absence) made fail: which refusal, and the URL
/// parameter that fixes it. MariaDB answers a plaintext login on a server that requires TLS with
/// "Access denied", as it does a wrong password: when the URL said `ssl-mode=DISABLED` and the
/// server offers TLS, that is said as the likelier cause.
async fn tls_refusal(url: &str, e: &sqlx::Error) -> Option<anyhow::Error> {
    let dialect = Dialect::of_url(url);
    let backend = match dialect {
        Dialect::Postgres => crate::tls::Backend::Postgres,
        Dialect::Mysql => crate::tls::Backend::Mysql,
    };
    let target = host_port(url);
    let text = format!("{e} {:?}", e.as_database_error().map(|d| d.message()));
    let mut refusal = crate::tls::Refusal::of_text(&text);
    let mode = url::Url::parse(url).ok().and_then(|u| {
        u.query_pairs()
            .find(|(k, _)| k == "ssl-mode" || k == "sslmode")
            .map(|(_, v)| v.to_ascii_uppercase())
    });
    if refusal.is_none()
        && dialect == Dialect::Mysql
        && text.contains("Access denied")
        && mode.as_deref() == Some("DISABLED")
        && crate::tls::speaks_tls(backend, &target).await
    {
        refusal = Some(crate::tls::Refusal::PlaintextRefused);
    }
    let why = refusal?.explain(backend, &target);
    Some(anyhow::anyhow!(
        "database {} ({target}): {why}",
        redact_url(url)
    ))
}

/// A connection error that names the database and says what to do.
pub fn connect_error(url: &str, e: &sqlx::Error) -> anyhow::Error {
    let target = host_port(url);
    let shown = redact_url(url);
    let text = e.to_string();
    let hint = if text.contains("refused")
        || text.contains("timed out")
        || matches!(e, sqlx::Error::PoolTimedOut)
    {
        format!("is it running on {target}? `scripts/stack up` starts the local stack")
    } else if text.contains("does not exist") || text.contains("Unknown database") {
        "create the database (the local stack's `scripts/stack up` creates `idemguard`)".to_string()
    } else if text.contains("password")
        || text.contains("Access denied")
        || text.contains("authentication")
    {
        "check the user and password in the URL (set it through IDEMGUARD_DATABASE__URL)"
            .to_string()
    } else {
        "check database.url (or IDEMGUARD_DATABASE__URL)".to_string()
    };
    anyhow::anyhow!("database {shown} ({target}): {text} ({hint})")
}

/// True when `e` is a unique-key violation: the database telling us "this already exists".
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.kind(), sqlx::error::ErrorKind::UniqueViolation) || {
                // PostgreSQL 23505, in case the driver does not classify it. (MySQL's SQLSTATE 23000
                // is not enough: it also covers NOT NULL and CHECK violations, e.g. a negative stock.)
                matches!(d.code().as_deref(), Some("23505"))
            }
        }
        _ => false,
    }
}

/// True when the database aborted the whole transaction as a deadlock victim or a serialization
/// failure (PostgreSQL 40P01 / 40001, MySQL 1213 = SQLSTATE 40001): nothing of it was written,
/// so it may be run again.
pub fn is_transient_conflict(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(d.code().as_deref(), Some("40001") | Some("40P01")),
        _ => false,
    }
}

/// True when a statement gave up waiting for a row lock (PostgreSQL `lock_timeout`, 55P03;
/// MySQL `innodb_lock_wait_timeout`, error 1205, whose SQLSTATE HY000 says nothing): nothing was
/// written by it.
pub fn is_lock_timeout(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.code().as_deref() == Some("55P03")
                || d.message().contains("Lock wait timeout exceeded")
        }
        _ => false,
    }
}
