//! Redis Cluster (`redis.url = "redis+cluster://…"`): which master holds a key, and a direct
//! connection to each master for what must visit all of them.
//!
//! The cluster client routes a command by its key's slot and follows MOVED/ASK, so the lock
//! operations, heartbeats and the fast path need nothing more than the slot rule: keys a script
//! touches together share a slot (`fence:{key}` carries the lock key as its hash tag), and a
//! batch is split per slot (`batch.rs`). SCAN, though, walks one node's keyspace: listing every
//! lock or heartbeat means a SCAN of every master, each on its own connection, with the same
//! small COUNT as on one node so that no master is held up for other clients.

use std::sync::Arc;

use redis::Value;

use super::node::{Node, NodeError};
use super::SCAN_COUNT;

pub use super::keyslot::keyslot;

/// Which master serves which slots, as the cluster answered `CLUSTER SLOTS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Topology {
    /// (first slot, last slot, master host:port), in the cluster's order.
    pub ranges: Vec<(u16, u16, String)>,
}

impl Topology {
    /// Every master, once, in the order of their first slot range.
    pub fn masters(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut ranges = self.ranges.clone();
        ranges.sort();
        for (_, _, m) in ranges {
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }

    /// host:port of the master serving `slot`.
    pub fn master_of(&self, slot: u16) -> Option<&str> {
        self.ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, m)| m.as_str())
    }

    fn parse(reply: &Value) -> Option<Topology> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut out = Topology::default();
        for r in ranges {
            let Value::Array(parts) = r else { return None };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            out.ranges
                .push((*first as u16, *last as u16, format!("{host}:{port}")));
        }
        Some(out)
    }
}

/// The cluster's slot map, asked of whichever node the cluster client picks.
pub(crate) async fn topology(cluster: &Node) -> Result<Topology, NodeError> {
    let reply: Value = cluster.query(redis::cmd("CLUSTER").arg("SLOTS")).await?;
    Topology::parse(&reply).ok_or_else(|| {
        cluster
            .conn
            .refused(format!("answered CLUSTER SLOTS with {reply:?}"))
    })
}

/// A direct connection to the master at `addr` (same credentials, TLS and database as the
/// seeds), opened once per cluster connection.
pub(crate) fn master(cluster: &Node, addr: &str) -> Result<Arc<Node>, NodeError> {
    if let Some(n) = cluster.masters.lock().expect("masters").get(addr) {
        return Ok(n.clone());
    }
    let seed = match &cluster.conn.target {
        crate::config::RedisTarget::Cluster { seeds } => seeds[0].clone(),
        crate::config::RedisTarget::Single(url) => url.clone(),
    };
    let url = url_for(&seed, addr).ok_or_else(|| {
        cluster
            .conn
            .refused(format!("names a master {addr:?} we cannot reach"))
    })?;
    let mut node = Node::open(&url, &cluster.conn.access)?;
    node.cluster_master = true;
    let node = Arc::new(node);
    cluster
        .masters
        .lock()
        .expect("masters")
        .insert(addr.to_string(), node.clone());
    Ok(node)
}

/// `seed` with its host and port replaced by those of `addr`.
fn url_for(seed: &str, addr: &str) -> Option<String> {
    let (host, port) = addr.rsplit_once(':')?;
    let mut u = url::Url::parse(seed).ok()?;
    u.set_host(Some(host.trim_start_matches('[').trim_end_matches(']')))
        .ok()?;
    u.set_port(Some(port.parse().ok()?)).ok()?;
    Some(u.to_string())
}

/// A direct connection to every master of the cluster, in slot order.
pub(crate) async fn masters(cluster: &Node) -> Result<(Topology, Vec<Arc<Node>>), NodeError> {
    let topo = topology(cluster).await?;
    let nodes = topo
        .masters()
        .iter()
        .map(|m| master(cluster, m))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((topo, nodes))
}

/// Every key matching `pattern` on one node, a page of `SCAN_COUNT` per round trip.
pub(crate) async fn scan_all(node: &Node, pattern: &str) -> Result<Vec<String>, NodeError> {
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, page): (u64, Vec<String>) = node.query(&scan).await?;
        found.extend(page);
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_url_keeps_the_seeds_credentials() {
        assert_eq!(
            url_for("redis://app:pw@127.0.0.1:7001/0", "127.0.0.1:7003").as_deref(),
            Some("redis://app:pw@127.0.0.1:7003/0")
        );
    }

    #[test]
    fn topology_finds_the_master_of_a_slot() {
        let t = Topology {
            ranges: vec![
                (10923, 16383, "h:7003".into()),
                (0, 5460, "h:7001".into()),
                (5461, 10922, "h:7002".into()),
            ],
        };
        assert_eq!(t.masters(), vec!["h:7001", "h:7002", "h:7003"]);
        assert_eq!(t.master_of(5461), Some("h:7002"));
        assert_eq!(t.master_of(16383), Some("h:7003"));
    }
}
