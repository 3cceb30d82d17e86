//! One Redis node: a lazily opened, shared (multiplexed) connection ([`Conn`]), every command
//! bounded by `redis.command_timeout`, and errors that name the node's host:port; lock operations
//! go through the node's batch queue ([`batch`]).
//!
//! A node that is down must never stall the others (RedLock asks all nodes at once) nor the
//! process start (the console must open with a node down), so connecting happens on first use,
//! and after a failed connect the node answers "down" at once for a short pause instead of
//! making every caller wait for its own connect timeout.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use super::conn::RedisConn;
use redis::{FromRedisValue, RedisError, Value};
use tokio::sync::mpsc;

use super::batch::{self, Pending};
pub use super::conn::NodeError;
use super::conn::{Conn, RedisAccess};

/// One Redis node as the lock layer uses it: its connection, and the queue through which lock
/// operations are coalesced ([`batch`]).
pub(crate) struct Node {
    pub addr: String,
    pub(crate) conn: Arc<Conn>,
    /// The queue of the node's batch driver, started on first use (on the caller's runtime, and
    /// again if that runtime has gone away).
    ops: Mutex<Option<mpsc::Sender<Pending>>>,
    /// A master of a Redis Cluster reached directly (the inspection's SCAN): its keys live in
    /// many slots, so it is never read in one MULTI.
    pub(crate) cluster_master: bool,
    /// On a cluster connection: a direct connection to each master, by host:port, opened on
    /// first use ([`super::cluster`]).
    pub(crate) masters: Mutex<HashMap<String, Arc<Node>>>,
}

impl Node {
    pub fn open(url: &str, access: &RedisAccess) -> Result<Node, NodeError> {
        let conn = Conn::open(url, access)?;
        Ok(Node {
            addr: conn.addr.clone(),
            conn: Arc::new(conn),
            ops: Mutex::new(None),
            cluster_master: false,
            masters: Mutex::new(HashMap::new()),
        })
    }

    /// True when this is a cluster connection (see [`Conn::is_cluster`]).
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// One command.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, NodeError> {
        self.conn
            .run(|mut c| async move { cmd.query_async(&mut c).await })
            .await
    }

    /// Anything on the connection, bounded by the command timeout.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T, NodeError>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        self.conn.run(f).await
    }

    /// Queue one lock operation; it runs in the node's next batch. Waits at most the command
    /// timeout for the answer.
    pub async fn submit(&self, op: batch::Op) -> Result<Value, NodeError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let mut pending = Pending { op, reply };
        for _ in 0..2 {
            let queue = {
                let mut ops = self.ops.lock().expect("node queue");
                ops.get_or_insert_with(|| batch::start(self.conn.clone()))
                    .clone()
            };
            match queue.try_send(pending) {
                Ok(()) => break,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(self.conn.error(format!(
                        "has {} lock operations queued already",
                        batch::QUEUE
                    )));
                }
                Err(mpsc::error::TrySendError::Closed(p)) => {
                    // The runtime that ran the driver is gone: start a new one here.
                    *self.ops.lock().expect("node queue") = None;
                    pending = p;
                }
            }
        }
        match tokio::time::timeout(self.conn.timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.conn.error("lost its batch driver")),
            Err(_) => Err(self.conn.timed_out().await),
        }
    }
}
