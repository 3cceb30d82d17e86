//! The Lua scripts of the lock layer (`queries/redis/*.lua`, compiled in) and their calls on one
//! node. Each script is one atomic step on the server: no other client's command can run between
//! its GET and its SET/DEL/PEXPIRE, which is the whole point.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::node::{Node, NodeError};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../queries/redis/acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../queries/redis/release.lua")));
static RELEASE_BY_HOLDER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../queries/redis/release_by_holder.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../queries/redis/renew.lua")));
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../queries/redis/raise_fence.lua")));

/// A holder's value cut around its fence number: `head` + fence + `tail`. The script that takes
/// the lock learns the fence only on the server, so it writes the value from these two parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueParts {
    pub head: String,
    pub tail: String,
}

impl ValueParts {
    /// Cut the compact JSON of `holder` (its fence is ignored) around the fence number.
    pub fn of(holder: &crate::contracts::LockHolder) -> ValueParts {
        let mut h = holder.clone();
        h.fence = 0;
        let json = h.to_value();
        // Strings in the JSON have their quotes escaped, so this marker can only be the field.
        const MARKER: &str = "\"fence\":0,\"nonce\":";
        let at = json.find(MARKER).expect("a LockHolder's JSON has its fence before its nonce");
        let digit = at + "\"fence\":".len();
        ValueParts { head: json[..digit].to_string(), tail: json[digit + 1..].to_string() }
    }

    pub fn value(&self, fence: i64) -> String {
        format!("{}{}{}", self.head, fence, self.tail)
    }
}

/// What one node answered to an acquire.
#[derive(Debug, Clone)]
pub(crate) enum NodeAcquire {
    Granted { fence: i64, value: String },
    Held { current: String, pttl_ms: i64 },
}

/// What one node answered to a compare-and-delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRelease {
    /// Our value was there and is deleted.
    Deleted,
    /// Our value was not there: nothing deleted. `current` is what the key holds instead
    /// (None: expired or deleted).
    NotHeld { current: Option<String> },
    /// The node did not answer; its copy (if any) expires with its TTL.
    Unreachable { error: String },
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

fn unexpected(node: &Node, what: &str, v: &Value) -> NodeError {
    NodeError { node: node.addr.clone(), problem: format!("answered the {what} script with an unexpected reply {v:?}") }
}

pub(crate) async fn acquire(node: &Node, key: &str, fence_key: &str, parts: &ValueParts, ttl_ms: u64) -> Result<NodeAcquire, NodeError> {
    let mut inv = ACQUIRE.prepare_invoke();
    inv.key(key).key(fence_key).arg(&parts.head).arg(&parts.tail).arg(ttl_ms);
    let reply: Value = node.invoke(&inv).await?;
    match &reply {
        Value::Array(items) if items.len() >= 2 && int(&items[0]) == Some(1) => {
            let fence = int(&items[1]).ok_or_else(|| unexpected(node, "acquire", &reply))?;
            Ok(NodeAcquire::Granted { fence, value: parts.value(fence) })
        }
        Value::Array(items) if !items.is_empty() && int(&items[0]) == Some(0) => Ok(NodeAcquire::Held {
            current: items.get(1).and_then(text).unwrap_or_default(),
            pttl_ms: items.get(2).and_then(int).unwrap_or(-2),
        }),
        _ => Err(unexpected(node, "acquire", &reply)),
    }
}

fn release_reply(node: &Node, reply: &Value) -> Result<NodeRelease, NodeError> {
    match reply {
        Value::Array(items) if int(items.first().unwrap_or(&Value::Nil)) == Some(1) => Ok(NodeRelease::Deleted),
        Value::Array(items) if int(items.first().unwrap_or(&Value::Nil)) == Some(0) => {
            Ok(NodeRelease::NotHeld { current: items.get(1).and_then(text) })
        }
        _ => Err(unexpected(node, "release", reply)),
    }
}

/// Compare-and-delete of an exact value: `DELEX key IFEQ value` where the server has it,
/// else the Lua script.
pub(crate) async fn release(node: &Node, key: &str, value: &str) -> Result<NodeRelease, NodeError> {
    if node.has_delex() {
        let deleted: i64 = node.query(redis::cmd("DELEX").arg(key).arg("IFEQ").arg(value)).await?;
        if deleted == 1 {
            return Ok(NodeRelease::Deleted);
        }
        let current: Option<String> = node.query(redis::cmd("GET").arg(key)).await?;
        return Ok(NodeRelease::NotHeld { current });
    }
    let mut inv = RELEASE.prepare_invoke();
    inv.key(key).arg(value);
    let reply: Value = node.invoke(&inv).await?;
    release_reply(node, &reply)
}

/// Compare-and-delete of our value whatever fence number the node wrote into it.
pub(crate) async fn release_by_holder(node: &Node, key: &str, parts: &ValueParts) -> Result<NodeRelease, NodeError> {
    let mut inv = RELEASE_BY_HOLDER.prepare_invoke();
    inv.key(key).arg(&parts.head).arg(&parts.tail);
    let reply: Value = node.invoke(&inv).await?;
    release_reply(node, &reply)
}

/// Compare-and-PEXPIRE. True when renewed.
pub(crate) async fn renew(node: &Node, key: &str, value: &str, ttl_ms: u64) -> Result<bool, NodeError> {
    let mut inv = RENEW.prepare_invoke();
    inv.key(key).arg(value).arg(ttl_ms);
    let renewed: i64 = node.invoke(&inv).await?;
    Ok(renewed == 1)
}

/// Raise `fence:{key}` to at least `to`; returns the counter afterwards.
pub(crate) async fn raise_fence(node: &Node, fence_key: &str, to: i64) -> Result<i64, NodeError> {
    let mut inv = RAISE_FENCE.prepare_invoke();
    inv.key(fence_key).arg(to);
    node.invoke(&inv).await
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
            let want = LockHolder { fence, ..holder.clone() };
            assert_eq!(parts.value(fence), want.to_value());
            assert_eq!(LockHolder::from_value(&parts.value(fence)), Some(want));
        }
    }
}
