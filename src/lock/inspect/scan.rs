//! Reading the lock nodes: SCAN for the keys of the patterns (never KEYS), then each key's type,
//! value, PTTL and fence counter in chunks, node by node, into [`LockView`]s — for
//! [`Locks::scan_locks`] / [`Locks::inspect`] (the nodes of one lock mode) and for the
//! read-only [`LockInspector`] (both modes, each holder judged against the heartbeats).

use super::*;

/// [`scan_node`] for each pattern in turn.
pub(super) async fn scan_patterns(
    node: &Node,
    patterns: &[String],
    limit: usize,
) -> Result<(Vec<String>, bool), NodeError> {
    let (mut all, mut more) = (Vec::new(), false);
    for p in patterns {
        // `{orderNo}` / `{requestId}` name where a key carries its ID: any text to SCAN.
        let (found, m) = scan_node(node, &formats::scan_glob(p), limit).await?;
        all.extend(found);
        more |= m;
    }
    Ok((all, more))
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

/// TYPE, GET, HGETALL and PTTL of `keys` on `node` with their `fence:{key}` counters, in MULTI
/// so a key cannot expire between them. The GET of a key of another type (and the HGETALL of a
/// string) fails alone (`ignore_errors`): one such key — a Redisson lock is a hash — must not
/// hide every other lock.
pub(super) async fn fetch_node(node: &Node, keys: &[String]) -> Result<Vec<KeyAnswer>, NodeError> {
    if node.is_cluster() {
        return cluster::fetch_each(node, keys).await;
    }
    let mut out = Vec::with_capacity(keys.len());
    for (i, chunk) in keys.chunks(FETCH_CHUNK).enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        out.extend(answers(&read_key_chunk(node, chunk).await?));
    }
    Ok(out)
}

/// The answers of [`read_key_chunk`], key by key.
pub(super) fn answers(values: &[Value]) -> Vec<KeyAnswer> {
    values
        .chunks(5)
        .map(|a| (node_lock_state(&a[..3], &a[4]), fence_of(&a[3]), denied(a)))
        .collect()
}

/// [`read_chunk`] in one MULTI, or without it when the user may not run one of its commands.
pub(super) async fn read_key_chunk(node: &Node, chunk: &[String]) -> Result<Vec<Value>, NodeError> {
    match read_chunk(node, chunk, true).await {
        // A command the ACL user may not run aborts the whole MULTI (EXECABORT): read the
        // chunk again without it, so each refused command fails alone and is named.
        Err(e) if e.problem.to_ascii_lowercase().contains("noperm") => {
            read_chunk(node, chunk, false).await
        }
        other => other,
    }
}

/// TYPE, GET, PTTL, GET fence and HGETALL of each key, in one MULTI when `atomic` (never on a
/// cluster master reached directly: its keys are in many slots, and MULTI takes one). On a
/// cluster, a slot that moved or is moving is followed ([`cluster::follow`]).
async fn read_chunk(node: &Node, chunk: &[String], atomic: bool) -> Result<Vec<Value>, NodeError> {
    let atomic = atomic && !node.cluster_master;
    let mut pipe = redis::pipe();
    if atomic {
        pipe.atomic();
    }
    pipe.ignore_errors();
    for cmd in key_reads(chunk) {
        pipe.add_command(cmd);
    }
    let on_cluster = node.is_cluster() || node.cluster_master;
    let read = node
        .run(|mut c| async move { cluster::redirected(pipe.query_async(&mut c).await, on_cluster) })
        .await?;
    cluster::follow(node, chunk, atomic, read).await
}

/// The commands that read each key: TYPE, GET, PTTL, GET of its fence counter, HGETALL.
pub(super) fn key_reads(chunk: &[String]) -> impl Iterator<Item = redis::Cmd> + '_ {
    let read = |name: &str, key: &str| {
        let mut cmd = redis::cmd(name);
        cmd.arg(key);
        cmd
    };
    chunk.iter().flat_map(move |k| {
        [
            read("TYPE", k),
            read("GET", k),
            read("PTTL", k),
            read("GET", &keys::fence(k)),
            read("HGETALL", k),
        ]
    })
}

fn fence_of(answer: &Value) -> Option<i64> {
    match answer {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// The commands of one key's TYPE, GET, PTTL, GET fence, HGETALL the user may not run.
fn denied(answers: &[Value]) -> Vec<String> {
    const SENT: [&str; 5] = ["TYPE", "GET", "PTTL", "GET fence", "HGETALL"];
    let mut out: Vec<String> = Vec::new();
    for (answer, cmd) in answers.iter().zip(SENT) {
        if let Value::ServerError(e) = answer {
            if e.code() == "NOPERM" {
                let cmd = cmd.split(' ').next().unwrap_or(cmd).to_string();
                if !out.contains(&cmd) {
                    out.push(cmd);
                }
            }
        }
    }
    out
}

/// A hash's HGETALL answer as (field, value) pairs; empty for anything else.
fn hash_fields(answer: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    match answer {
        Value::Map(m) => m
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        Value::Array(a) => a
            .chunks(2)
            .filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// One key's TYPE, GET and PTTL answers, and its HGETALL.
fn node_lock_state(answers: &[Value], hash: &Value) -> NodeLockState {
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
            fields: hash_fields(hash),
        },
    }
}

/// `keys` as every node of `scope` sees them.
async fn fetch(nodes: &[Arc<Node>], scope: LockMode, keys: &[String]) -> Vec<LockView> {
    let at = now_ms();
    let fetched = join_all(nodes.iter().map(|n| fetch_node(n, keys))).await;
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            let answers = nodes
                .iter()
                .zip(&fetched)
                .map(|(n, f)| {
                    let (state, fence, denied) = match f {
                        Ok(states) => states[i].clone(),
                        Err(e) => (
                            // The problem alone: the node is named where it is shown.
                            NodeLockState::Unreachable {
                                error: e.problem.clone(),
                            },
                            None,
                            Vec::new(),
                        ),
                    };
                    (
                        NodeLock {
                            node: n.addr.clone(),
                            state,
                        },
                        fence,
                        denied,
                    )
                })
                .collect();
            LockView::read(key.clone(), scope, answers, at)
        })
        .collect()
}

/// Every key matching one of `patterns` on `nodes` (up to `limit` per node and pattern), each
/// as every node sees it. A node that is down shows as unreachable; the others are still listed.
async fn scan(nodes: &[Arc<Node>], scope: LockMode, limit: usize, patterns: &[String]) -> LockScan {
    let started = Instant::now();
    let read_at_ms = now_ms();
    let role = match scope {
        LockMode::Single => "main",
        LockMode::Redlock => "redlock",
    };
    let scans = join_all(nodes.iter().map(|n| async move {
        let t = Instant::now();
        (scan_patterns(n, patterns, limit).await, ms(t))
    }))
    .await;
    let mut all: BTreeSet<String> = BTreeSet::new();
    let mut out = LockScan {
        read_at_ms,
        ..LockScan::default()
    };
    for (n, (s, scan_ms)) in nodes.iter().zip(scans) {
        let (ok, error, keys) = match s {
            Ok((found, more)) => {
                out.truncated |= more;
                let n = found.len();
                all.extend(found);
                (true, None, n)
            }
            Err(e) => (false, Some(e.to_string()), 0),
        };
        out.nodes.push(NodeScan {
            node: n.addr.clone(),
            role,
            ok,
            error,
            keys,
            scan_ms,
        });
    }
    let keys: Vec<String> = all.into_iter().collect();
    out.locks = fetch(nodes, scope, &keys).await;
    out.scan_ms = ms(started);
    out
}

impl Locks {
    /// Every `lock:*` key on every lock node (up to `limit` keys per node), each with its value,
    /// decoded holder, PTTL and fence counter per node. A node that is down shows as
    /// unreachable; the others are still listed. Owners are not judged (see [`LockInspector`]).
    pub async fn scan_locks(&self, limit: usize) -> LockScan {
        let patterns = [keys::LOCK_PATTERN.to_string()];
        match self.inner.nodes.as_slice() {
            [one] if one.is_cluster() => cluster::scan(one, limit, &patterns).await,
            nodes => scan(nodes, self.inner.mode, limit, &patterns).await,
        }
    }

    /// One lock key as every node sees it: what a release compares and audits.
    pub async fn inspect(&self, key: &str) -> LockView {
        let nodes = &self.inner.nodes;
        let mut views = fetch(nodes, self.inner.mode, &[key.to_string()]).await;
        if nodes[0].is_cluster() {
            cluster::place(&nodes[0], &mut views).await;
        }
        views.pop().expect("one view per key")
    }
}

/// Read-only: every lock the configuration names, on the main Redis (single-mode locks) and on
/// the RedLock nodes, each holder judged against the heartbeats — what the console and
/// `idemguard locks` show. Nothing here writes; it needs no lock service (no instance, no
/// tracer), and a node that is down is reported, never waited for.
pub struct LockInspector {
    main: Vec<Arc<Node>>,
    redlock: Vec<Arc<Node>>,
    liveness: Liveness,
    /// `foreign_locks.patterns` and `.decoders`.
    patterns: Vec<String>,
    decoders: Vec<Decoder>,
}

/// The locks of one trace: the keys found on some node, and the nodes that could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InspectedKeys {
    pub locks: Vec<LockView>,
    pub node_errors: Vec<String>,
}

impl LockInspector {
    pub fn from_config(config: &Config) -> Result<LockInspector, LockError> {
        let access = crate::lock::RedisAccess::of(&config.redis);
        let main = Arc::new(Node::open(&config.redis.url, &access)?);
        let redlock = config
            .redis
            .redlock_nodes
            .iter()
            .map(|u| Node::open(u, &access).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LockInspector {
            liveness: Liveness::new(main.clone(), config.instance.heartbeat_ttl),
            main: vec![main],
            redlock,
            patterns: config.foreign_locks.patterns.clone(),
            decoders: config.foreign_locks.decoders.clone(),
        })
    }

    /// host:port of the main Redis.
    pub fn main_node(&self) -> &str {
        &self.main[0].addr
    }

    /// Every lock on the main Redis and on each RedLock node (up to `limit` keys per node), and
    /// the heartbeats its owners are judged against.
    pub async fn scan(&self, limit: usize) -> LockScan {
        let started = Instant::now();
        let main = async {
            match self.main.as_slice() {
                [one] if one.is_cluster() => cluster::scan(one, limit, &self.patterns).await,
                nodes => scan(nodes, LockMode::Single, limit, &self.patterns).await,
            }
        };
        let (mut out, redlock, live) = tokio::join!(
            main,
            scan(&self.redlock, LockMode::Redlock, limit, &self.patterns),
            self.liveness.live_instances(),
        );
        out.locks.extend(redlock.locks);
        out.nodes.extend(redlock.nodes);
        out.truncated |= redlock.truncated;
        out.live_instances = live.ok();
        for view in &mut out.locks {
            view.decode_with(&self.decoders);
            view.judge_owner(out.live_instances.as_ref());
        }
        out.locks.sort_by(|a, b| {
            a.key
                .cmp(&b.key)
                .then((a.scope as u8).cmp(&(b.scope as u8)))
        });
        out.scan_ms = ms(started);
        out
    }

    /// `lock_keys` on the main Redis and the RedLock nodes, those found on some node judged by
    /// their holders' heartbeats (EXISTS of each holder, never a SCAN of every heartbeat: a
    /// trace stays fast whatever the size of the keyspace). Err when the main Redis is down.
    pub async fn inspect(&self, lock_keys: &[String]) -> Result<InspectedKeys, NodeError> {
        let (mut main, redlock) = tokio::join!(
            fetch(&self.main, LockMode::Single, lock_keys),
            fetch(&self.redlock, LockMode::Redlock, lock_keys),
        );
        if self.main[0].is_cluster() {
            cluster::place(&self.main[0], &mut main).await;
        }
        if let Some(NodeLockState::Unreachable { error }) = main.first().map(|v| &v.nodes[0].state)
        {
            return Err(NodeError {
                node: self.main_node().to_string(),
                problem: error.clone(),
                unreachable: true,
            });
        }
        let mut out = InspectedKeys::default();
        for view in main.into_iter().chain(redlock) {
            for e in view.unreachable() {
                if !out.node_errors.contains(&e) {
                    out.node_errors.push(e);
                }
            }
            if !view.is_free() {
                out.locks.push(view);
            }
        }
        let mut owners: Vec<String> = out
            .locks
            .iter()
            .filter_map(|v| v.holder().map(|h| h.instance.clone()))
            .collect();
        owners.sort();
        owners.dedup();
        let live: Option<BTreeSet<String>> = match self.liveness.are_alive(&owners).await {
            Ok(alive) => Some(
                owners
                    .into_iter()
                    .zip(alive)
                    .filter(|(_, a)| *a)
                    .map(|(o, _)| o)
                    .collect(),
            ),
            Err(_) => None,
        };
        for view in &mut out.locks {
            view.decode_with(&self.decoders);
            view.judge_owner(live.as_ref());
        }
        Ok(out)
    }

    /// GET and PTTL of one key on the main Redis (a trace's fast-path key `idem:{requestId}`);
    /// None when it is not there.
    pub async fn main_value(&self, key: &str) -> Result<Option<(String, i64)>, NodeError> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
        let (value, pttl): (Option<String>, i64) = self.main[0]
            .run(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        Ok(value.map(|v| (v, pttl)))
    }
}
