//! One Redis node: a lazily opened, shared (multiplexed) connection, every command bounded by
//! `redis.command_timeout`, and errors that name the node's host:port.
//!
//! A node that is down must never stall the others (RedLock asks all nodes at once) nor the
//! process start (the console must open with a node down), so connecting happens on first use,
//! and after a failed connect the node answers "down" at once for a short pause instead of
//! making every caller wait for its own connect timeout.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError, Value};

use crate::config::{host_port, redact_url};

/// How long a failed connect is remembered before the next caller tries again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// A node that could not be reached or refused a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redis node {node} {problem} (is it running? scripts/stack status)")]
pub struct NodeError {
    /// host:port of the node.
    pub node: String,
    /// What went wrong, e.g. "refused the connection", "did not answer within 500ms".
    pub problem: String,
}

pub(crate) struct Node {
    /// host:port, used in every message about this node.
    pub addr: String,
    client: redis::Client,
    timeout: Duration,
    slot: Mutex<Option<MultiplexedConnection>>,
    /// Held while connecting; remembers the last failed connect.
    connecting: tokio::sync::Mutex<Option<(Instant, String)>>,
    /// Whether the server has `DELEX key IFEQ value` (Redis 8.4+), asked once per node.
    delex: OnceLock<bool>,
}

impl Node {
    pub fn open(url: &str, timeout: Duration) -> Result<Node, NodeError> {
        let addr = host_port(url);
        let client = redis::Client::open(url)
            .map_err(|e| NodeError { node: addr.clone(), problem: format!("has an unusable URL {}: {e}", redact_url(url)) })?;
        Ok(Node {
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

    fn error(&self, problem: impl Into<String>) -> NodeError {
        NodeError { node: self.addr.clone(), problem: problem.into() }
    }

    fn describe(&self, e: &RedisError) -> String {
        if e.is_connection_refusal() {
            "refused the connection".into()
        } else if e.is_timeout() {
            format!("did not answer within {}ms", self.timeout.as_millis())
        } else if e.is_connection_dropped() {
            "dropped the connection".into()
        } else {
            format!("failed: {e}")
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, NodeError> {
        if let Some(c) = self.slot.lock().expect("node slot").clone() {
            return Ok(c);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(c) = self.slot.lock().expect("node slot").clone() {
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
            let mut conn = self.client.get_multiplexed_async_connection_with_config(&config).await?;
            if self.delex.get().is_none() {
                // COMMAND INFO answers [nil] for a command the server does not have.
                let info: Value = redis::cmd("COMMAND").arg("INFO").arg("DELEX").query_async(&mut conn).await?;
                let known = matches!(&info, Value::Array(items) if items.first().is_some_and(|v| !matches!(v, Value::Nil)));
                let _ = self.delex.set(known);
            }
            Ok::<_, RedisError>(conn)
        };
        match tokio::time::timeout(self.timeout, connected).await {
            Ok(Ok(conn)) => {
                *self.slot.lock().expect("node slot") = Some(conn.clone());
                *last_failure = None;
                Ok(conn)
            }
            Ok(Err(e)) => {
                let problem = self.describe(&e);
                *last_failure = Some((Instant::now(), problem.clone()));
                Err(self.error(problem))
            }
            Err(_) => {
                let problem = format!("did not accept a connection within {}ms", self.timeout.as_millis());
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
                if e.is_unrecoverable_error() || e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    self.forget();
                }
                self.error(self.describe(&e))
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => {
                self.forget();
                Err(self.error(format!("did not answer within {}ms", self.timeout.as_millis())))
            }
        }
    }

    /// One command.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, NodeError> {
        self.run(|mut c| async move { cmd.query_async(&mut c).await }).await
    }

    /// One script (EVALSHA, loading it on NOSCRIPT).
    pub async fn invoke<T: FromRedisValue>(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<T, NodeError> {
        self.run(|mut c| async move { invocation.invoke_async(&mut c).await }).await
    }
}
