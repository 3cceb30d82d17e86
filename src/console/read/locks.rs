//! The console's read-through to Redis: every `lock:*` key found with `SCAN` (never `KEYS`, which
//! blocks the server for every other client while it walks the keyspace), its holder decoded,
//! its PTTL, the owner's heartbeat; for RedLock, the holder on each node and whether a quorum
//! agrees; and the keys of one trace (`lock:order:…`, `lock:req:…`, `fence:…`, `idem:…`).
//! Read-only: nothing here writes.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::config::{host_port, Config};
use crate::contracts::{keys, LockHolder};

/// Keys asked for per `SCAN` call; small enough that one call costs the server well under a
/// millisecond, so other clients are never held up by the console.
pub const SCAN_COUNT: usize = 500;

/// One Redis server the console reads: the main one or a RedLock node.
#[derive(Clone)]
pub struct RedisNode {
    /// `127.0.0.1:6379` — how rows and errors name it.
    pub name: String,
    pub url: String,
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
    timeout: Duration,
}

impl RedisNode {
    pub fn new(url: &str, timeout: Duration) -> anyhow::Result<RedisNode> {
        let client = redis::Client::open(url)
            .map_err(|e| anyhow::anyhow!("redis url {}: {e}", host_port(url)))?;
        Ok(RedisNode {
            name: host_port(url),
            url: url.to_string(),
            client,
            conn: None,
            timeout,
        })
    }

    /// The connection, (re)connected when needed. A failed command drops it, so a node that comes
    /// back is picked up on the next poll.
    pub async fn conn(&mut self) -> anyhow::Result<MultiplexedConnection> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout.max(Duration::from_secs(2))));
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| self.error(e))?;
        self.conn = Some(c.clone());
        Ok(c)
    }

    /// An error that names the node and says what to do.
    pub fn error(&self, e: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!(
            "redis node {}: {e} (is it running? `scripts/stack status`)",
            self.name
        )
    }

    pub fn forget_connection(&mut self) {
        self.conn = None;
    }
}

/// The main Redis (fast path, single-node locks, heartbeats) and the RedLock nodes, each once.
pub fn nodes_of(config: &Config) -> anyhow::Result<(RedisNode, Vec<RedisNode>)> {
    let timeout = config.redis.command_timeout;
    let main = RedisNode::new(&config.redis.url, timeout)?;
    let mut redlock = Vec::new();
    for url in &config.redis.redlock_nodes {
        redlock.push(RedisNode::new(url, timeout)?);
    }
    Ok((main, redlock))
}

/// What one node holds under one lock key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeHolding {
    pub node: String,
    /// The raw value (lossy UTF-8); `None` when this node does not have the key.
    pub value: Option<String>,
    /// Milliseconds left; -1 = the key has no TTL; -2 = not on this node.
    pub pttl_ms: i64,
    /// True when this node's value is the one the quorum agrees on.
    pub agrees: bool,
}

/// RedLock agreement over the nodes: how many hold the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Quorum {
    pub agreeing: usize,
    pub nodes: usize,
    /// `agreeing >= nodes / 2 + 1`.
    pub reached: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LockFlag {
    /// The key never expires: a crashed holder keeps it forever.
    NoTtl,
    /// `instance:{holder}` has no heartbeat: the holder is gone and the lock is stale.
    DeadOwner,
    /// The value is not a [`LockHolder`]: some other tool wrote it.
    Undecodable,
    /// RedLock nodes disagree and no value has a majority.
    NoQuorum,
    /// The key is not a string (a Redisson lock is a hash): another tool's lock, listed with its
    /// type and TTL, never read as a value.
    OtherType,
}

impl LockFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            LockFlag::NoTtl => "no_ttl",
            LockFlag::DeadOwner => "dead_owner",
            LockFlag::Undecodable => "undecodable",
            LockFlag::NoQuorum => "no_quorum",
            LockFlag::OtherType => "other_type",
        }
    }
}

/// One lock key as the console shows it. A console lists up to every lock there is, and the next
/// scan is built while this one is on screen, so a row keeps its value once: the decoded holder
/// when the value is exactly the holder's canonical JSON (every value idemguard writes), the raw
/// text otherwise. [`LockRow::value`] gives it back byte for byte either way.
#[derive(Debug, Clone, PartialEq)]
pub struct LockRow {
    pub key: String,
    /// `single` (the main Redis) or `redlock` (the RedLock nodes).
    pub scope: &'static str,
    /// The value when it is not `holder`'s canonical JSON (for RedLock: the majority's, else the
    /// most common one).
    raw_value: Option<Box<str>>,
    pub holder: Option<LockHolder>,
    /// The key's Redis type when it is not a string (then it has no value): `hash`, `list` …
    pub redis_type: Option<String>,
    /// PTTL when read; -1 = no TTL. For RedLock: the smallest among the agreeing nodes.
    pub pttl_ms: i64,
    /// When the PTTL was read (epoch ms), so a view can count it down.
    pub read_at_ms: i64,
    /// Heartbeat of the holder's instance; `None` when the value is not decodable.
    pub owner_alive: Option<bool>,
    /// The current `fence:{key}` counter (main Redis); `None` when there is none.
    pub fence_counter: Option<i64>,
    pub flags: Vec<LockFlag>,
    /// RedLock only: every node's view of the key.
    pub nodes: Vec<NodeHolding>,
    pub quorum: Option<Quorum>,
}

/// The JSON form of a [`LockRow`] (`idemguard locks --json`): the value written out.
#[derive(Serialize)]
struct LockRowJson<'a> {
    key: &'a str,
    scope: &'static str,
    #[serde(rename = "type")]
    redis_type: &'a str,
    value: Cow<'a, str>,
    holder: &'a Option<LockHolder>,
    pttl_ms: i64,
    read_at_ms: i64,
    owner_alive: Option<bool>,
    fence_counter: Option<i64>,
    flags: &'a [LockFlag],
    #[serde(skip_serializing_if = "<[NodeHolding]>::is_empty")]
    nodes: &'a [NodeHolding],
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum: Option<Quorum>,
}

impl Serialize for LockRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LockRowJson {
            key: &self.key,
            scope: self.scope,
            redis_type: self.redis_type.as_deref().unwrap_or("string"),
            value: self.value(),
            holder: &self.holder,
            pttl_ms: self.pttl_ms,
            read_at_ms: self.read_at_ms,
            owner_alive: self.owner_alive,
            fence_counter: self.fence_counter,
            flags: &self.flags,
            nodes: &self.nodes,
            quorum: self.quorum,
        }
        .serialize(s)
    }
}

impl LockRow {
    /// A row for `key` holding `value`: decodes the holder, its liveness (from the instances
    /// with a heartbeat, when known) and the flags.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: String,
        scope: &'static str,
        value: String,
        pttl_ms: i64,
        read_at_ms: i64,
        live: Option<&BTreeSet<String>>,
        fence_counter: Option<i64>,
        nodes: Vec<NodeHolding>,
        quorum: Option<Quorum>,
    ) -> LockRow {
        let holder = LockHolder::from_value(&value);
        let owner_alive = match (&holder, live) {
            (Some(h), Some(live)) => Some(live.contains(&h.instance)),
            _ => None,
        };
        let mut flags = Vec::new();
        if pttl_ms == -1 {
            flags.push(LockFlag::NoTtl);
        }
        if owner_alive == Some(false) {
            flags.push(LockFlag::DeadOwner);
        }
        if holder.is_none() {
            flags.push(LockFlag::Undecodable);
        }
        if quorum.is_some_and(|q| !q.reached) {
            flags.push(LockFlag::NoQuorum);
        }
        let raw_value = match &holder {
            Some(h) if h.to_value() == value => None,
            _ => Some(value.into_boxed_str()),
        };
        LockRow {
            fence_counter,
            key,
            scope,
            raw_value,
            holder,
            redis_type: None,
            pttl_ms,
            read_at_ms,
            owner_alive,
            flags,
            nodes,
            quorum,
        }
    }

    /// The row of a key whose type is `redis_type` (None: a string, as every lock value): a key
    /// of another type has no value to decode and is flagged [`LockFlag::OtherType`].
    pub fn of_type(mut self, redis_type: Option<String>) -> LockRow {
        if redis_type.is_some() {
            self.flags.retain(|f| *f != LockFlag::Undecodable);
            self.flags.push(LockFlag::OtherType);
            self.flags.sort();
        }
        self.redis_type = redis_type;
        self
    }

    /// The value exactly as read (for RedLock: the majority's, else the most common one).
    pub fn value(&self) -> Cow<'_, str> {
        match (&self.raw_value, &self.holder) {
            (Some(v), _) => Cow::Borrowed(v),
            (None, Some(h)) => Cow::Owned(h.to_value()),
            (None, None) => Cow::Borrowed(""),
        }
    }

    /// PTTL counted down from when it was read (never below 0; -1 stays -1).
    pub fn pttl_now(&self, now_ms: i64) -> i64 {
        if self.pttl_ms < 0 {
            self.pttl_ms
        } else {
            (self.pttl_ms - (now_ms - self.read_at_ms)).max(0)
        }
    }
}

/// How one node answered the scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeScan {
    pub node: String,
    /// `main` or `redlock`.
    pub role: &'static str,
    pub ok: bool,
    pub error: Option<String>,
    pub keys: usize,
    pub scan_ms: f64,
}

/// The result of one full scan.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LockScan {
    pub locks: Vec<LockRow>,
    pub nodes: Vec<NodeScan>,
    /// Instances with a heartbeat (`instance:*` on the main Redis); `None` when it did not answer.
    pub live_instances: Option<BTreeSet<String>>,
    pub scan_ms: f64,
    pub read_at_ms: i64,
}

impl LockScan {
    pub fn all_nodes_ok(&self) -> bool {
        self.nodes.iter().all(|n| n.ok)
    }
    pub fn first_error(&self) -> Option<String> {
        self.nodes.iter().find_map(|n| n.error.clone())
    }
}

/// One lock key as read from one node.
#[derive(Debug, Clone)]
pub struct ScannedKey {
    pub key: String,
    pub value: String,
    pub pttl: i64,
    /// `fence:{key}` on the same node, when it was asked for.
    pub fence: Option<i64>,
    /// The key's type when it is not a string (`value` is empty then).
    pub redis_type: Option<String>,
}

type NodeKeys = Vec<ScannedKey>;

fn into_text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `SCAN` for `pattern` with [`SCAN_COUNT`], then TYPE + GET + PTTL (+ the fence counter when
/// `with_fence`) of each batch in one pipeline. Between batches the scan yields a moment, so it
/// is never a burst other clients queue behind. The GET of a key of another type fails alone
/// (`ignore_errors`): one Redisson lock (a hash) must not hide every other lock (issue 15).
pub async fn scan_values(
    conn: &mut MultiplexedConnection,
    pattern: &str,
    with_fence: bool,
) -> redis::RedisResult<NodeKeys> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(conn)
            .await?;
        if !batch.is_empty() {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for k in &batch {
                pipe.cmd("TYPE").arg(k).cmd("GET").arg(k).cmd("PTTL").arg(k);
                if with_fence {
                    pipe.cmd("GET").arg(keys::fence(k));
                }
            }
            let answers: Vec<redis::Value> = pipe.query_async(conn).await?;
            let mut answers = answers.into_iter();
            for k in batch {
                let (redis_type, value, pttl) = (answers.next(), answers.next(), answers.next());
                let fence = if with_fence { answers.next() } else { None };
                let pttl = if let Some(redis::Value::Int(n)) = pttl {
                    n
                } else {
                    -2
                };
                let (value, redis_type) =
                    match (redis_type.as_ref().and_then(value_string).as_deref(), value) {
                        (Some("string"), Some(redis::Value::BulkString(b))) => (into_text(b), None),
                        (Some("string" | "none") | None, _) => continue, // expired between SCAN and TYPE
                        (Some(other), _) if pttl != -2 => (String::new(), Some(other.to_string())),
                        _ => continue,
                    };
                let fence = fence
                    .as_ref()
                    .and_then(value_string)
                    .and_then(|f| f.parse().ok());
                out.push(ScannedKey {
                    key: k,
                    value,
                    pttl,
                    fence,
                    redis_type,
                });
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        cursor = next;
        if cursor == 0 {
            return Ok(out);
        }
    }
}

/// Instances with a live heartbeat (`instance:*`), by SCAN.
pub async fn live_instances(
    conn: &mut MultiplexedConnection,
) -> redis::RedisResult<BTreeSet<String>> {
    let mut live = BTreeSet::new();
    let mut cursor: u64 = 0;
    let prefix = keys::instance("");
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(conn)
            .await?;
        live.extend(
            batch
                .into_iter()
                .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string)),
        );
        cursor = next;
        if cursor == 0 {
            return Ok(live);
        }
    }
}

/// Every lock on the main Redis and on each RedLock node. A node that fails is reported in
/// [`LockScan::nodes`] and the others are still listed.
pub async fn scan_locks(main: &mut RedisNode, redlock: &mut [RedisNode]) -> LockScan {
    let started = Instant::now();
    let read_at_ms = crate::contracts::now_ms();
    let mut scan = LockScan {
        read_at_ms,
        ..Default::default()
    };

    // Main Redis: its locks, the fence counters and the heartbeats.
    let mut main_keys: NodeKeys = Vec::new();
    let mut fences: BTreeMap<String, i64> = BTreeMap::new();
    let t = Instant::now();
    let main_result = async {
        let mut c = main.conn().await?;
        main_keys = scan_values(&mut c, keys::LOCK_PATTERN, true)
            .await
            .map_err(|e| main.error(e))?;
        scan.live_instances = Some(live_instances(&mut c).await.map_err(|e| main.error(e))?);
        anyhow::Ok(c)
    }
    .await;
    match main_result {
        Ok(c) => {
            scan.nodes.push(NodeScan {
                node: main.name.clone(),
                role: "main",
                ok: true,
                error: None,
                keys: main_keys.len(),
                scan_ms: ms(t),
            });
            // Fence counters of the RedLock keys, read from the main Redis (the main keys' own
            // came with them).
            let mut all: BTreeSet<String> = BTreeSet::new();
            let mut per_node: Vec<(String, Result<NodeKeys, String>, f64)> = Vec::new();
            for node in redlock.iter_mut() {
                let t = Instant::now();
                let r = read_node(node).await;
                if let Ok(keys) = &r {
                    all.extend(keys.iter().map(|k| k.key.clone()));
                }
                per_node.push((node.name.clone(), r, ms(t)));
            }
            let mut c = c;
            if let Ok(f) = read_fences(&mut c, &all).await {
                fences = f;
            }
            finish(&mut scan, main_keys, per_node, &fences);
        }
        Err(e) => {
            main.forget_connection();
            scan.nodes.push(NodeScan {
                node: main.name.clone(),
                role: "main",
                ok: false,
                error: Some(format!("{e:#}")),
                keys: 0,
                scan_ms: ms(t),
            });
            let mut per_node = Vec::new();
            for node in redlock.iter_mut() {
                let t = Instant::now();
                let r = read_node(node).await;
                per_node.push((node.name.clone(), r, ms(t)));
            }
            finish(&mut scan, Vec::new(), per_node, &fences);
        }
    }
    scan.scan_ms = ms(started);
    scan
}

async fn read_node(node: &mut RedisNode) -> Result<NodeKeys, String> {
    let r = async {
        let mut c = node.conn().await?;
        scan_values(&mut c, keys::LOCK_PATTERN, false)
            .await
            .map_err(|e| node.error(e))
    }
    .await;
    if r.is_err() {
        node.forget_connection();
    }
    r.map_err(|e| format!("{e:#}"))
}

async fn read_fences(
    conn: &mut MultiplexedConnection,
    lock_keys: &BTreeSet<String>,
) -> redis::RedisResult<BTreeMap<String, i64>> {
    let mut out = BTreeMap::new();
    let list: Vec<&String> = lock_keys.iter().collect();
    for chunk in list.chunks(SCAN_COUNT) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("GET").arg(keys::fence(k));
        }
        let values: Vec<Option<i64>> = pipe.query_async(conn).await?;
        for (k, v) in chunk.iter().zip(values) {
            if let Some(v) = v {
                out.insert((*k).clone(), v);
            }
        }
    }
    Ok(out)
}

fn finish(
    scan: &mut LockScan,
    main_keys: NodeKeys,
    per_node: Vec<(String, Result<NodeKeys, String>, f64)>,
    fences: &BTreeMap<String, i64>,
) {
    let live = scan.live_instances.clone();
    let read_at = scan.read_at_ms;
    scan.locks.reserve(main_keys.len());
    for k in main_keys {
        scan.locks.push(
            LockRow::new(
                k.key,
                "single",
                k.value,
                k.pttl,
                read_at,
                live.as_ref(),
                k.fence,
                Vec::new(),
                None,
            )
            .of_type(k.redis_type),
        );
    }
    // RedLock: group each key over the nodes that answered.
    let node_count = per_node.len();
    let mut by_key: BTreeMap<String, BTreeMap<String, (String, i64)>> = BTreeMap::new();
    let mut other_types: BTreeMap<String, String> = BTreeMap::new();
    for (name, r, t) in &per_node {
        match r {
            Ok(keys) => {
                scan.nodes.push(NodeScan {
                    node: name.clone(),
                    role: "redlock",
                    ok: true,
                    error: None,
                    keys: keys.len(),
                    scan_ms: *t,
                });
                for k in keys {
                    by_key
                        .entry(k.key.clone())
                        .or_default()
                        .insert(name.clone(), (k.value.clone(), k.pttl));
                    if let Some(t) = &k.redis_type {
                        other_types.insert(k.key.clone(), t.clone());
                    }
                }
            }
            Err(e) => scan.nodes.push(NodeScan {
                node: name.clone(),
                role: "redlock",
                ok: false,
                error: Some(e.clone()),
                keys: 0,
                scan_ms: *t,
            }),
        }
    }
    for (key, holders) in by_key {
        // The most common value; ties go to the smallest value so the choice is stable.
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (v, _) in holders.values() {
            *counts.entry(v.as_str()).or_default() += 1;
        }
        let (majority, agreeing) = counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(v, n)| (v.to_string(), *n))
            .unwrap_or_default();
        let quorum = Quorum {
            agreeing,
            nodes: node_count,
            reached: agreeing > node_count / 2,
        };
        let nodes: Vec<NodeHolding> = per_node
            .iter()
            .map(|(name, r, _)| match (r, holders.get(name)) {
                (Ok(_), Some((v, pttl))) => NodeHolding {
                    node: name.clone(),
                    value: Some(v.clone()),
                    pttl_ms: *pttl,
                    agrees: *v == majority,
                },
                (Ok(_), None) => NodeHolding {
                    node: name.clone(),
                    value: None,
                    pttl_ms: -2,
                    agrees: false,
                },
                (Err(_), _) => NodeHolding {
                    node: name.clone(),
                    value: None,
                    pttl_ms: -2,
                    agrees: false,
                },
            })
            .collect();
        let pttl = nodes
            .iter()
            .filter(|n| n.agrees)
            .map(|n| n.pttl_ms)
            .filter(|p| *p != -2)
            .min_by_key(|p| if *p < 0 { i64::MAX } else { *p })
            .unwrap_or(-2);
        let fence = fences.get(&key).copied();
        let redis_type = other_types.remove(&key);
        scan.locks.push(
            LockRow::new(
                key,
                "redlock",
                majority,
                pttl,
                read_at,
                live.as_ref(),
                fence,
                nodes,
                Some(quorum),
            )
            .of_type(redis_type),
        );
    }
    scan.locks
        .sort_by(|a, b| a.key.cmp(&b.key).then(a.scope.cmp(b.scope)));
}

#[allow(clippy::too_many_arguments)]
fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// The Redis side of one trace
// ---------------------------------------------------------------------------------------------

/// One key of a trace as read from the main Redis (and, for locks, the RedLock nodes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceKey {
    pub key: String,
    pub node: String,
    pub value: String,
    pub pttl_ms: i64,
    pub read_at_ms: i64,
}

/// The Redis keys of one trace: its locks (decoded), their fence counters, the fast-path key.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceKeys {
    pub locks: Vec<LockRow>,
    /// `idem:{requestId}` on the main Redis, when present.
    pub fast_path: Option<TraceKey>,
    pub node_errors: Vec<String>,
}

/// Reads `lock:order:{orderNo}`, `lock:req:{requestId}` (main and RedLock nodes), their fence
/// counters and `idem:{requestId}`.
pub async fn trace_keys(
    main: &mut RedisNode,
    redlock: &mut [RedisNode],
    order_no: Option<&str>,
    request_id: Option<&str>,
) -> anyhow::Result<TraceKeys> {
    let read_at_ms = crate::contracts::now_ms();
    let mut lock_keys = Vec::new();
    if let Some(o) = order_no {
        lock_keys.push(keys::order_lock(o));
    }
    if let Some(r) = request_id {
        lock_keys.push(keys::request_lock(r));
    }
    let mut out = TraceKeys::default();
    let mut c = match main.conn().await {
        Ok(c) => c,
        Err(e) => {
            main.forget_connection();
            return Err(e);
        }
    };
    let main_name = main.name.clone();
    let read = async {
        let mut pipe = redis::pipe();
        pipe.ignore_errors(); // a key of another type is skipped, not an error of the whole trace
        for k in &lock_keys {
            pipe.cmd("GET")
                .arg(k)
                .cmd("PTTL")
                .arg(k)
                .cmd("GET")
                .arg(keys::fence(k));
        }
        let fast = request_id.map(keys::idempotency_fast_path);
        if let Some(f) = &fast {
            pipe.cmd("GET").arg(f).cmd("PTTL").arg(f);
        }
        pipe.cmd("PING"); // keeps the pipeline non-empty when no ID is known yet
        let answers: Vec<redis::Value> = pipe.query_async(&mut c).await?;
        // Liveness of the holders only (EXISTS instance:{id}), never a SCAN of every heartbeat:
        // a trace must stay fast whatever the size of the keyspace.
        let holders: BTreeSet<String> = answers
            .iter()
            .filter_map(value_string)
            .filter_map(|v| LockHolder::from_value(&v))
            .map(|h| h.instance)
            .collect();
        let mut live = BTreeSet::new();
        if !holders.is_empty() {
            let mut pipe = redis::pipe();
            for h in &holders {
                pipe.cmd("EXISTS").arg(keys::instance(h));
            }
            let exists: Vec<bool> = pipe.query_async(&mut c).await?;
            live.extend(
                holders
                    .into_iter()
                    .zip(exists)
                    .filter(|(_, e)| *e)
                    .map(|(h, _)| h),
            );
        }
        redis::RedisResult::Ok((answers, fast, live))
    }
    .await;
    let (answers, fast, live) = match read {
        Ok(x) => x,
        Err(e) => {
            main.forget_connection();
            return Err(main.error(e));
        }
    };
    let mut fences = BTreeMap::new();
    for (i, k) in lock_keys.iter().enumerate() {
        let (v, pttl, fence) = (&answers[i * 3], &answers[i * 3 + 1], &answers[i * 3 + 2]);
        if let Some(f) = value_string(fence).and_then(|s| s.parse::<i64>().ok()) {
            fences.insert(k.clone(), f);
        }
        if let Some(v) = value_string(v) {
            let pttl = if let redis::Value::Int(n) = pttl {
                *n
            } else {
                -2
            };
            out.locks.push(LockRow::new(
                k.clone(),
                "single",
                v,
                pttl,
                read_at_ms,
                Some(&live),
                fences.get(k).copied(),
                Vec::new(),
                None,
            ));
        }
    }
    if let Some(f) = fast {
        let base = lock_keys.len() * 3;
        if let Some(v) = value_string(&answers[base]) {
            let pttl = if let redis::Value::Int(n) = &answers[base + 1] {
                *n
            } else {
                -2
            };
            out.fast_path = Some(TraceKey {
                key: f,
                node: main_name,
                value: v,
                pttl_ms: pttl,
                read_at_ms,
            });
        }
    }
    // RedLock nodes: the same lock keys on each node.
    if !redlock.is_empty() && !lock_keys.is_empty() {
        let mut per_node: Vec<(String, Result<NodeKeys, String>, f64)> = Vec::new();
        for node in redlock.iter_mut() {
            let t = Instant::now();
            let r = async {
                let mut c = node.conn().await?;
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for k in &lock_keys {
                    pipe.cmd("GET").arg(k).cmd("PTTL").arg(k);
                }
                let answers: Vec<redis::Value> =
                    pipe.query_async(&mut c).await.map_err(|e| node.error(e))?;
                let mut found = Vec::new();
                for (k, pair) in lock_keys.iter().zip(answers.chunks(2)) {
                    if let Some(v) = value_string(&pair[0]) {
                        let pttl = if let redis::Value::Int(n) = &pair[1] {
                            *n
                        } else {
                            -2
                        };
                        found.push(ScannedKey {
                            key: k.clone(),
                            value: v,
                            pttl,
                            fence: None,
                            redis_type: None,
                        });
                    }
                }
                anyhow::Ok(found)
            }
            .await;
            if let Err(e) = &r {
                node.forget_connection();
                out.node_errors.push(format!("{e:#}"));
            }
            per_node.push((node.name.clone(), r.map_err(|e| format!("{e:#}")), ms(t)));
        }
        // Holders seen only on the RedLock nodes: their heartbeats too (on the main Redis).
        let mut live = live;
        let extra: BTreeSet<String> = per_node
            .iter()
            .filter_map(|(_, r, _)| r.as_ref().ok())
            .flatten()
            .filter_map(|k| LockHolder::from_value(&k.value))
            .map(|h| h.instance)
            .filter(|i| !live.contains(i))
            .collect();
        if !extra.is_empty() {
            let mut pipe = redis::pipe();
            for h in &extra {
                pipe.cmd("EXISTS").arg(keys::instance(h));
            }
            let exists: Vec<bool> = pipe.query_async(&mut c).await.map_err(|e| main.error(e))?;
            live.extend(
                extra
                    .into_iter()
                    .zip(exists)
                    .filter(|(_, e)| *e)
                    .map(|(h, _)| h),
            );
        }
        let mut scan = LockScan {
            read_at_ms,
            live_instances: Some(live),
            ..Default::default()
        };
        finish(&mut scan, Vec::new(), per_node, &fences);
        out.locks.extend(scan.locks);
    }
    Ok(out)
}

fn value_string(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_gives_its_value_back_byte_for_byte() {
        let h = LockHolder {
            instance: "vm-1".into(),
            host: "h".into(),
            pid: 7,
            acquired_at: 1,
            ttl_ms: 30_000,
            fence: 3,
            nonce: "n1".into(),
        };
        // idemguard's own value: kept as the holder only.
        let own = LockRow::new(
            "lock:order:1".into(),
            "single",
            h.to_value(),
            100,
            0,
            None,
            Some(3),
            vec![],
            None,
        );
        assert!(own.raw_value.is_none());
        assert_eq!(own.value(), h.to_value());
        // The same holder written with other spacing or field order, and a foreign value: kept raw.
        let spaced = h.to_value().replace(",\"host\"", ", \"host\"");
        let other_order = r#"{{"host":"h","instance":"vm-1","pid":7,"acquired_at":1,"ttl_ms":30000,"fence":3,"nonce":"n1"}}"#.to_string();
        for v in [spaced, other_order, "locked-by-cron".to_string()] {
            let row = LockRow::new(
                "lock:order:1".into(),
                "single",
                v.clone(),
                100,
                0,
                None,
                None,
                vec![],
                None,
            );
            assert_eq!(row.value(), v);
        }
        // The JSON form still carries the value.
        let json = serde_json::to_value(&own).unwrap();
        assert_eq!(json["value"], h.to_value());
        assert_eq!(json["holder"]["fence"], 3);
        assert!(json.get("nodes").is_none() && json.get("quorum").is_none());
    }
}
