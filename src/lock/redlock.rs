//! RedLock over N independent Redis nodes (`lock.mode = "redlock"`, `redis.redlock_nodes`):
//! the lock is held when a quorum of N/2+1 nodes took it within its validity. Every request
//! goes to all nodes at once, each bounded by `redis.command_timeout`, so one slow or dead node
//! costs at most one timeout, never N of them.
//!
//! Fence tokens. Each node keeps its own `fence:{key}` counter and the acquire script takes a
//! token from it, so the counters of different nodes drift apart (a node that granted an
//! attempt which failed to reach quorum counted one more). The holder's token is the maximum
//! over its quorum, and before the lock counts as taken every node of the quorum whose counter
//! is lower is raised to that maximum (`raise_fence` in `lock.lua`). Why tokens then strictly increase
//! across holders that reached quorum: let A hold with quorum Qa and token Fa, and B take the
//! lock after A (A released it or its keys expired). Qa and Qb are majorities, so they share a
//! node n. On n, A's key was set and the counter raised to ≥ Fa while A's key was still there
//! (the raise completes within A's validity); B's SET on n succeeds only once A's key is gone,
//! so B's INCR on n runs after the raise and yields > Fa; B's token is the maximum over Qb,
//! hence ≥ that. The same assumptions as RedLock itself apply: bounded clock drift, and a node
//! that restarts must not forget its keys (persistence, or staying down for one TTL). A counter
//! that expired (`lock.fence_ttl` after the last lock on its key) restarts from the acquirer's
//! clock in microseconds, above Fa as long as clocks differ by less than that lifetime.

use std::sync::Arc;

use futures::future::join_all;

use super::batch::FenceLife;
use super::node::{Node, NodeError};
use super::scripts::{self, NodeAcquire, NodeRelease, ValueParts};
use super::{Attempt, LockError, NodeHold, Renewal};

pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// One RedLock round (seed §3.3): ask every node at once, count a quorum within validity, and
/// on failure take back what was taken. Long because the three share the per-node answers and
/// the one fence seed; split, each part would need all of them passed in.
pub(crate) async fn attempt(
    nodes: &[Arc<Node>],
    key: &Arc<str>,
    fence_key: &Arc<str>,
    parts: &ValueParts,
    ttl_ms: u64,
    fence: FenceLife,
) -> Result<Attempt, LockError> {
    let needed = quorum(nodes.len());
    // One seed for every node: nodes that start a counter for this acquisition agree on its token.
    let answers = join_all(
        nodes
            .iter()
            .map(|n| scripts::acquire(n, key, fence_key, parts, ttl_ms, fence)),
    )
    .await;
    let mut holds = Vec::with_capacity(nodes.len());
    let mut fences: Vec<(usize, i64)> = Vec::new();
    // Nodes usually agree on the fence: one value string for all of them.
    let mut values: Vec<(i64, Arc<str>)> = Vec::new();
    let mut held: Option<(String, i64)> = None;
    let mut failures: Vec<NodeError> = Vec::new();
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(NodeAcquire::Granted { fence }) => {
                fences.push((i, fence));
                let value = match values.iter().find(|(f, _)| *f == fence) {
                    Some((_, v)) => v.clone(),
                    None => {
                        let v: Arc<str> = parts.value(fence).into();
                        values.push((fence, v.clone()));
                        v
                    }
                };
                holds.push(NodeHold::Known(value));
            }
            Ok(NodeAcquire::Held { current, pttl_ms }) => {
                held.get_or_insert((current, pttl_ms));
                holds.push(NodeHold::None);
            }
            Err(e) => {
                // It may have taken our SET and only the reply was lost: released by holder.
                failures.push(e);
                holds.push(NodeHold::Unknown);
            }
        }
    }

    if fences.len() >= needed {
        let max = fences.iter().map(|(_, f)| *f).max().unwrap_or(0);
        let lower: Vec<usize> = fences
            .iter()
            .filter(|(_, f)| *f < max)
            .map(|(i, _)| *i)
            .collect();
        let mut settled = fences.len() - lower.len();
        let mut raise_failures = Vec::new();
        if !lower.is_empty() {
            let raised =
                join_all(lower.iter().map(|&i| {
                    scripts::raise_fence(&nodes[i], fence_key, max, ttl_ms + fence.keep_ms)
                }))
                .await;
            for r in raised {
                match r {
                    Ok(_) => settled += 1,
                    Err(e) => raise_failures.push(e),
                }
            }
        }
        if settled >= needed {
            return Ok(Attempt::Granted { holds, fence: max });
        }
        release(nodes, key, &holds, parts).await;
        return Err(LockError::NoQuorum {
            key: key.to_string(),
            granted: settled,
            quorum: needed,
            nodes: nodes.len(),
            failures: raise_failures,
        });
    }

    // No quorum: take back whatever we got, on every node that may hold our value.
    release(nodes, key, &holds, parts).await;
    if failures.len() > nodes.len() - needed {
        return Err(LockError::NoQuorum {
            key: key.to_string(),
            granted: fences.len(),
            quorum: needed,
            nodes: nodes.len(),
            failures,
        });
    }
    let (current, pttl_ms) = held.map_or((None, None), |(c, p)| (Some(c), Some(p)));
    Ok(Attempt::Contended { current, pttl_ms })
}

pub(crate) async fn renew(
    nodes: &[Arc<Node>],
    key: &Arc<str>,
    holds: &[NodeHold],
    ttl_ms: u64,
    fence: FenceLife,
) -> Renewal {
    let needed = quorum(nodes.len());
    let answers = join_all(nodes.iter().zip(holds).map(|(n, c)| async move {
        match c {
            NodeHold::Known(value) => Some(scripts::renew(n, key, value, ttl_ms, fence).await),
            _ => None,
        }
    }))
    .await;
    let (mut renewed, mut not_held) = (0, 0);
    let mut failures = Vec::new();
    for a in answers.into_iter().flatten() {
        match a {
            Ok(true) => renewed += 1,
            Ok(false) => not_held += 1,
            Err(e) => failures.push(e),
        }
    }
    if renewed >= needed {
        Renewal::Renewed
    } else if failures.is_empty() || not_held > nodes.len() - needed {
        Renewal::NotHeld
    } else {
        Renewal::Failed(LockError::NoQuorum {
            key: key.to_string(),
            granted: renewed,
            quorum: needed,
            nodes: nodes.len(),
            failures,
        })
    }
}

/// Compare-and-delete on every node that may hold our value: the exact value where the node
/// told us its fence, by holder where it did not answer.
pub(crate) async fn release(
    nodes: &[Arc<Node>],
    key: &Arc<str>,
    holds: &[NodeHold],
    parts: &ValueParts,
) -> Vec<(String, NodeRelease)> {
    let answers = join_all(nodes.iter().zip(holds).map(|(n, c)| async move {
        let outcome = match c {
            NodeHold::Known(value) => scripts::release(n, key, value).await,
            NodeHold::Unknown => scripts::release_by_holder(n, key, parts).await,
            NodeHold::None => return None,
        };
        Some((
            n.addr.clone(),
            outcome.unwrap_or_else(|e| NodeRelease::Unreachable { error: e }),
        ))
    }))
    .await;
    answers.into_iter().flatten().collect()
}
