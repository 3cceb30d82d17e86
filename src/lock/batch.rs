//! Coalescing: the lock operations that many callers send to one node at the same moment go to
//! the server as one call of `queries/redis/lock.lua`, which runs them in order, atomically.
//!
//! Why: on a sale night thousands of requests take and release locks at once. One script call
//! per lock costs the server a command dispatch and a script setup each, and the client a
//! request, a reply and system calls each; coalesced, a batch of N costs that once. A caller
//! never waits for a batch to fill: the node's driver sends whatever is queued as soon as the
//! previous call on that node has answered, so an idle node answers one operation at once and
//! a busy one answers many per round trip.
//!
//! Ordering: one driver per node sends its batches one after another, so operations on a node
//! run in the order they were queued — a release queued after an acquire (even one whose caller
//! gave up waiting) runs after it. An acquisition or renewal whose caller is gone is dropped
//! before it is sent; a release always runs.
//!
//! On a Redis Cluster one script may only touch keys of one slot: a batch is split into one
//! call per slot (an operation's keys share its lock key's slot: `keys::fence`), sent at once;
//! the order of the operations on one key is kept, as they share a slot.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use futures::future::join_all;
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};

use super::conn::{Conn, NodeError};
use super::keyslot::keyslot;

static LOCK_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../queries/redis/lock.lua")));

/// Operations queued per node before new ones are refused (a node that hangs cannot make the
/// process queue without bound).
pub(crate) const QUEUE: usize = 8192;
/// Operations per script call: bounds how long one call holds the server.
const MAX_BATCH: usize = 128;

/// One lock operation (see `queries/redis/lock.lua` for each one's rule).
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Acquire {
        key: Arc<str>,
        fence_key: Arc<str>,
        head: Arc<str>,
        tail: Arc<str>,
        ttl_ms: u64,
        fence: FenceLife,
    },
    Release {
        key: Arc<str>,
        value: Arc<str>,
    },
    ReleaseByHolder {
        key: Arc<str>,
        head: Arc<str>,
        tail: Arc<str>,
    },
    Renew {
        key: Arc<str>,
        fence_key: Arc<str>,
        value: Arc<str>,
        ttl_ms: u64,
        fence: FenceLife,
    },
    RaiseFence {
        fence_key: Arc<str>,
        at_least: i64,
        keep_ms: u64,
    },
    BumpFence {
        fence_key: Arc<str>,
        fence: FenceLife,
    },
}

/// How a fence counter is (re)started and kept (see `next_fence` in `lock.lua`): `seed` is the
/// caller's clock in microseconds, the start of a counter that has expired; `keep_ms` is how
/// long the counter outlives the lock (`lock.fence_ttl`); `fresh`, the hint that the lock key
/// is new (its counter most likely gone), only picks the order of the script's commands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FenceLife {
    pub seed: i64,
    pub keep_ms: u64,
    pub fresh: bool,
}

impl FenceLife {
    pub fn now(keep: std::time::Duration) -> FenceLife {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        FenceLife {
            seed: since_epoch.as_micros() as i64,
            keep_ms: keep.as_millis().max(1) as u64,
            fresh: false,
        }
    }

    /// The same for a lock key that is new (see [`AcquireOptions::fresh_key`]).
    ///
    /// [`AcquireOptions::fresh_key`]: super::AcquireOptions::fresh_key
    pub fn fresh(self, fresh: bool) -> FenceLife {
        FenceLife { fresh, ..self }
    }
}

impl Op {
    /// The key whose slot the operation runs in (its other key shares it).
    fn slot_key(&self) -> &str {
        match self {
            Op::Acquire { key, .. }
            | Op::Release { key, .. }
            | Op::ReleaseByHolder { key, .. }
            | Op::Renew { key, .. } => key,
            Op::RaiseFence { fence_key, .. } | Op::BumpFence { fence_key, .. } => fence_key,
        }
    }

    /// Operations that are pointless once nobody waits for their answer.
    fn droppable(&self) -> bool {
        matches!(self, Op::Acquire { .. } | Op::Renew { .. })
    }

    fn encode(&self, inv: &mut redis::ScriptInvocation<'_>, delex: bool) {
        match self {
            Op::Acquire {
                key,
                fence_key,
                head,
                tail,
                ttl_ms,
                fence,
            } => {
                inv.key(&**key)
                    .key(&**fence_key)
                    .arg("acquire")
                    .arg(&**head)
                    .arg(&**tail)
                    .arg(*ttl_ms)
                    .arg(fence.seed)
                    .arg(fence.keep_ms)
                    .arg(if fence.fresh { "1" } else { "0" });
            }
            Op::Release { key, value } => {
                inv.key(&**key)
                    .arg(if delex { "release_delex" } else { "release" })
                    .arg(&**value);
            }
            Op::ReleaseByHolder { key, head, tail } => {
                inv.key(&**key)
                    .arg("release_by_holder")
                    .arg(&**head)
                    .arg(&**tail);
            }
            Op::Renew {
                key,
                fence_key,
                value,
                ttl_ms,
                fence,
            } => {
                inv.key(&**key)
                    .key(&**fence_key)
                    .arg("renew")
                    .arg(&**value)
                    .arg(*ttl_ms)
                    .arg(fence.keep_ms);
            }
            Op::RaiseFence {
                fence_key,
                at_least,
                keep_ms,
            } => {
                inv.key(&**fence_key)
                    .arg("raise_fence")
                    .arg(*at_least)
                    .arg(*keep_ms);
            }
            Op::BumpFence { fence_key, fence } => {
                inv.key(&**fence_key)
                    .arg("bump_fence")
                    .arg(fence.seed)
                    .arg(fence.keep_ms);
            }
        }
    }
}

pub(crate) struct Pending {
    pub op: Op,
    pub reply: oneshot::Sender<Result<Value, NodeError>>,
}

/// Start the driver of one node; it ends when the node (the queue's sender) is dropped.
pub(crate) fn start(conn: Arc<Conn>) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(drive(conn, rx));
    tx
}

async fn drive(conn: Arc<Conn>, mut queue: mpsc::Receiver<Pending>) {
    let mut batch: Vec<Pending> = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        batch.retain(|p| !(p.op.droppable() && p.reply.is_closed()));
        if batch.is_empty() {
            continue;
        }
        let replies = run(&conn, &batch).await;
        for (p, r) in batch.drain(..).zip(replies) {
            let _ = p.reply.send(r);
        }
    }
}

/// One script call for the whole batch (on a cluster, one per slot: a master that fails
/// fails only its own slots' operations); one reply per operation.
async fn run(conn: &Conn, batch: &[Pending]) -> Vec<Result<Value, NodeError>> {
    if !conn.is_cluster() {
        let ops: Vec<&Op> = batch.iter().map(|p| &p.op).collect();
        return match run_ops(conn, &ops).await {
            Ok(replies) => replies.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e); batch.len()],
        };
    }
    let mut slots: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, p) in batch.iter().enumerate() {
        slots.entry(keyslot(p.op.slot_key())).or_default().push(i);
    }
    let calls = slots.values().map(|at| {
        let ops: Vec<&Op> = at.iter().map(|i| &batch[*i].op).collect();
        async move { run_ops(conn, &ops).await }
    });
    let answers = join_all(calls).await;
    let mut replies = vec![Ok(Value::Nil); batch.len()];
    for (at, answer) in slots.values().zip(answers) {
        match answer {
            Ok(values) => at.iter().zip(values).for_each(|(i, v)| replies[*i] = Ok(v)),
            Err(e) => at.iter().for_each(|i| replies[*i] = Err(e.clone())),
        }
    }
    replies
}

/// One script call running `ops` in order.
async fn run_ops(conn: &Conn, ops: &[&Op]) -> Result<Vec<Value>, NodeError> {
    let delex = conn.has_delex();
    let mut inv = LOCK_SCRIPT.prepare_invoke();
    for op in ops {
        op.encode(&mut inv, delex);
    }
    let inv = &inv;
    let reply: Value = conn
        .run(|mut c| async move { inv.invoke_async(&mut c).await })
        .await?;
    match reply {
        Value::Array(items) if items.len() == ops.len() => Ok(items),
        other => Err(conn.refused(format!(
            "answered lock.lua with {} replies for {} operations: {other:?}",
            count(&other),
            ops.len()
        ))),
    }
}

fn count(v: &Value) -> usize {
    match v {
        Value::Array(items) => items.len(),
        _ => 1,
    }
}
