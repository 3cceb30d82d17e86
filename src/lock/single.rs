//! One Redis node (`lock.mode = "single"`, on `redis.url`): the lock is the key on that node.
//! Fast and simple; it can lose a lock when a replica is promoted without it (seed §6.2) — the
//! database's unique keys and fence check catch what slips through.

use std::sync::Arc;

use super::batch::FenceLife;
use super::node::Node;
use super::scripts::{self, NodeAcquire, NodeRelease, ValueParts};
use super::{Attempt, LockError, NodeHold, Renewal};

pub(crate) async fn attempt(
    node: &Node,
    key: &Arc<str>,
    fence_key: &Arc<str>,
    parts: &ValueParts,
    ttl_ms: u64,
    fence: FenceLife,
) -> Result<Attempt, LockError> {
    match scripts::acquire(node, key, fence_key, parts, ttl_ms, fence).await? {
        NodeAcquire::Granted { fence } => Ok(Attempt::Granted {
            holds: vec![NodeHold::Known(parts.value(fence).into())],
            fence,
        }),
        NodeAcquire::Held { current, pttl_ms } => Ok(Attempt::Contended {
            current: Some(current),
            pttl_ms: Some(pttl_ms),
        }),
    }
}

pub(crate) async fn renew(
    node: &Node,
    key: &Arc<str>,
    holds: &[NodeHold],
    ttl_ms: u64,
    fence: FenceLife,
) -> Renewal {
    let Some(NodeHold::Known(value)) = holds.first() else {
        return Renewal::NotHeld;
    };
    match scripts::renew(node, key, value, ttl_ms, fence).await {
        Ok(true) => Renewal::Renewed,
        Ok(false) => Renewal::NotHeld,
        Err(e) => Renewal::Failed(e.into()),
    }
}

pub(crate) async fn release(
    node: &Node,
    key: &Arc<str>,
    holds: &[NodeHold],
    parts: &ValueParts,
) -> (String, NodeRelease) {
    let outcome = match holds.first() {
        Some(NodeHold::Known(value)) => scripts::release(node, key, value).await,
        Some(NodeHold::Unknown) => scripts::release_by_holder(node, key, parts).await,
        _ => Ok(NodeRelease::NotHeld { current: None }),
    };
    (
        node.addr.clone(),
        outcome.unwrap_or_else(|e| NodeRelease::Unreachable { error: e }),
    )
}
