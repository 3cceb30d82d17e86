//! Line of defense 2: Redis locks (seed §3, §6.2).
//!
//! A lock keeps concurrent copies of one request out of the critical section *before* they
//! reach the database: the first takes `lock:order:{orderNo}` (or `lock:user:{userId}:{action}`,
//! `lock:req:{requestId}`), the others are told "in progress" at once. It is not the final word
//! — a lock can expire under a slow holder or vanish in a failover — so every holder carries a
//! fence token the database checks, and the unique keys stay the arbiter.
//!
//! What each rule here stops:
//! - the value names its holder and is unique per acquisition ([`LockHolder`]: instance, host,
//!   pid, acquired-at, TTL, fence, nonce), so a release can compare it and an operator can see
//!   who holds what;
//! - release is compare-and-delete ([`LockGuard::release`]): a worker whose lock expired never
//!   deletes the next worker's lock (seed §6.2, second cause);
//! - the watchdog renews while the holder works ([`watchdog`]), and fires the loss signal when it
//!   cannot (seed §6.2, first cause); a dead holder's lock expires within one TTL;
//! - the fence token is taken in the same script as the lock, so tokens strictly increase and
//!   the database can refuse a stale holder; a counter expires `lock.fence_ttl` after the last
//!   lock on its key and restarts from the clock, above every earlier token (`lock.lua`);
//! - RedLock ([`redlock`]) survives the loss of a minority of nodes (seed §3.3, §6.2 third cause);
//! - instance heartbeats ([`liveness`]) tell a live holder from a dead one.
//!
//! Both modes sit behind one type, [`Locks`], chosen by `lock.mode`.

mod batch;
pub mod cluster;
mod conn;
pub mod formats;
mod held;
mod inspect;
mod keyslot;
mod liveness;
mod node;
mod operator;
mod redlock;
mod scripts;
mod single;
mod watchdog;

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, LockConfig, LockMode};
use crate::contracts::{keys, now_ms, Instance, Layer, LockHolder, Outcome, TraceEvent};
use crate::trace::Tracer;

pub use conn::NodeError;
pub use conn::RedisAccess;
pub(crate) use conn::{is_permission, open_main, refusal, RedisConn};
pub use held::{judge_held, warning as lock_held_warning, FirstSeen, HeldSince, LockHeld};
/// Keys asked for per `SCAN` call (and heartbeats per page): small enough that one call costs
/// the server well under a millisecond, so other clients are never held up by a reader.
pub const SCAN_COUNT: usize = 500;

pub use inspect::{
    InspectedKeys, LockFlag, LockInspector, LockScan, LockView, NodeLock, NodeLockState, NodeScan,
    Quorum,
};
pub use liveness::{Heartbeat, InstanceBeat, Liveness};
pub use scripts::NodeRelease;

use node::Node;
use scripts::ValueParts;

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

/// A fence token: strictly increasing per lock key across holders. The database stores the
/// largest it has seen for a row and refuses a write carrying a smaller one — the write of a
/// holder whose lock expired while it was paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FenceToken(pub i64);

impl fmt::Display for FenceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a lock operation could not be carried out (as opposed to "someone else holds it", which
/// is an answer: [`Acquisition::Contended`]).
#[derive(Debug, Clone)]
pub enum LockError {
    /// The single node (or the main Redis) is unreachable or refused the command.
    Node(NodeError),
    /// RedLock: too few nodes answered for a quorum to be possible. Nothing is held: whatever
    /// was taken on the nodes that answered was released again.
    NoQuorum {
        key: String,
        granted: usize,
        quorum: usize,
        nodes: usize,
        failures: Vec<NodeError>,
    },
    /// The nodes answered so slowly that no validity was left; released again.
    NoValidity {
        key: String,
        elapsed_ms: u64,
        ttl_ms: u64,
    },
    /// The configuration cannot make a lock service.
    Config(String),
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Node(e) => e.fmt(f),
            LockError::NoQuorum { key, granted, quorum, nodes, failures } => {
                write!(f, "lock {key}: {granted} of {nodes} redis nodes granted it but a quorum needs {quorum}")?;
                if !failures.is_empty() {
                    let list: Vec<String> = failures.iter().map(|e| format!("{} {}", e.node, e.problem)).collect();
                    write!(f, "; {} node(s) failed: {}", failures.len(), list.join("; "))?;
                }
                write!(f, "; nothing is held (are the nodes running? scripts/stack status)")
            }
            LockError::NoValidity { key, elapsed_ms, ttl_ms } => write!(
                f,
                "lock {key}: acquiring took {elapsed_ms}ms of its {ttl_ms}ms TTL, leaving no validity; released again \
                 (a redis node is slow? scripts/stack status)"
            ),
            LockError::Config(m) => write!(f, "lock configuration: {m}"),
        }
    }
}

impl std::error::Error for LockError {}

impl From<NodeError> for LockError {
    fn from(e: NodeError) -> Self {
        LockError::Node(e)
    }
}

/// How to acquire. [`Locks::options`] gives the configured defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct AcquireOptions {
    pub ttl: Duration,
    /// Tries while the lock is taken (1 = answer at once), with random jitter between them.
    pub attempts: u32,
    /// Longest pause between two tries (each pause is uniform in `0..=retry_delay`).
    pub retry_delay: Duration,
    /// Renew every ttl/3 while held. Off: the lock simply expires after `ttl` (a holder slower
    /// than its TTL loses it — which is what the storm scenario "lock-expiry" needs).
    pub watchdog: bool,
    /// The key is new — one per request, as `lock:req:{requestId}` — so its fence counter is
    /// most likely gone: the script starts it in one command instead of two. Only a hint: the
    /// token is the same either way.
    pub fresh_key: bool,
}

impl AcquireOptions {
    pub fn from_config(lock: &LockConfig) -> AcquireOptions {
        AcquireOptions {
            ttl: lock.ttl,
            attempts: lock.acquire_attempts.max(1),
            retry_delay: lock.retry_delay,
            watchdog: true,
            fresh_key: false,
        }
    }
    pub fn fresh_key(mut self) -> Self {
        self.fresh_key = true;
        self
    }
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }
    pub fn without_watchdog(mut self) -> Self {
        self.watchdog = false;
        self
    }
}

/// The answer to an acquire.
#[derive(Debug)]
pub enum Acquisition {
    Held(LockGuard),
    /// Someone else holds it (after every allowed try). Emitted as `lock_contended`.
    Contended(Contention),
}

impl Acquisition {
    pub fn held(self) -> Option<LockGuard> {
        match self {
            Acquisition::Held(g) => Some(g),
            Acquisition::Contended(_) => None,
        }
    }
}

/// Who was in the way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contention {
    pub key: String,
    /// The current holder's raw value as one node reported it (None: not known).
    pub value: Option<String>,
    /// Decoded, when it is an idemguard value.
    pub holder: Option<LockHolder>,
    /// The holder's remaining TTL on that node in ms (-1: the key has no TTL).
    pub pttl_ms: Option<i64>,
    pub attempts: u32,
}

/// The outcome of a compare-and-delete, node by node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleaseReport {
    pub key: String,
    /// (host:port, what that node did). Nodes that were never ours are not asked.
    pub nodes: Vec<(String, NodeRelease)>,
}

impl ReleaseReport {
    /// True when our value was deleted on at least one node.
    pub fn released(&self) -> bool {
        self.nodes.iter().any(|(_, r)| *r == NodeRelease::Deleted)
    }
    /// True when nothing was deleted and the nodes that answered did not hold our value: we were
    /// no longer the holder (a node that did not answer keeps its copy until its TTL).
    pub fn refused(&self) -> bool {
        !self.released()
            && self
                .nodes
                .iter()
                .any(|(_, r)| matches!(r, NodeRelease::NotHeld { .. }))
    }
    /// The value someone else holds now, if a node reported one.
    pub fn current(&self) -> Option<&str> {
        self.nodes.iter().find_map(|(_, r)| match r {
            NodeRelease::NotHeld { current: Some(c) } => Some(c.as_str()),
            _ => None,
        })
    }
    fn summary(&self) -> String {
        let deleted = self
            .nodes
            .iter()
            .filter(|(_, r)| *r == NodeRelease::Deleted)
            .count();
        let unreachable: Vec<&str> = self
            .nodes
            .iter()
            .filter(|(_, r)| matches!(r, NodeRelease::Unreachable { .. }))
            .map(|(n, _)| n.as_str())
            .collect();
        let mut s = format!("deleted on {deleted} of {} node(s)", self.nodes.len());
        if !unreachable.is_empty() {
            s.push_str(&format!(", unreachable: {}", unreachable.join(", ")));
        }
        if !self.released() {
            match self.current().map(|c| (c, LockHolder::from_value(c))) {
                Some((_, Some(h))) => {
                    s.push_str(&format!("; now held by {} (fence {})", h.instance, h.fence))
                }
                Some((raw, None)) => s.push_str(&format!("; now holds {raw:?}")),
                None => s.push_str("; the lock had expired"),
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// The lock service
// ---------------------------------------------------------------------------------------------

/// The lock layer of one process: single-node or RedLock, as `lock.mode` says. Cheap to clone.
#[derive(Clone)]
pub struct Locks {
    inner: Arc<Inner>,
}

struct Inner {
    mode: LockMode,
    /// One node in single mode, the RedLock nodes otherwise.
    nodes: Vec<Arc<Node>>,
    config: LockConfig,
    instance: Instance,
    tracer: Tracer,
    liveness: Liveness,
}

/// What one node said it holds for us after an acquire.
#[derive(Debug, Clone)]
pub(crate) enum NodeHold {
    /// The node took our SET; this is the exact value (with its fence).
    Known(Arc<str>),
    /// The node did not answer: it may hold our value with a fence we do not know.
    Unknown,
    /// The node refused (someone else held it) or was never asked.
    None,
}

pub(crate) enum Attempt {
    Granted {
        holds: Vec<NodeHold>,
        fence: i64,
    },
    Contended {
        current: Option<String>,
        pttl_ms: Option<i64>,
    },
}

pub(crate) enum Renewal {
    Renewed,
    /// Our value is gone (expired, deleted, or another holder): the lock is lost for good.
    NotHeld,
    /// The nodes could not be asked; the lock may still be ours until its validity ends.
    Failed(LockError),
}

impl Locks {
    /// The lock layer described by `config` (`lock.*`, `redis.*`, `instance.heartbeat_ttl`).
    /// Connects lazily: it succeeds with nodes down, and each operation then names the node.
    pub fn from_config(
        config: &Config,
        instance: &Instance,
        tracer: Tracer,
    ) -> Result<Locks, LockError> {
        let access = RedisAccess::of(&config.redis);
        let main = Arc::new(Node::open(&config.redis.url, &access)?);
        let nodes = match config.lock.mode {
            LockMode::Single => vec![main.clone()],
            LockMode::Redlock => {
                if config.redis.redlock_nodes.len() < 3 {
                    return Err(LockError::Config(format!(
                        "lock.mode = \"redlock\" needs at least 3 nodes in redis.redlock_nodes, {} given",
                        config.redis.redlock_nodes.len()
                    )));
                }
                config
                    .redis
                    .redlock_nodes
                    .iter()
                    .map(|u| Node::open(u, &access).map(Arc::new))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        if config.lock.ttl < Duration::from_millis(30) {
            return Err(LockError::Config("lock.ttl must be at least 30ms".into()));
        }
        Ok(Locks {
            inner: Arc::new(Inner {
                mode: config.lock.mode,
                nodes,
                config: config.lock.clone(),
                instance: instance.clone(),
                tracer,
                liveness: Liveness::new(main, config.instance.heartbeat_ttl),
            }),
        })
    }

    pub fn mode(&self) -> LockMode {
        self.inner.mode
    }

    /// host:port of the lock nodes (one in single mode).
    pub fn nodes(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// Nodes that must agree: 1 in single mode, N/2+1 under RedLock.
    pub fn quorum(&self) -> usize {
        match self.inner.mode {
            LockMode::Single => 1,
            LockMode::Redlock => redlock::quorum(self.inner.nodes.len()),
        }
    }

    /// The configured acquire options (watchdog on).
    pub fn options(&self) -> AcquireOptions {
        AcquireOptions::from_config(&self.inner.config)
    }

    /// Instance heartbeats on the main Redis.
    pub fn liveness(&self) -> &Liveness {
        &self.inner.liveness
    }

    pub fn instance(&self) -> &Instance {
        &self.inner.instance
    }

    /// Acquire `key` with the configured options (watchdog on).
    pub async fn acquire(&self, key: &str) -> Result<Acquisition, LockError> {
        self.acquire_with(key, &self.options()).await
    }

    /// Acquire `key`: `Held` with a guard, or `Contended` when someone else holds it after
    /// `options.attempts` tries. An error means the nodes could not be asked (nothing is held).
    /// One attempt loop holds the backoff, the fence and the watchdog hand-off; each branch is
    /// one outcome of one attempt.
    pub async fn acquire_with(
        &self,
        key: &str,
        options: &AcquireOptions,
    ) -> Result<Acquisition, LockError> {
        let started = Instant::now();
        let key_name = key;
        let key: Arc<str> = Arc::from(key);
        let ttl = options.ttl.max(Duration::from_millis(1));
        let ttl_ms = ttl.as_millis().max(1) as u64;
        let fence_key: Arc<str> = keys::fence(&key).into();
        let attempts = options.attempts.max(1);
        let mut last: (Option<String>, Option<i64>) = (None, None);
        for attempt in 1..=attempts {
            let holder = self.new_holder(ttl_ms);
            let parts = ValueParts::of(&holder);
            let t0 = Instant::now();
            let fence_life = self.fence_life().fresh(options.fresh_key);
            match self
                .attempt(&key, &fence_key, &parts, ttl_ms, fence_life)
                .await?
            {
                Attempt::Granted { holds, fence } => {
                    let elapsed = t0.elapsed();
                    match self.validity(ttl, elapsed) {
                        Some(validity) => {
                            let holder = LockHolder { fence, ..holder };
                            let granted = holds
                                .iter()
                                .filter(|c| matches!(c, NodeHold::Known(_)))
                                .count();
                            self.emit(
                                Outcome::LockAcquired,
                                key_name,
                                format!(
                                    "key={key} fence={fence} ttl_ms={ttl_ms} nodes={granted}/{} attempt={attempt} watchdog={}",
                                    self.inner.nodes.len(),
                                    options.watchdog
                                ),
                                started,
                            );
                            return Ok(Acquisition::Held(LockGuard::new(
                                self.clone(),
                                key,
                                holder,
                                parts,
                                holds,
                                ttl,
                                t0 + validity,
                                options.watchdog,
                            )));
                        }
                        None => {
                            self.release_claims(&key, &holds, &parts).await;
                            if attempt == attempts {
                                return Err(LockError::NoValidity {
                                    key: key_name.into(),
                                    elapsed_ms: elapsed.as_millis() as u64,
                                    ttl_ms,
                                });
                            }
                        }
                    }
                }
                Attempt::Contended { current, pttl_ms } => last = (current, pttl_ms),
            }
            if attempt < attempts {
                retry_pause(options.retry_delay).await;
            }
        }
        Ok(self.contended(key_name, last, attempts, started))
    }

    /// This instance as the holder of a new attempt: fence 0 until the attempt is granted one,
    /// a nonce of its own.
    fn new_holder(&self, ttl_ms: u64) -> LockHolder {
        LockHolder {
            instance: self.inner.instance.id.clone(),
            host: self.inner.instance.host.clone(),
            pid: self.inner.instance.pid,
            acquired_at: now_ms(),
            ttl_ms,
            fence: 0,
            nonce: format!("{:032x}", rand::random::<u128>()),
        }
    }

    /// Every attempt found the key held: who holds it (as the last attempt saw it), traced.
    fn contended(
        &self,
        key: &str,
        last: (Option<String>, Option<i64>),
        attempts: u32,
        started: Instant,
    ) -> Acquisition {
        let (value, pttl_ms) = last;
        let holder = value.as_deref().and_then(LockHolder::from_value);
        let who = match (&holder, &value) {
            (Some(h), _) => format!("held by {} fence {}", h.instance, h.fence),
            (None, Some(v)) => format!("held by value {v:?}"),
            (None, None) => "held elsewhere".into(),
        };
        self.emit(
            Outcome::LockContended,
            key,
            format!(
                "key={key} {who} pttl_ms={} attempts={attempts}",
                pttl_ms.map_or("?".into(), |p| p.to_string())
            ),
            started,
        );
        Acquisition::Contended(Contention {
            key: key.to_string(),
            value,
            holder,
            pttl_ms,
            attempts,
        })
    }

    /// Validity left after an acquire or renewal that took `elapsed`:
    /// TTL − elapsed − (TTL × drift_factor + 2 ms); None when nothing is left.
    fn validity(&self, ttl: Duration, elapsed: Duration) -> Option<Duration> {
        let drift = ttl.mul_f64(self.inner.config.drift_factor) + Duration::from_millis(2);
        ttl.checked_sub(elapsed + drift).filter(|v| !v.is_zero())
    }

    async fn attempt(
        &self,
        key: &Arc<str>,
        fence_key: &Arc<str>,
        parts: &ValueParts,
        ttl_ms: u64,
        fence_life: batch::FenceLife,
    ) -> Result<Attempt, LockError> {
        match self.inner.mode {
            LockMode::Single => {
                single::attempt(
                    &self.inner.nodes[0],
                    key,
                    fence_key,
                    parts,
                    ttl_ms,
                    fence_life,
                )
                .await
            }
            LockMode::Redlock => {
                redlock::attempt(&self.inner.nodes, key, fence_key, parts, ttl_ms, fence_life).await
            }
        }
    }

    /// The seed and lifetime of fence counters now (`lock.fence_ttl`; see `lock.lua`).
    fn fence_life(&self) -> batch::FenceLife {
        batch::FenceLife::now(self.inner.config.fence_ttl)
    }

    async fn renew_claims(&self, key: &Arc<str>, holds: &[NodeHold], ttl_ms: u64) -> Renewal {
        match self.inner.mode {
            LockMode::Single => {
                single::renew(&self.inner.nodes[0], key, holds, ttl_ms, self.fence_life()).await
            }
            LockMode::Redlock => {
                redlock::renew(&self.inner.nodes, key, holds, ttl_ms, self.fence_life()).await
            }
        }
    }

    async fn release_claims(
        &self,
        key: &Arc<str>,
        holds: &[NodeHold],
        parts: &ValueParts,
    ) -> ReleaseReport {
        let nodes = match self.inner.mode {
            LockMode::Single => {
                vec![single::release(&self.inner.nodes[0], key, holds, parts).await]
            }
            LockMode::Redlock => redlock::release(&self.inner.nodes, key, holds, parts).await,
        };
        ReleaseReport {
            key: key.to_string(),
            nodes,
        }
    }

    /// Emit the trace event of a release and turn "no node answered" into an error.
    fn conclude_release(
        &self,
        report: ReleaseReport,
        fence: Option<i64>,
        who: &str,
        started: Instant,
    ) -> Result<ReleaseReport, LockError> {
        let key = report.key.clone();
        let fence = fence.map_or(String::new(), |f| format!(" fence={f}"));
        if !report.nodes.is_empty()
            && report
                .nodes
                .iter()
                .all(|(_, r)| matches!(r, NodeRelease::Unreachable { .. }))
        {
            let failures = report
                .nodes
                .iter()
                .filter_map(|(_, r)| match r {
                    NodeRelease::Unreachable { error } => Some(error.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>();
            return Err(match (self.inner.mode, failures.len()) {
                (LockMode::Single, 1) => {
                    LockError::Node(failures.into_iter().next().expect("one failure"))
                }
                _ => LockError::NoQuorum {
                    key,
                    granted: 0,
                    quorum: self.quorum(),
                    nodes: self.inner.nodes.len(),
                    failures,
                },
            });
        }
        let outcome = if report.released() {
            Outcome::LockReleased
        } else {
            Outcome::LockReleaseRefused
        };
        self.emit(
            outcome,
            &key,
            format!("key={key}{fence} by={who} {}", report.summary()),
            started,
        );
        Ok(report)
    }

    fn emit(&self, outcome: Outcome, key: &str, detail: String, started: Instant) {
        let (order_no, request_id) = keys::ids_of_lock(key);
        let mut event = TraceEvent::new(Layer::Lock, outcome)
            .detail(detail)
            .since(started);
        event.order_no = order_no;
        event.request_id = request_id;
        self.inner.tracer.emit(event);
    }
}

// ---------------------------------------------------------------------------------------------
// The guard
// ---------------------------------------------------------------------------------------------

/// What a held lock shares with its watchdog.
pub(crate) struct Held {
    key: Arc<str>,
    holder: LockHolder,
    parts: ValueParts,
    holds: Vec<NodeHold>,
    ttl: Duration,
    lost: CancellationToken,
    lost_reason: Mutex<Option<String>>,
    valid_until: Mutex<Instant>,
    renewals: AtomicU32,
}

impl Held {
    fn valid_until(&self) -> Instant {
        *self.valid_until.lock().expect("valid_until")
    }
}

/// A held lock. Keep it while working; `release().await` when done. Dropping it stops the
/// watchdog and releases in the background (compare-and-delete, so never someone else's lock).
///
/// Await [`LockGuard::lost`] (or poll [`LockGuard::is_lost`]) next to the work: once it fires
/// the lock may be someone else's and the work must not write — or write with its fence token,
/// which the database refuses when a newer holder wrote first.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    locks: Locks,
    held: Arc<Held>,
    stop_watchdog: CancellationToken,
    released: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.held.key)
            .field("fence", &self.held.holder.fence)
            .finish()
    }
}

impl LockGuard {
    #[allow(clippy::too_many_arguments)]
    fn new(
        locks: Locks,
        key: Arc<str>,
        holder: LockHolder,
        parts: ValueParts,
        holds: Vec<NodeHold>,
        ttl: Duration,
        valid_until: Instant,
        watchdog: bool,
    ) -> LockGuard {
        let held = Arc::new(Held {
            key,
            holder,
            parts,
            holds,
            ttl,
            lost: CancellationToken::new(),
            lost_reason: Mutex::new(None),
            valid_until: Mutex::new(valid_until),
            renewals: AtomicU32::new(0),
        });
        let stop_watchdog = CancellationToken::new();
        watchdog::spawn(locks.clone(), held.clone(), stop_watchdog.clone(), watchdog);
        LockGuard {
            locks,
            held,
            stop_watchdog,
            released: false,
        }
    }

    pub fn key(&self) -> &str {
        &self.held.key
    }

    /// The fence token to write with (the database refuses smaller ones).
    pub fn fence(&self) -> FenceToken {
        FenceToken(self.held.holder.fence)
    }

    /// Who holds it: this process, with the fence token of this acquisition.
    pub fn holder(&self) -> &LockHolder {
        &self.held.holder
    }

    /// The value stored under the key (under RedLock: on the nodes that issued the fence token;
    /// others carry their own token in the same holder description).
    pub fn value(&self) -> String {
        self.held.parts.value(self.held.holder.fence)
    }

    /// Fires when the lock is lost: a renewal found another value, or the remaining validity
    /// fell below the margin (renewals failing, capped by `lock.max_renewals`, or — acquired
    /// without the watchdog — the TTL running out).
    pub fn lost_signal(&self) -> CancellationToken {
        self.held.lost.clone()
    }

    /// Completes when the lock is lost (see [`LockGuard::lost_signal`]).
    pub async fn lost(&self) {
        self.held.lost.cancelled().await
    }

    pub fn is_lost(&self) -> bool {
        self.held.lost.is_cancelled()
    }

    /// Why the loss signal fired.
    pub fn lost_reason(&self) -> Option<String> {
        self.held.lost_reason.lock().expect("lost_reason").clone()
    }

    /// How long the lock is still surely ours (local estimate: last acquire/renewal start +
    /// TTL − drift). Zero once lost.
    pub fn remaining_validity(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.held
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// Successful watchdog renewals so far.
    pub fn renewals(&self) -> u32 {
        self.held.renewals.load(Ordering::Relaxed)
    }

    /// Release: compare-and-delete on every node that may hold our value. A lock we no longer
    /// hold deletes nothing and says so ([`ReleaseReport::refused`], trace
    /// `lock_release_refused`). Errors only when no node answered.
    pub async fn release(mut self) -> Result<ReleaseReport, LockError> {
        self.released = true;
        self.stop_watchdog.cancel();
        release_held(&self.locks, &self.held).await
    }
}

async fn release_held(locks: &Locks, held: &Held) -> Result<ReleaseReport, LockError> {
    let started = Instant::now();
    let held_ms = (now_ms() - held.holder.acquired_at).max(0);
    if let Some(m) = crate::metrics::recording() {
        m.lock_held_seconds.observe(held_ms as f64 / 1000.0);
    }
    let report = locks
        .release_claims(&held.key, &held.holds, &held.parts)
        .await;
    locks.conclude_release(report, Some(held.holder.fence), "holder", started)
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_watchdog.cancel();
        if self.released {
            return;
        }
        // Drop cannot await: release on the runtime. Without a runtime the key expires by TTL.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let locks = self.locks.clone();
            let held = self.held.clone();
            handle.spawn(async move {
                if let Err(e) = release_held(&locks, &held).await {
                    tracing::warn!(key = %held.key, "releasing a dropped lock failed; it expires with its TTL: {e}");
                }
            });
        }
    }
}

/// The pause between two attempts: random up to `retry_delay`, so contenders spread out.
async fn retry_pause(retry_delay: Duration) {
    let cap = retry_delay.as_micros() as u64;
    let pause = if cap == 0 {
        0
    } else {
        rand::random_range(0..=cap)
    };
    tokio::time::sleep(Duration::from_micros(pause)).await;
}
