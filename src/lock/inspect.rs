//! The read side and the operator's actions, for the console and `idemguard locks`: every lock
//! with its raw value, decoded holder and PTTL, node by node (RedLock nodes can disagree); a
//! compare-and-delete of the exact value an operator saw; a fence bump.
//!
//! Listing uses SCAN, never KEYS: KEYS blocks a production Redis for as long as it walks the
//! whole keyspace.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use redis::Value;
use serde::Serialize;

use super::batch::FenceLife;
use super::node::{Node, NodeError};
use super::scripts::{self, NodeRelease};
use super::{FenceToken, LockError, Locks, ReleaseReport};
use crate::config::LockMode;
use crate::contracts::{keys, LockHolder};

/// SCAN page size hint.
const SCAN_COUNT: usize = 500;
/// Keys read per GET/PTTL transaction.
const FETCH_CHUNK: usize = 500;

/// Every lock found, node by node.
#[derive(Debug, Clone, Serialize)]
pub struct LockScan {
    pub locks: Vec<LockView>,
    pub nodes: Vec<NodeScan>,
    /// True when more than `limit` keys exist: the list is a prefix of the SCAN order.
    pub truncated: bool,
}

/// How one node answered the scan.
#[derive(Debug, Clone, Serialize)]
pub struct NodeScan {
    pub node: String,
    /// None when it answered; the error (naming host:port) otherwise.
    pub error: Option<String>,
}

/// One lock key as each node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockView {
    pub key: String,
    pub nodes: Vec<NodeLock>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeLock {
    /// host:port.
    pub node: String,
    pub state: NodeLockState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NodeLockState {
    Held {
        /// The raw value, exactly (what `release_if_value` compares).
        value: String,
        /// Decoded when it is an idemguard value.
        holder: Option<LockHolder>,
        /// Remaining TTL in ms; -1 when the key has no TTL (it never expires: flag it).
        pttl_ms: i64,
    },
    /// A key of another type (a Redisson lock is a hash): listed with its type and TTL, never
    /// read as a value nor released.
    Other {
        /// What TYPE answers: `hash`, `list`, `set`, `zset`, `stream`.
        redis_type: String,
        pttl_ms: i64,
    },
    Absent,
    Unreachable {
        error: String,
    },
}

impl LockView {
    /// The holder held on most nodes (by nonce: RedLock nodes carry the same holder with their
    /// own fence numbers). Under RedLock it holds the lock only if [`LockView::agreeing_nodes`]
    /// reaches the quorum.
    pub fn holder(&self) -> Option<&LockHolder> {
        let mut counts: Vec<(&str, usize, &LockHolder)> = Vec::new();
        for h in self.holders() {
            match counts.iter_mut().find(|(n, _, _)| *n == h.nonce) {
                Some(c) => c.1 += 1,
                None => counts.push((&h.nonce, 1, h)),
            }
        }
        // First of the most common, so ties go to the first node.
        let best = counts.iter().map(|c| c.1).max()?;
        counts.into_iter().find(|c| c.1 == best).map(|c| c.2)
    }

    /// Nodes holding the same holder as [`LockView::holder`].
    pub fn agreeing_nodes(&self) -> usize {
        match self.holder() {
            Some(h) => self.holders().filter(|o| o.nonce == h.nonce).count(),
            None => 0,
        }
    }

    /// The holder's fence token: the largest over the nodes that agree on it.
    pub fn fence(&self) -> Option<FenceToken> {
        let h = self.holder()?;
        self.holders()
            .filter(|o| o.nonce == h.nonce)
            .map(|o| FenceToken(o.fence))
            .max()
    }

    /// Smallest remaining TTL over the nodes holding it; -1 when some node holds it without TTL.
    pub fn pttl_ms(&self) -> Option<i64> {
        let ttls: Vec<i64> = self
            .nodes
            .iter()
            .filter_map(|n| match &n.state {
                NodeLockState::Held { pttl_ms, .. } | NodeLockState::Other { pttl_ms, .. } => {
                    Some(*pttl_ms)
                }
                _ => None,
            })
            .collect();
        if ttls.contains(&-1) {
            return Some(-1);
        }
        ttls.into_iter().min()
    }

    /// Distinct raw values, in node order: pass each to `release_if_value` to clear the lock
    /// everywhere the operator saw it.
    pub fn values(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for n in &self.nodes {
            if let NodeLockState::Held { value, .. } = &n.state {
                if !out.contains(&value.as_str()) {
                    out.push(value);
                }
            }
        }
        out
    }

    /// True when no node holds the key (as a lock value or as a key of another type).
    pub fn is_free(&self) -> bool {
        !self.nodes.iter().any(|n| {
            matches!(
                n.state,
                NodeLockState::Held { .. } | NodeLockState::Other { .. }
            )
        })
    }

    /// The type of the key where some node holds it as something else than a string.
    pub fn other_type(&self) -> Option<&str> {
        self.nodes.iter().find_map(|n| match &n.state {
            NodeLockState::Other { redis_type, .. } => Some(redis_type.as_str()),
            _ => None,
        })
    }

    /// The errors of the nodes that could not be read.
    pub fn unreachable(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.state {
                NodeLockState::Unreachable { error } => Some(format!("{}: {error}", n.node)),
                _ => None,
            })
            .collect()
    }

    /// (orderNo, requestId) named by the key.
    pub fn ids(&self) -> (Option<String>, Option<String>) {
        keys::ids_of_lock(&self.key)
    }

    fn holders(&self) -> impl Iterator<Item = &LockHolder> {
        self.nodes.iter().filter_map(|n| match &n.state {
            NodeLockState::Held {
                holder: Some(h), ..
            } => Some(h),
            _ => None,
        })
    }
}

async fn scan_node(
    node: &Node,
    pattern: &str,
    limit: usize,
) -> Result<(Vec<String>, bool), NodeError> {
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    // Bounded: a page per round trip, stopping at `limit` keys.
    loop {
        let (next, page): (u64, Vec<String>) = node
            .query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT),
            )
            .await?;
        found.extend(page);
        if found.len() > limit {
            found.truncate(limit);
            return Ok((found, true));
        }
        if next == 0 {
            return Ok((found, false));
        }
        cursor = next;
    }
}

/// TYPE, GET and PTTL of `keys` on `node`, in MULTI so a key cannot expire between them. The
/// GET of a key of another type fails alone (`ignore_errors`): one such key — a Redisson lock is
/// a hash — must not hide every other lock (issue 15).
async fn fetch_node(node: &Node, keys: &[String]) -> Result<Vec<NodeLockState>, NodeError> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(FETCH_CHUNK) {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        for k in chunk {
            pipe.cmd("TYPE").arg(k).cmd("GET").arg(k).cmd("PTTL").arg(k);
        }
        let values: Vec<Value> = node
            .run(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        out.extend(values.chunks(3).map(node_lock_state));
    }
    Ok(out)
}

/// One key's TYPE, GET and PTTL answers.
fn node_lock_state(answers: &[Value]) -> NodeLockState {
    let (redis_type, value, pttl) = match answers {
        [Value::SimpleString(t), v, Value::Int(p)] if *p != -2 => (t.as_str(), v, *p),
        _ => return NodeLockState::Absent,
    };
    match (redis_type, value) {
        ("string", Value::BulkString(v)) => {
            let value = String::from_utf8_lossy(v).into_owned();
            NodeLockState::Held {
                holder: LockHolder::from_value(&value),
                value,
                pttl_ms: pttl,
            }
        }
        ("string" | "none", _) => NodeLockState::Absent,
        (other, _) => NodeLockState::Other {
            redis_type: other.to_string(),
            pttl_ms: pttl,
        },
    }
}

impl Locks {
    /// Every `lock:*` key on every lock node (up to `limit` keys per node), each with its value,
    /// decoded holder and PTTL per node. A node that is down shows as unreachable; the others
    /// are still listed.
    pub async fn scan_locks(&self, limit: usize) -> LockScan {
        let nodes = &self.inner.nodes;
        let scans = join_all(
            nodes
                .iter()
                .map(|n| scan_node(n, keys::LOCK_PATTERN, limit)),
        )
        .await;
        let mut all: BTreeSet<String> = BTreeSet::new();
        let mut truncated = false;
        let mut node_rows = Vec::new();
        for (n, s) in nodes.iter().zip(&scans) {
            match s {
                Ok((found, more)) => {
                    truncated |= *more;
                    all.extend(found.iter().cloned());
                    node_rows.push(NodeScan {
                        node: n.addr.clone(),
                        error: None,
                    });
                }
                Err(e) => node_rows.push(NodeScan {
                    node: n.addr.clone(),
                    error: Some(e.to_string()),
                }),
            }
        }
        let keys: Vec<String> = all.into_iter().collect();
        let locks = self.fetch(&keys).await;
        LockScan {
            locks,
            nodes: node_rows,
            truncated,
        }
    }

    /// One lock key as every node sees it (the console's trace view of an order).
    pub async fn inspect(&self, key: &str) -> LockView {
        self.fetch(&[key.to_string()])
            .await
            .pop()
            .expect("one view per key")
    }

    async fn fetch(&self, keys: &[String]) -> Vec<LockView> {
        let nodes = &self.inner.nodes;
        let fetched = join_all(nodes.iter().map(|n| fetch_node(n, keys))).await;
        keys.iter()
            .enumerate()
            .map(|(i, key)| LockView {
                key: key.clone(),
                nodes: nodes
                    .iter()
                    .zip(&fetched)
                    .map(|(n, f)| NodeLock {
                        node: n.addr.clone(),
                        state: match f {
                            Ok(states) => states[i].clone(),
                            Err(e) => NodeLockState::Unreachable {
                                error: e.to_string(),
                            },
                        },
                    })
                    .collect(),
            })
            .collect()
    }

    /// Compare-and-delete of the exact value an operator saw, on every node: a node holding
    /// anything else (the holder renewed into a new acquisition, or a new holder took over)
    /// keeps it. Under RedLock the nodes' values differ in their fence numbers: call this once
    /// per value of [`LockView::values`]. Emits `lock_released` / `lock_release_refused`.
    pub async fn release_if_value(
        &self,
        key: &str,
        exact_value: &str,
    ) -> Result<ReleaseReport, LockError> {
        let started = Instant::now();
        let nodes = &self.inner.nodes;
        let (key_arc, value): (Arc<str>, Arc<str>) = (key.into(), exact_value.into());
        let answers = join_all(nodes.iter().map(|n| scripts::release(n, &key_arc, &value))).await;
        let report = ReleaseReport {
            key: key.to_string(),
            nodes: nodes
                .iter()
                .zip(answers)
                .map(|(n, a)| {
                    (
                        n.addr.clone(),
                        a.unwrap_or_else(|e| NodeRelease::Unreachable { error: e }),
                    )
                })
                .collect(),
        };
        let fence = LockHolder::from_value(exact_value).map(|h| h.fence);
        self.conclude_release(report, fence, "operator", started)
    }

    /// Raise the key's fence counter past every token issued so far and return the new token:
    /// after a forced release, a holder that comes back carries a token the database refuses
    /// once anything with the new one was written. Under RedLock a quorum of nodes must answer
    /// (it shares a node with every holder's quorum, so the result is larger than their tokens).
    pub async fn bump_fence(&self, key: &str) -> Result<FenceToken, LockError> {
        let fence_key: Arc<str> = keys::fence(key).into();
        let nodes = &self.inner.nodes;
        let needed = self.quorum();
        // Kept as long as an acquisition's counter: a holder that comes back within its TTL
        // still meets the raised counter.
        let life = FenceLife::now(self.inner.config.ttl + self.inner.config.fence_ttl);
        let counted = join_all(
            nodes
                .iter()
                .map(|n| scripts::bump_fence(n, &fence_key, life)),
        )
        .await;
        let (ok, failures) = split(nodes, counted);
        if ok.len() < needed {
            return Err(self.no_quorum(key, ok.len(), failures));
        }
        let max = ok.iter().map(|(_, v)| *v).max().unwrap_or(0);
        let raised = join_all(
            ok.iter()
                .filter(|(_, v)| *v < max)
                .map(|(n, _)| scripts::raise_fence(n, &fence_key, max, life.keep_ms)),
        )
        .await;
        let settled = ok.iter().filter(|(_, v)| *v == max).count()
            + raised.iter().filter(|r| r.is_ok()).count();
        if settled < needed {
            return Err(self.no_quorum(
                key,
                settled,
                raised.into_iter().filter_map(Result::err).collect(),
            ));
        }
        Ok(FenceToken(max))
    }

    /// The key's fence counter (largest over the nodes that answered); None when never taken.
    pub async fn current_fence(&self, key: &str) -> Result<Option<FenceToken>, LockError> {
        let fence_key = keys::fence(key);
        let nodes = &self.inner.nodes;
        let mut get = redis::cmd("GET");
        get.arg(&fence_key);
        let read = join_all(nodes.iter().map(|n| n.query::<Option<i64>>(&get))).await;
        let mut answered = false;
        let mut max = None;
        let mut failures = Vec::new();
        for r in read {
            match r {
                Ok(v) => {
                    answered = true;
                    max = max.max(v);
                }
                Err(e) => failures.push(e),
            }
        }
        if !answered {
            return Err(self.no_quorum(key, 0, failures));
        }
        Ok(max.map(FenceToken))
    }

    fn no_quorum(&self, key: &str, granted: usize, failures: Vec<NodeError>) -> LockError {
        if self.inner.mode == LockMode::Single && failures.len() == 1 {
            return LockError::Node(failures.into_iter().next().expect("one failure"));
        }
        LockError::NoQuorum {
            key: key.to_string(),
            granted,
            quorum: self.quorum(),
            nodes: self.inner.nodes.len(),
            failures,
        }
    }
}

fn split<T>(
    nodes: &[Arc<Node>],
    answers: Vec<Result<T, NodeError>>,
) -> (Vec<(&Arc<Node>, T)>, Vec<NodeError>) {
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    for (n, a) in nodes.iter().zip(answers) {
        match a {
            Ok(v) => ok.push((n, v)),
            Err(e) => failures.push(e),
        }
    }
    (ok, failures)
}
