//! The one model of a lock, for every reader: [`LockView`] — a key with its raw value, decoded
//! holder, PTTL and fence counter, node by node (RedLock nodes can disagree) — is what
//! `idemguard locks` lists, what the console's Locks view and confirmation popup show, what an
//! operator's release compares (`lock/operator.rs`) and what the audit records before and after;
//! here with its flags, its quorum and its JSON. Reading the nodes into views is `scan.rs`; a
//! Redis Cluster's masters, `cluster.rs`.
//!
//! Listing uses SCAN, never KEYS: KEYS blocks a production Redis for as long as it walks the
//! whole keyspace.

mod cluster;
mod scan;

pub(super) use cluster::master_of;
pub use scan::{InspectedKeys, LockInspector};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis::Value;
use serde::{Serialize, Serializer};

use super::formats::{self, Decoder, LockFormat};
use super::held::LockHeld;
use super::liveness::Liveness;
use super::node::{Node, NodeError};
use super::{redlock, FenceToken, LockError, Locks, SCAN_COUNT};
use crate::config::{Config, LockMode};
use crate::contracts::{keys, now_ms, LockHolder};

/// Keys read per TYPE/GET/PTTL transaction; a reader pauses a moment between two, so a scan is
/// never a burst other clients queue behind.
const FETCH_CHUNK: usize = 500;

/// Every lock found, node by node (`idemguard locks --json`: its `data`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LockScan {
    pub locks: Vec<LockView>,
    pub nodes: Vec<NodeScan>,
    /// Instances with a heartbeat (`instance:*` on the main Redis); `None` when it was not asked
    /// or did not answer.
    pub live_instances: Option<BTreeSet<String>>,
    pub scan_ms: f64,
    pub read_at_ms: i64,
    /// True when some node has more keys than the scan's limit: the list is a prefix of the
    /// SCAN order.
    pub truncated: bool,
}

impl LockScan {
    /// A scan that could not start: one node row saying why.
    pub fn failed(node: String, role: &'static str, error: String) -> LockScan {
        LockScan {
            nodes: vec![NodeScan {
                node,
                role,
                ok: false,
                error: Some(error),
                keys: 0,
                scan_ms: 0.0,
            }],
            read_at_ms: now_ms(),
            ..LockScan::default()
        }
    }

    pub fn all_nodes_ok(&self) -> bool {
        self.nodes.iter().all(|n| n.ok)
    }

    pub fn first_error(&self) -> Option<String> {
        self.nodes.iter().find_map(|n| n.error.clone())
    }
}

/// One node's answer for one key: its state, its fence counter, the commands it refused.
type NodeAnswer = (NodeLock, Option<i64>, Vec<String>);
/// The same before it is named by its node.
type KeyAnswer = (NodeLockState, Option<i64>, Vec<String>);

/// How one node answered the scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeScan {
    /// host:port.
    pub node: String,
    /// `main` (the main Redis: single-mode locks) or `redlock`.
    pub role: &'static str,
    pub ok: bool,
    /// The error (naming host:port) when it did not answer.
    pub error: Option<String>,
    pub keys: usize,
    pub scan_ms: f64,
}

/// What is wrong with a lock, at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LockFlag {
    /// The key never expires: a crashed holder keeps it forever.
    NoTtl,
    /// `instance:{holder}` has no heartbeat: the holder is gone and the lock is stale.
    DeadOwner,
    /// The value is not a [`LockHolder`]: some other tool wrote it.
    Undecodable,
    /// RedLock nodes disagree and no holder has a majority.
    NoQuorum,
    /// The key is not a string (a Redisson lock is a hash): another tool's lock, listed with its
    /// type and TTL, never read as a value.
    OtherType,
    /// The same value held longer than `console.lock_held_warning`: renewed for ever, it looks
    /// healthy while it blocks every other copy (`lock/held.rs`).
    HeldLong,
    /// A Redisson fair lock's queue or timeout key (`redisson_lock_queue:{…}`,
    /// `redisson_lock_timeout:{…}`) left without a TTL by a client that died waiting.
    FairLockLeftover,
}

impl LockFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            LockFlag::NoTtl => "no_ttl",
            LockFlag::DeadOwner => "dead_owner",
            LockFlag::Undecodable => "undecodable",
            LockFlag::NoQuorum => "no_quorum",
            LockFlag::OtherType => "other_type",
            LockFlag::HeldLong => "held_long",
            LockFlag::FairLockLeftover => "fair_lock_leftover",
        }
    }
}

/// RedLock agreement over the nodes: how many hold the same holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Quorum {
    pub agreeing: usize,
    pub nodes: usize,
    /// `agreeing >= nodes / 2 + 1`.
    pub reached: bool,
}

/// One lock key as each node of one lock mode sees it, when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockView {
    pub key: String,
    /// Whose nodes were read: the main Redis (`single`) or the RedLock nodes (`redlock`).
    pub scope: LockMode,
    pub nodes: Vec<NodeLock>,
    /// `fence:{key}`: the largest counter over the nodes that answered; None when never taken.
    pub fence_counter: Option<i64>,
    /// When it was read (epoch ms), so a view can count the PTTL down.
    pub read_at_ms: i64,
    /// The holder's heartbeat; None when not asked, not known, or the value names no holder.
    pub owner_alive: Option<bool>,
    /// Sorted; [`LockFlag::DeadOwner`] once the owner was judged ([`LockView::judge_owner`]).
    pub flags: Vec<LockFlag>,
    /// How the first decoder that recognised it reads it (`formats.rs`).
    pub format: LockFormat,
    /// Commands the Redis user may not run on it (NOPERM), named: a read-only ACL user without
    /// HGETALL still lists the key, and says why it cannot decode it.
    pub denied: Vec<String>,
    /// On a Redis Cluster: the key's slot (its node is the master serving it).
    pub slot: Option<u16>,
    /// How long the value shown has been held; None until judged (`lock/held.rs`).
    pub held: Option<LockHeld>,
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
        /// A hash's fields and values (HGETALL): a Redisson lock's `<clientId>:<threadId>` =
        /// count. Empty for other types.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        fields: Vec<(String, String)>,
    },
    Absent,
    Unreachable {
        error: String,
    },
}

impl LockView {
    /// The view of `key` from what each node answered (state and fence counter).
    fn read(key: String, scope: LockMode, answers: Vec<NodeAnswer>, at: i64) -> Self {
        let fence_counter = answers.iter().filter_map(|(_, f, _)| *f).max();
        let mut denied: Vec<String> = Vec::new();
        for (_, _, d) in &answers {
            for c in d {
                if !denied.contains(c) {
                    denied.push(c.clone());
                }
            }
        }
        let nodes = answers.into_iter().map(|(n, _, _)| n).collect();
        let mut view = LockView::new(key, scope, nodes, fence_counter, at);
        view.denied = denied;
        view
    }

    /// A view of what the nodes hold, its flags derived (the owner not judged yet).
    pub fn new(
        key: String,
        scope: LockMode,
        nodes: Vec<NodeLock>,
        fence_counter: Option<i64>,
        read_at_ms: i64,
    ) -> LockView {
        let mut view = LockView {
            key,
            scope,
            nodes,
            fence_counter,
            read_at_ms,
            owner_alive: None,
            flags: Vec::new(),
            format: LockFormat::Unknown,
            denied: Vec::new(),
            slot: None,
            held: None,
        };
        view.decode_with(&Decoder::ALL);
        view
    }

    /// Decode with the decoders of `order` (`foreign_locks.decoders`), and derive the flags.
    pub fn decode_with(&mut self, order: &[Decoder]) {
        let seen = self.nodes.iter().find_map(|n| match &n.state {
            NodeLockState::Held { value, .. } => Some(("string", Some(value.as_str()), &[][..])),
            NodeLockState::Other {
                redis_type, fields, ..
            } => Some((redis_type.as_str(), None, fields.as_slice())),
            _ => None,
        });
        self.format = match seen {
            Some((t, v, f)) => formats::decode(t, v, f, order),
            None => LockFormat::Unknown,
        };
        let judged: Vec<LockFlag> = self
            .flags
            .iter()
            .copied()
            .filter(|f| matches!(f, LockFlag::DeadOwner | LockFlag::HeldLong))
            .collect();
        self.flags = self.flags_seen();
        self.flags.extend(judged);
        self.flags.sort();
    }

    /// One node holding `value` with `pttl_ms` (single mode: the main Redis).
    pub fn held_on(node: &str, value: String, pttl_ms: i64) -> NodeLock {
        NodeLock {
            node: node.to_string(),
            state: NodeLockState::Held {
                holder: LockHolder::from_value(&value),
                value,
                pttl_ms,
            },
        }
    }

    /// The flags the nodes' answers show by themselves (the owner's heartbeat aside).
    fn flags_seen(&self) -> Vec<LockFlag> {
        let mut flags = Vec::new();
        if self.pttl_ms() == Some(-1) {
            flags.push(LockFlag::NoTtl);
        }
        if self.other_type().is_some() {
            flags.push(LockFlag::OtherType);
        } else if !self.values().is_empty() && self.format == LockFormat::Unknown {
            flags.push(LockFlag::Undecodable);
        }
        if self.quorum().is_some_and(|q| !q.reached) {
            flags.push(LockFlag::NoQuorum);
        }
        if self.pttl_ms() == Some(-1) && is_fair_lock_leftover(&self.key) {
            flags.push(LockFlag::FairLockLeftover);
        }
        flags.sort();
        flags
    }

    /// Judge the holder against the instances with a heartbeat (None: they could not be read).
    pub fn judge_owner(&mut self, live: Option<&BTreeSet<String>>) {
        self.owner_alive = match (self.holder(), live) {
            (Some(h), Some(live)) => Some(live.contains(&h.instance)),
            _ => None,
        };
        self.flags.retain(|f| *f != LockFlag::DeadOwner);
        if self.owner_alive == Some(false) {
            self.flags.push(LockFlag::DeadOwner);
            self.flags.sort();
        }
    }

    /// The holder held on most nodes (by instance and nonce — one acquisition: RedLock nodes
    /// carry the same holder with their own fence numbers). Under RedLock it holds the lock only
    /// if [`LockView::agreeing_nodes`] reaches the quorum.
    pub fn holder(&self) -> Option<&LockHolder> {
        let mut counts: Vec<(usize, &LockHolder)> = Vec::new();
        for h in self.holders() {
            match counts.iter_mut().find(|(_, o)| same_acquisition(o, h)) {
                Some(c) => c.0 += 1,
                None => counts.push((1, h)),
            }
        }
        // First of the most common, so ties go to the first node.
        let best = counts.iter().map(|c| c.0).max()?;
        counts.into_iter().find(|c| c.0 == best).map(|c| c.1)
    }

    /// Nodes holding the same holder as [`LockView::holder`].
    pub fn agreeing_nodes(&self) -> usize {
        match self.holder() {
            Some(h) => self.holders().filter(|o| same_acquisition(o, h)).count(),
            None => 0,
        }
    }

    /// RedLock only: how many nodes agree on the holder, and whether that is a majority.
    pub fn quorum(&self) -> Option<Quorum> {
        if self.scope != LockMode::Redlock || self.is_free() {
            return None;
        }
        // Without an idemguard holder (a foreign value, a Redisson hash), nodes agree when they
        // hold the same thing: the same raw value, or a key of the same type.
        let agreeing = match self.holder() {
            Some(_) => self.agreeing_nodes(),
            None => self.most_common_raw(),
        };
        Some(Quorum {
            agreeing,
            nodes: self.nodes.len(),
            reached: agreeing >= redlock::quorum(self.nodes.len()),
        })
    }

    /// The holder's fence token: the largest over the nodes that agree on it.
    pub fn fence(&self) -> Option<FenceToken> {
        let h = self.holder()?;
        self.holders()
            .filter(|o| same_acquisition(o, h))
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

    /// The PTTL counted down from when it was read (never below 0; -1 stays -1, -2: not held).
    pub fn pttl_now(&self, now_ms: i64) -> i64 {
        match self.pttl_ms() {
            None => -2,
            Some(p) if p < 0 => p,
            Some(p) => (p - (now_ms - self.read_at_ms)).max(0),
        }
    }

    /// The value the view shows: the holder's (on the first node agreeing on it), else the first
    /// value held; "" when none is.
    pub fn value(&self) -> &str {
        let shown = self.holder();
        let held = || {
            self.nodes.iter().filter_map(|n| match &n.state {
                NodeLockState::Held { value, holder, .. } => Some((value, holder)),
                _ => None,
            })
        };
        held()
            .find(|(_, h)| match (h, shown) {
                (Some(h), Some(s)) => same_acquisition(h, s),
                (None, None) => true,
                _ => false,
            })
            .or_else(|| held().next())
            .map_or("", |(v, _)| v.as_str())
    }

    /// Distinct raw values, in node order: pass each to `release_if_value` to clear the lock
    /// everywhere the operator saw it. A Redisson lock's is `<field>=<count>`, what its release
    /// script compares.
    pub fn values(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        if let LockFormat::Redisson { seen, .. } = &self.format {
            out.push(seen);
        }
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
                NodeLockState::Unreachable { error } => Some(
                    crate::lock::NodeError {
                        node: n.node.clone(),
                        problem: error.clone(),
                        unreachable: true,
                    }
                    .to_string(),
                ),
                _ => None,
            })
            .collect()
    }

    /// (orderNo, requestId) named by the key.
    pub fn ids(&self) -> (Option<String>, Option<String>) {
        keys::ids_of_lock(&self.key)
    }

    /// How many nodes hold the most common raw value (or key type).
    fn most_common_raw(&self) -> usize {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for n in &self.nodes {
            let seen = match &n.state {
                NodeLockState::Held { value, .. } => value.as_str(),
                NodeLockState::Other { redis_type, .. } => redis_type.as_str(),
                _ => continue,
            };
            match counts.iter_mut().find(|(v, _)| *v == seen) {
                Some(c) => c.1 += 1,
                None => counts.push((seen, 1)),
            }
        }
        counts.into_iter().map(|c| c.1).max().unwrap_or(0)
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

/// The JSON form of a [`LockView`]: a row of `idemguard locks --json` and the `before`/`after`
/// of an audited release (documented in `console/mod.rs`).
#[derive(Serialize)]
struct LockViewJson<'a> {
    key: &'a str,
    scope: LockMode,
    #[serde(rename = "type")]
    redis_type: &'a str,
    value: &'a str,
    holder: Option<&'a LockHolder>,
    pttl_ms: i64,
    read_at_ms: i64,
    owner_alive: Option<bool>,
    fence_counter: Option<i64>,
    flags: &'a [LockFlag],
    /// How long the value has been held, and from what (`acquired_at` or first seen).
    held: Option<LockHeld>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nodes: Vec<NodeHoldingJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum: Option<Quorum>,
    format: &'a LockFormat,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    denied: &'a [String],
    /// On a Redis Cluster: the master holding the key, and its slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slot: Option<u16>,
}

/// What one node holds under the key (RedLock, or a node that could not be read).
#[derive(Serialize)]
struct NodeHoldingJson<'a> {
    node: &'a str,
    /// None when this node does not have the key (or could not be read).
    value: Option<&'a str>,
    /// -1 = no TTL; -2 = not on this node.
    pttl_ms: i64,
    /// This node holds the holder the quorum is counted for.
    agrees: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl Serialize for LockView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let holder = self.holder();
        let shown = self.scope == LockMode::Redlock || !self.unreachable().is_empty();
        let nodes = match shown {
            false => Vec::new(),
            true => self.nodes.iter().map(|n| node_json(n, holder)).collect(),
        };
        LockViewJson {
            key: &self.key,
            scope: self.scope,
            redis_type: self.other_type().unwrap_or("string"),
            value: self.value(),
            holder: self.holder(),
            pttl_ms: self.pttl_ms().unwrap_or(-2),
            read_at_ms: self.read_at_ms,
            owner_alive: self.owner_alive,
            fence_counter: self.fence_counter,
            flags: &self.flags,
            held: self.held,
            nodes,
            quorum: self.quorum(),
            format: &self.format,
            denied: &self.denied,
            node: self
                .slot
                .and_then(|_| self.nodes.first())
                .map(|n| n.node.as_str()),
            slot: self.slot,
        }
        .serialize(s)
    }
}

fn node_json<'a>(n: &'a NodeLock, shown: Option<&LockHolder>) -> NodeHoldingJson<'a> {
    let (value, pttl_ms, agrees, error) = match &n.state {
        NodeLockState::Held {
            value,
            holder,
            pttl_ms,
        } => {
            let agrees = matches!((holder, shown), (Some(h), Some(s)) if same_acquisition(h, s));
            (Some(value.as_str()), *pttl_ms, agrees, None)
        }
        NodeLockState::Other { pttl_ms, .. } => (None, *pttl_ms, false, None),
        NodeLockState::Absent => (None, -2, false, None),
        NodeLockState::Unreachable { error } => (None, -2, false, Some(error.as_str())),
    };
    NodeHoldingJson {
        node: &n.node,
        value,
        pttl_ms,
        agrees,
        error,
    }
}

/// A Redisson fair lock's waiting queue or timeouts (`redisson_lock_queue:{name}`,
/// `redisson_lock_timeout:{name}`): Redisson expires them itself, so one without a TTL was left
/// by a client that died while waiting.
fn is_fair_lock_leftover(key: &str) -> bool {
    key.starts_with("redisson_lock_queue:{") || key.starts_with("redisson_lock_timeout:{")
}

/// One acquisition seen on two nodes: the same instance and nonce (the fence may differ).
fn same_acquisition(a: &LockHolder, b: &LockHolder) -> bool {
    a.nonce == b.nonce && a.instance == b.instance
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}
