//! The connection side of one Redis node, shared by the node and its batch driver: a lazily
//! opened multiplexed connection, every command bounded by `redis.command_timeout`, and errors
//! that name the node's host:port ([`NodeError`]). Below both `node.rs` and
//! `batch.rs`, so neither reaches into the other for it.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, Value};

use crate::config::{host_port, redact_url};

/// How long a failed connect is remembered before the next caller tries again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// A node that could not be reached, or that refused an operation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeError {
    /// host:port of the node.
    pub node: String,
    /// What went wrong, e.g. "refused the connection", "did not answer within 500ms".
    pub problem: String,
    /// True when the node could not be reached (as opposed to answering with an error).
    pub unreachable: bool,
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redis node {} {}", self.node, self.problem)?;
        if self.unreachable {
            write!(f, " (is it running? scripts/stack status)")?;
        }
        Ok(())
    }
}

impl std::error::Error for NodeError {}

/// The connection side of a node, shared with its batch driver.
pub(crate) struct Conn {
    pub addr: String,
    client: redis::Client,
    pub timeout: Duration,
    /// The connection and the runtime whose task drives it: a connection opened on a runtime
    /// that has since shut down is dead, so another runtime opens its own.
    slot: Mutex<Option<(tokio::runtime::Id, MultiplexedConnection)>>,
    /// Held while connecting; remembers the last failed connect.
    connecting: tokio::sync::Mutex<Option<(Instant, String)>>,
    /// Whether the server has `DELEX key IFEQ value` (Redis 8.4+), asked once per node.
    delex: OnceLock<bool>,
}

impl Conn {
    pub fn open(url: &str, timeout: Duration) -> Result<Conn, NodeError> {
        let addr = host_port(url);
        let client = redis::Client::open(url).map_err(|e| NodeError {
            node: addr.clone(),
            problem: format!("has an unusable URL {}: {e}", redact_url(url)),
            unreachable: false,
        })?;
        Ok(Conn {
            addr,
            client,
            timeout,
            slot: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(None),
            delex: OnceLock::new(),
        })
    }

    /// True once the server is known to have `DELEX … IFEQ`.
    pub fn has_delex(&self) -> bool {
        self.delex.get().copied().unwrap_or(false)
    }

    /// An error reaching this node.
    pub fn error(&self, problem: impl Into<String>) -> NodeError {
        NodeError {
            node: self.addr.clone(),
            problem: problem.into(),
            unreachable: true,
        }
    }

    /// An error this node answered with.
    pub fn refused(&self, problem: impl Into<String>) -> NodeError {
        NodeError {
            node: self.addr.clone(),
            problem: problem.into(),
            unreachable: false,
        }
    }

    fn describe(&self, e: &RedisError) -> (String, bool) {
        if e.is_connection_refusal() {
            ("refused the connection".into(), true)
        } else if e.is_timeout() {
            (
                format!("did not answer within {}ms", self.timeout.as_millis()),
                true,
            )
        } else if e.is_connection_dropped() || e.is_io_error() {
            (format!("dropped the connection ({e})"), true)
        } else {
            (format!("answered with an error: {e}"), false)
        }
    }

    fn cached(&self, runtime: tokio::runtime::Id) -> Option<MultiplexedConnection> {
        match &*self.slot.lock().expect("node slot") {
            Some((id, c)) if *id == runtime => Some(c.clone()),
            _ => None,
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, NodeError> {
        let runtime = tokio::runtime::Handle::current().id();
        if let Some(c) = self.cached(runtime) {
            return Ok(c);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(c) = self.cached(runtime) {
            return Ok(c);
        }
        if let Some((at, problem)) = last_failure.as_ref() {
            if at.elapsed() < RECONNECT_PAUSE {
                return Err(self.error(problem.clone()));
            }
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connected = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            if self.delex.get().is_none() {
                // COMMAND INFO answers [nil] for a command the server does not have.
                let info: Value = redis::cmd("COMMAND")
                    .arg("INFO")
                    .arg("DELEX")
                    .query_async(&mut conn)
                    .await?;
                let known = matches!(&info, Value::Array(items) if items.first().is_some_and(|v| !matches!(v, Value::Nil)));
                let _ = self.delex.set(known);
            }
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.timeout, connected).await {
            Ok(Ok(conn)) => {
                *self.slot.lock().expect("node slot") = Some((runtime, conn.clone()));
                *last_failure = None;
                Ok(conn)
            }
            Ok(Err(e)) => {
                let (problem, _) = self.describe(&e);
                *last_failure = Some((Instant::now(), problem.clone()));
                Err(self.error(problem))
            }
            Err(_) => {
                let problem = format!(
                    "did not accept a connection within {}ms",
                    self.timeout.as_millis()
                );
                *last_failure = Some((Instant::now(), problem.clone()));
                Err(self.error(problem))
            }
        }
    }

    /// Forget a connection that failed so the next call opens a new one.
    fn forget(&self) {
        *self.slot.lock().expect("node slot") = None;
    }

    /// Run `f` on this node's connection, the whole of it (connect included) bounded by the
    /// command timeout.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T, NodeError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let attempt = async {
            let conn = self.connection().await?;
            f(conn).await.map_err(|e| {
                let (problem, unreachable) = self.describe(&e);
                if unreachable || e.is_unrecoverable_error() {
                    self.forget();
                }
                NodeError {
                    node: self.addr.clone(),
                    problem,
                    unreachable,
                }
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => {
                self.forget();
                Err(self.error(format!(
                    "did not answer within {}ms",
                    self.timeout.as_millis()
                )))
            }
        }
    }
}
