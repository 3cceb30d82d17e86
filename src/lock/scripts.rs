//! The lock operations on one node, as the rest of the layer calls them. Each is one function of
//! `queries/redis/lock.lua` — one atomic step on the server: no other client's command runs
//! between its GET and its SET/DEL/PEXPIRE, which is the whole point — sent through the node's
//! coalescing queue ([`super::batch`]).

use std::sync::Arc;

use redis::Value;

use super::batch::{FenceLife, Op};
use super::node::{Node, NodeError};

/// A holder's value cut around its fence number: `head` + fence + `tail`. The script that takes
/// the lock learns the fence only on the server, so it writes the value from these two parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueParts {
    pub head: Arc<str>,
    pub tail: Arc<str>,
}

impl ValueParts {
    /// Cut the compact JSON of `holder` (its fence is ignored) around the fence number.
    pub fn of(holder: &crate::contracts::LockHolder) -> ValueParts {
        let mut h = holder.clone();
        h.fence = 0;
        let json = h.to_value();
        // Strings in the JSON have their quotes escaped, so this marker can only be the field.
        const MARKER: &str = "\"fence\":0,\"nonce\":";
        let at = json
            .find(MARKER)
            .expect("a LockHolder's JSON has its fence before its nonce");
        let digit = at + "\"fence\":".len();
        ValueParts {
            head: Arc::from(&json[..digit]),
            tail: Arc::from(&json[digit + 1..]),
        }
    }

    pub fn value(&self, fence: i64) -> String {
        format!("{}{}{}", self.head, fence, self.tail)
    }
}

/// What one node answered to an acquire.
#[derive(Debug, Clone)]
pub(crate) enum NodeAcquire {
    Granted { fence: i64 },
    Held { current: String, pttl_ms: i64 },
}

/// What one node answered to a compare-and-delete.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeRelease {
    /// Our value was there and is deleted.
    Deleted,
    /// Our value was not there: nothing deleted. `current` is what the key holds instead
    /// (None: expired or deleted).
    NotHeld { current: Option<String> },
    /// The node did not answer (or refused the operation); its copy, if any, expires with its
    /// TTL.
    Unreachable { error: NodeError },
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other).and_then(|s| s.parse().ok()),
    }
}

/// The reply of one operation: an error of this operation alone is `{-1, message}`.
async fn submit(node: &Node, what: &str, op: Op) -> Result<Value, NodeError> {
    let reply = node.submit(op).await?;
    if let Value::Array(items) = &reply {
        if items.first().and_then(int) == Some(-1) {
            let message = items.get(1).and_then(text).unwrap_or_default();
            return Err(node
                .conn
                .refused(format!("refused the {what} operation: {message}")));
        }
    }
    Ok(reply)
}

fn unexpected(node: &Node, what: &str, v: &Value) -> NodeError {
    node.conn.refused(format!(
        "answered the {what} operation with an unexpected reply {v:?}"
    ))
}

pub(crate) async fn acquire(
    node: &Node,
    key: &Arc<str>,
    fence_key: &Arc<str>,
    parts: &ValueParts,
    ttl_ms: u64,
    fence: FenceLife,
) -> Result<NodeAcquire, NodeError> {
    let op = Op::Acquire {
        key: key.clone(),
        fence_key: fence_key.clone(),
        head: parts.head.clone(),
        tail: parts.tail.clone(),
        ttl_ms,
        fence,
    };
    let reply = submit(node, "acquire", op).await?;
    match &reply {
        Value::Array(items) if items.len() >= 2 && int(&items[0]) == Some(1) => {
            let fence = int(&items[1]).ok_or_else(|| unexpected(node, "acquire", &reply))?;
            Ok(NodeAcquire::Granted { fence })
        }
        Value::Array(items) if !items.is_empty() && int(&items[0]) == Some(0) => {
            Ok(NodeAcquire::Held {
                current: items.get(1).and_then(text).unwrap_or_default(),
                pttl_ms: items.get(2).and_then(int).unwrap_or(-2),
            })
        }
        _ => Err(unexpected(node, "acquire", &reply)),
    }
}

fn release_reply(node: &Node, reply: &Value) -> Result<NodeRelease, NodeError> {
    match reply {
        Value::Array(items) if items.first().and_then(int) == Some(1) => Ok(NodeRelease::Deleted),
        Value::Array(items) if items.first().and_then(int) == Some(0) => Ok(NodeRelease::NotHeld {
            current: items.get(1).and_then(text),
        }),
        _ => Err(unexpected(node, "release", reply)),
    }
}

/// Compare-and-delete of an exact value (`DELEX key IFEQ value` where the server has it).
pub(crate) async fn release(
    node: &Node,
    key: &Arc<str>,
    value: &Arc<str>,
) -> Result<NodeRelease, NodeError> {
    let reply = submit(
        node,
        "release",
        Op::Release {
            key: key.clone(),
            value: value.clone(),
        },
    )
    .await?;
    release_reply(node, &reply)
}

/// Compare-and-delete of our value whatever fence number the node wrote into it.
pub(crate) async fn release_by_holder(
    node: &Node,
    key: &Arc<str>,
    parts: &ValueParts,
) -> Result<NodeRelease, NodeError> {
    let op = Op::ReleaseByHolder {
        key: key.clone(),
        head: parts.head.clone(),
        tail: parts.tail.clone(),
    };
    let reply = submit(node, "release", op).await?;
    release_reply(node, &reply)
}

/// Compare-and-PEXPIRE (the fence counter is kept alive with the lock). True when renewed.
pub(crate) async fn renew(
    node: &Node,
    key: &Arc<str>,
    value: &Arc<str>,
    ttl_ms: u64,
    fence: FenceLife,
) -> Result<bool, NodeError> {
    let fence_key: Arc<str> = crate::contracts::keys::fence(key).into();
    let reply = submit(
        node,
        "renew",
        Op::Renew {
            key: key.clone(),
            fence_key,
            value: value.clone(),
            ttl_ms,
            fence,
        },
    )
    .await?;
    int(&reply)
        .map(|n| n == 1)
        .ok_or_else(|| unexpected(node, "renew", &reply))
}

/// Raise `fence:{key}` to at least `at_least`, kept `keep_ms` more; returns the counter
/// afterwards.
pub(crate) async fn raise_fence(
    node: &Node,
    fence_key: &Arc<str>,
    at_least: i64,
    keep_ms: u64,
) -> Result<i64, NodeError> {
    let reply = submit(
        node,
        "raise_fence",
        Op::RaiseFence {
            fence_key: fence_key.clone(),
            at_least,
            keep_ms,
        },
    )
    .await?;
    int(&reply).ok_or_else(|| unexpected(node, "raise_fence", &reply))
}

/// The next token of `fence:{key}`, seeded like an acquisition's when the counter is gone.
pub(crate) async fn bump_fence(
    node: &Node,
    fence_key: &Arc<str>,
    fence: FenceLife,
) -> Result<i64, NodeError> {
    let reply = submit(
        node,
        "bump_fence",
        Op::BumpFence {
            fence_key: fence_key.clone(),
            fence,
        },
    )
    .await?;
    int(&reply).ok_or_else(|| unexpected(node, "bump_fence", &reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::LockHolder;

    #[test]
    fn value_parts_rebuild_the_holder_json_with_any_fence() {
        let holder = LockHolder {
            instance: "h-1-\"fence\":0,\"nonce\":-x".into(),
            host: "h".into(),
            pid: 1,
            acquired_at: 1_700_000_000_000,
            ttl_ms: 30_000,
            fence: 0,
            nonce: "n\"fence\":0,".into(),
        };
        let parts = ValueParts::of(&holder);
        for fence in [1_i64, 42, 9_007_199_254_740_993] {
            let want = LockHolder {
                fence,
                ..holder.clone()
            };
            assert_eq!(parts.value(fence), want.to_value());
            assert_eq!(LockHolder::from_value(&parts.value(fence)), Some(want));
        }
    }
}
