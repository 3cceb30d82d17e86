//! Instance liveness: each running process keeps `instance:{instanceId}` alive on the main Redis
//! with a short TTL (`instance.heartbeat_ttl`, refreshed every third of it). A lock or a
//! PROCESSING record whose owner has no heartbeat is provably stale: the API layer may reclaim
//! it and the console flags it — instead of guessing from a TTL alone.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::node::Node;
use super::LockError;
use crate::contracts::{keys, now_ms, Instance};

/// The value of `instance:{id}`: who the process is and when it started (compact JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceBeat {
    #[serde(flatten)]
    pub instance: Instance,
    /// Epoch milliseconds.
    pub started_at: i64,
}

/// Heartbeats and liveness questions, on the main Redis (`redis.url`). Cheap to clone.
#[derive(Clone)]
pub struct Liveness {
    node: Arc<Node>,
    ttl: Duration,
}

impl Liveness {
    pub(crate) fn new(node: Arc<Node>, ttl: Duration) -> Liveness {
        Liveness { node, ttl }
    }

    /// Liveness on its own (the console needs no lock service to ask it).
    pub fn from_config(config: &crate::config::Config) -> Result<Liveness, LockError> {
        Ok(Liveness::new(
            Arc::new(Node::open(
                &config.redis.url,
                &super::RedisAccess::of(&config.redis),
            )?),
            config.instance.heartbeat_ttl,
        ))
    }

    pub fn heartbeat_ttl(&self) -> Duration {
        self.ttl
    }

    /// Write one heartbeat now.
    pub async fn beat(&self, beat: &InstanceBeat) -> Result<(), LockError> {
        let value = serde_json::to_string(beat).expect("an InstanceBeat always serializes");
        let ttl_ms = self.ttl.as_millis().max(1) as u64;
        let _: () = self
            .node
            .query(
                redis::cmd("SET")
                    .arg(keys::instance(&beat.instance.id))
                    .arg(value)
                    .arg("PX")
                    .arg(ttl_ms),
            )
            .await?;
        Ok(())
    }

    /// Start this process's heartbeat: the first beat is written before this returns (so a dead
    /// Redis is an error at start), then one every third of the TTL until the [`Heartbeat`] is
    /// stopped or dropped.
    pub async fn start(&self, instance: &Instance) -> Result<Heartbeat, LockError> {
        let beat = InstanceBeat {
            instance: instance.clone(),
            started_at: now_ms(),
        };
        self.beat(&beat).await?;
        let stop = CancellationToken::new();
        let task = {
            let (me, stop) = (self.clone(), stop.clone());
            tokio::spawn(async move {
                let every = (me.ttl / 3).max(Duration::from_millis(1));
                let mut warned = false;
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(every) => {}
                    }
                    match me.beat(&beat).await {
                        Ok(()) => warned = false,
                        Err(e) if !warned => {
                            warned = true;
                            tracing::warn!(instance = %beat.instance.id, "heartbeat failed; this instance looks dead to others until it succeeds: {e}");
                        }
                        Err(_) => {}
                    }
                }
            })
        };
        Ok(Heartbeat {
            liveness: self.clone(),
            instance_id: instance.id.clone(),
            stop,
            task: Some(task),
        })
    }

    /// True while `instance:{instance_id}` exists (its owner beat within one heartbeat TTL).
    pub async fn is_alive(&self, instance_id: &str) -> Result<bool, LockError> {
        let n: i64 = self
            .node
            .query(redis::cmd("EXISTS").arg(keys::instance(instance_id)))
            .await?;
        Ok(n == 1)
    }

    /// Liveness of many instances in one round trip (the console's lock list).
    pub async fn are_alive(&self, instance_ids: &[String]) -> Result<Vec<bool>, LockError> {
        if instance_ids.is_empty() {
            return Ok(Vec::new());
        }
        if self.node.is_cluster() {
            // Heartbeats live in many slots: one EXISTS each, sent at once, routed by key.
            let asked = instance_ids.iter().map(|id| self.is_alive(id));
            return futures::future::join_all(asked).await.into_iter().collect();
        }
        let mut pipe = redis::pipe();
        for id in instance_ids {
            pipe.cmd("EXISTS").arg(keys::instance(id));
        }
        let found: Vec<i64> = self
            .node
            .run(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        Ok(found.into_iter().map(|n| n == 1).collect())
    }

    /// Every instance with a heartbeat (`instance:*`), by SCAN (never KEYS) with the lock
    /// layer's one page size: the console's lock list judges every owner against this set.
    pub async fn live_instances(&self) -> Result<BTreeSet<String>, LockError> {
        if !self.node.is_cluster() {
            return live_on(&self.node).await;
        }
        // A SCAN walks one node: on a cluster, every master.
        let (_, masters) = super::cluster::masters(&self.node).await?;
        let mut live = BTreeSet::new();
        for found in futures::future::join_all(masters.iter().map(|m| live_on(m))).await {
            live.extend(found?);
        }
        Ok(live)
    }

    /// The heartbeat of an instance, if it is alive.
    pub async fn beat_of(&self, instance_id: &str) -> Result<Option<InstanceBeat>, LockError> {
        let raw: Option<String> = self
            .node
            .query(redis::cmd("GET").arg(keys::instance(instance_id)))
            .await?;
        Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
    }
}

/// This process's running heartbeat. Dropping it stops the beats (the key then expires within
/// one heartbeat TTL); [`Heartbeat::stop`] also deletes the key at once.
pub struct Heartbeat {
    liveness: Liveness,
    instance_id: String,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Heartbeat {
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Stop beating and delete `instance:{id}`: a clean shutdown is dead at once.
    pub async fn stop(mut self) -> Result<(), LockError> {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let _: i64 = self
            .liveness
            .node
            .query(redis::cmd("DEL").arg(keys::instance(&self.instance_id)))
            .await?;
        Ok(())
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The instances with a heartbeat on one node, by SCAN (never KEYS) with the lock layer's page.
async fn live_on(node: &Node) -> Result<BTreeSet<String>, LockError> {
    let prefix = keys::instance("");
    let found = super::cluster::scan_all(node, &format!("{prefix}*")).await?;
    Ok(found
        .into_iter()
        .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
        .collect())
}
