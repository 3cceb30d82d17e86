//! The Redis side of one trace, read through the lock layer's inspection API
//! ([`LockInspector`]): `lock:order:…` and `lock:req:…` on the main Redis and the RedLock nodes
//! (with their fence counters and their holders' heartbeats), and the fast-path key `idem:…`.
//! The full lock list is [`LockInspector::scan`]; a lock is a [`crate::lock::LockView`]
//! everywhere. Read-only: nothing here writes.

use serde::Serialize;

use crate::contracts::{keys, now_ms};
use crate::lock::{LockInspector, LockView};

/// Keys listed per node by the console and `idemguard locks`: the scan stops there and says it
/// is truncated, so a keyspace of millions of locks cannot exhaust the console.
pub const LOCK_LIST_LIMIT: usize = 1_000_000;

/// One key of a trace as read from the main Redis.
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
    pub locks: Vec<LockView>,
    /// `idem:{requestId}` on the main Redis, when present.
    pub fast_path: Option<TraceKey>,
    pub node_errors: Vec<String>,
}

/// Reads `lock:order:{orderNo}`, `lock:req:{requestId}` (main and RedLock nodes), their fence
/// counters and `idem:{requestId}`. Err when the main Redis cannot be read.
pub async fn trace_keys(
    inspector: &LockInspector,
    order_no: Option<&str>,
    request_id: Option<&str>,
) -> anyhow::Result<TraceKeys> {
    let read_at_ms = now_ms();
    let mut lock_keys = Vec::new();
    lock_keys.extend(order_no.map(keys::order_lock));
    lock_keys.extend(request_id.map(keys::request_lock));
    let inspected = inspector.inspect(&lock_keys).await?;
    let mut fast_path = None;
    if let Some(rid) = request_id {
        let key = keys::idempotency_fast_path(rid);
        if let Some((value, pttl_ms)) = inspector.main_value(&key).await? {
            fast_path = Some(TraceKey {
                key,
                node: inspector.main_node().to_string(),
                value,
                pttl_ms,
                read_at_ms,
            });
        }
    }
    Ok(TraceKeys {
        locks: inspected.locks,
        fast_path,
        node_errors: inspected.node_errors,
    })
}
