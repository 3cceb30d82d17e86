//! What an operator does to a lock someone else holds — never the holder's own release (that
//! is [`LockGuard::release`](super::LockGuard::release)): a compare-and-delete of the exact
//! value the operator saw, a Redisson lock's release of the exact field and count, and the
//! fence bump that makes a holder who comes back refused by the database. Each runs on every
//! node and reports node by node; what it compares with is [`Locks::inspect`]'s view.

use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;

use super::batch::FenceLife;
use super::formats::redisson_release;
use super::inspect::master_of;
use super::node::{Node, NodeError};
use super::scripts::{self, NodeRelease};
use super::{FenceToken, LockError, Locks, ReleaseReport};
use crate::config::LockMode;
use crate::contracts::{keys, LockHolder};

impl Locks {
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
        let mut report = ReleaseReport {
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
        if nodes[0].is_cluster() {
            // The cluster client ran it on the key's master: name that master.
            report.nodes[0].0 = master_of(&nodes[0], key).await;
        }
        let fence = LockHolder::from_value(exact_value).map(|h| h.fence);
        self.conclude_release(report, fence, "operator", started)
    }

    /// Release a Redisson lock on every lock node where its hash still holds exactly `field` =
    /// `count` and nothing else, publishing Redisson's unlock message so waiters wake. Emits
    /// `lock_released` / `lock_release_refused` like [`Locks::release_if_value`].
    pub async fn release_redisson(
        &self,
        key: &str,
        field: &str,
        count: i64,
    ) -> Result<ReleaseReport, LockError> {
        let started = Instant::now();
        let nodes = &self.inner.nodes;
        let answers = join_all(nodes.iter().map(|n| redisson_release(n, key, field, count))).await;
        let report = ReleaseReport {
            key: key.to_string(),
            nodes: nodes
                .iter()
                .zip(answers)
                .map(|(n, a)| {
                    let r = a.unwrap_or_else(|e| NodeRelease::Unreachable { error: e });
                    (n.addr.clone(), r)
                })
                .collect(),
        };
        self.conclude_release(report, None, "operator", started)
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
