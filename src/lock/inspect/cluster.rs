//! The Locks view on a Redis Cluster: every master scanned on its own connection (SCAN with the
//! page size used on one node, values read per master in pipelines of `FETCH_CHUNK` keys with a
//! pause between two, never one MULTI: a master's keys live in many slots), each lock shown
//! with the master that holds it and its slot. The same patterns and decoders as on one node.
//!
//! A slot can move while the cluster runs (resharding). The cluster client follows MOVED and ASK
//! for one command (the lock scripts), not inside a MULTI: its read of a key is sent again, by
//! hand, to the master the redirect names ([`follow`]).

use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use redis::{RedisError, RedisResult, ServerErrorKind, Value};

use super::scan::{answers, fetch_node, key_reads, read_key_chunk, scan_patterns};
use super::{ms, KeyAnswer, LockScan, LockView, NodeLock, NodeScan};
use crate::config::LockMode;
use crate::contracts::now_ms;
use crate::lock::cluster::{self, keyslot, Topology};
use crate::lock::node::{Node, NodeError};

/// What one master answered: its keys and their states, or why not.
type MasterAnswer = Result<(Vec<String>, bool, Vec<KeyAnswer>), NodeError>;

/// Every key matching `patterns` on every master of the cluster (up to `limit` per master and
/// pattern), each as its master holds it. A master that is down is a failed node row; the
/// others are still listed.
pub(super) async fn scan(cluster: &Node, limit: usize, patterns: &[String]) -> LockScan {
    let started = Instant::now();
    let read_at_ms = now_ms();
    let masters = match cluster::masters(cluster).await {
        Ok((_, masters)) => masters,
        Err(e) => return LockScan::failed(cluster.addr.clone(), "cluster", e.to_string()),
    };
    // One master after the other, not all at once: each master then carries no more of the
    // scan than one node does, and a master sharing cores with the others (or with the reader)
    // keeps answering its other clients (measured: `benches/cluster_scan.rs`).
    let mut answers = Vec::with_capacity(masters.len());
    for m in &masters {
        let t = Instant::now();
        answers.push((read_master(m, limit, patterns).await, ms(t)));
    }
    let mut out = LockScan {
        read_at_ms,
        ..LockScan::default()
    };
    for (m, (answer, scan_ms)) in masters.iter().zip(answers) {
        let (ok, error, found) = match answer {
            Ok((keys, more, states)) => {
                out.truncated |= more;
                let n = keys.len();
                out.locks.extend(views(m, keys, states, read_at_ms));
                (true, None, n)
            }
            Err(e) => (false, Some(e.to_string()), 0),
        };
        out.nodes.push(NodeScan {
            node: m.addr.clone(),
            role: "cluster",
            ok,
            error,
            keys: found,
            scan_ms,
        });
    }
    out.scan_ms = ms(started);
    out
}

async fn read_master(master: &Arc<Node>, limit: usize, patterns: &[String]) -> MasterAnswer {
    let (mut keys, more) = scan_patterns(master, patterns, limit).await?;
    keys.sort();
    keys.dedup();
    let states = fetch_node(master, &keys).await?;
    Ok((keys, more, states))
}

fn views(
    master: &Node,
    keys: Vec<String>,
    states: Vec<KeyAnswer>,
    at: i64,
) -> impl Iterator<Item = LockView> + '_ {
    keys.into_iter()
        .zip(states)
        .map(move |(key, (state, fence, denied))| {
            let node = NodeLock {
                node: master.addr.clone(),
                state,
            };
            let slot = keyslot(&key);
            let mut view = LockView::read(key, LockMode::Single, vec![(node, fence, denied)], at);
            view.slot = Some(slot);
            view
        })
}

/// Name each view's node by the master that serves its slot (read through the cluster
/// client, the views name the cluster).
pub(super) async fn place(cluster: &Node, views: &mut [LockView]) {
    let topo = cluster::topology(cluster).await.unwrap_or_default();
    for view in views {
        place_one(&topo, view);
    }
}

fn place_one(topo: &Topology, view: &mut LockView) {
    let slot = keyslot(&view.key);
    view.slot = Some(slot);
    if let Some(master) = topo.master_of(slot) {
        for n in &mut view.nodes {
            n.node = master.to_string();
        }
    }
}

/// host:port of the master serving `key` (the cluster's name when the map cannot be read).
pub(in crate::lock) async fn master_of(cluster: &Node, key: &str) -> String {
    match cluster::topology(cluster).await {
        Ok(topo) => topo
            .master_of(keyslot(key))
            .map_or_else(|| cluster.addr.clone(), str::to_string),
        Err(_) => cluster.addr.clone(),
    }
}

/// `keys` read through the cluster client one key at a time (each with its fence counter in
/// one MULTI: they share a slot), all sent at once.
pub(super) async fn fetch_each(
    cluster: &Node,
    keys: &[String],
) -> Result<Vec<KeyAnswer>, NodeError> {
    let reads = keys.iter().map(|k| async move {
        let one = std::slice::from_ref(k);
        Ok::<_, NodeError>(answers(&read_key_chunk(cluster, one).await?))
    });
    let mut out = Vec::with_capacity(keys.len());
    for r in join_all(reads).await {
        out.extend(r?);
    }
    Ok(out)
}

/// What a key read answered: its values, or where a MOVED / ASK sent it.
pub(super) enum Read {
    Values(Vec<Value>),
    SentTo { addr: String, ask: bool },
}

/// `answer` as a [`Read`]: a MULTI aborted by MOVED or ASK (on a cluster only: `on_cluster`)
/// names the master to ask instead.
pub(super) fn redirected(answer: RedisResult<Vec<Value>>, on_cluster: bool) -> RedisResult<Read> {
    let e = match answer {
        Ok(values) => return Ok(Read::Values(values)),
        Err(e) => e,
    };
    let to = e
        .clone()
        .into_server_errors()
        .and_then(|errs| errs.first().map(|(_, se)| RedisError::from(se.clone())))
        .and_then(|first| {
            let ask = first.kind() == redis::ErrorKind::Server(ServerErrorKind::Ask);
            first
                .redirect_node()
                .map(|(addr, _)| (addr.to_string(), ask))
        });
    match to {
        Some((addr, ask)) if on_cluster => Ok(Read::SentTo { addr, ask }),
        _ => Err(e),
    }
}

fn is_moved(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::Moved))
}

/// The values of `chunk` (see `read_chunk`), following the cluster: a read sent away by MOVED
/// or ASK runs again on that master (after ASKING for an ASK); keys a master reached directly
/// found by SCAN but answers MOVED for are in a slot it is importing: read again with ASKING.
pub(super) async fn follow(
    node: &Node,
    chunk: &[String],
    atomic: bool,
    read: Read,
) -> Result<Vec<Value>, NodeError> {
    match read {
        Read::Values(values) if node.cluster_master && values.iter().any(is_moved) => {
            read_on(node, chunk, false, true).await
        }
        Read::Values(values) => Ok(values),
        Read::SentTo { addr, ask } => {
            let master = cluster::master(node, &addr)?;
            read_on(&master, chunk, atomic, ask).await
        }
    }
}

/// `chunk` read on `master` directly, in one MULTI when `atomic`. With `ask`, ASKING goes
/// first: a master importing a slot serves its keys only to a client that says it was sent
/// (before MULTI, it holds for the whole transaction; otherwise it is needed per command).
async fn read_on(
    master: &Node,
    chunk: &[String],
    atomic: bool,
    ask: bool,
) -> Result<Vec<Value>, NodeError> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    if atomic {
        if ask {
            pipe.cmd("ASKING").ignore();
        }
        pipe.cmd("MULTI").ignore();
        for cmd in key_reads(chunk) {
            pipe.add_command(cmd).ignore();
        }
        pipe.cmd("EXEC");
    } else {
        for cmd in key_reads(chunk) {
            if ask {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(cmd);
        }
    }
    let mut values: Vec<Value> = master
        .run(|mut c| async move { pipe.query_async(&mut c).await })
        .await?;
    if !atomic {
        return Ok(values);
    }
    match values.pop() {
        Some(Value::Array(values)) => Ok(values),
        other => Err(master.conn.refused(format!(
            "answered the read of {} key(s) with {other:?}",
            chunk.len()
        ))),
    }
}
