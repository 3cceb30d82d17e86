//! Lock formats of systems idemguard did not build: a team's Redis holds locks
//! written by Redisson's `RLock`, by `setIfAbsent(lockKey, requestId, 30s)` (the article's
//! §3.2), by redis-py's `Lock` or by redsync / node-redlock. Each format is one decoder; the
//! configuration (`foreign_locks.decoders`) says which are tried, in which order, and
//! `foreign_locks.patterns` which keys are locks at all.
//!
//! Why a release of a foreign lock is its own script: a Redisson lock is a hash whose one field
//! `<clientId>:<threadId>` holds the reentrancy count. Deleting it while its holder re-entered
//! (count 2) or another thread took it (another field) would break the holder's mutual
//! exclusion, so `redisson_release.lua` deletes only while the hash holds exactly the field and
//! count the operator saw — and publishes Redisson's unlock message, without which the waiting
//! clients sleep until their own timeout.

use std::sync::Arc;

use redis::Value;
use serde::Serialize;

use super::node::{Node, NodeError};
use super::NodeRelease;
pub use crate::config::Decoder;
use crate::contracts::LockHolder;

/// The release script of a Redisson lock (compare field and count, delete, publish).
const REDISSON_RELEASE: &str = include_str!("../../queries/redis/redisson_release.lua");

/// Redisson's `LockPubSub.UNLOCK_MESSAGE` (a Long 0, sent as text by its LongCodec).
pub const REDISSON_UNLOCK_MESSAGE: &str = "0";

/// What a lock key holds, as the first decoder that recognised it reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LockFormat {
    /// idemguard's JSON holder value (the view's `holder`).
    Idemguard,
    /// A Redisson `RLock`: hash field `<client_id>:<thread_id>` = `count`.
    Redisson {
        client_id: String,
        thread_id: String,
        /// Reentrancy count: how many times the thread took it without releasing.
        count: i64,
        /// What a release compares: `<field>=<count>`.
        seen: String,
    },
    /// A plain string token (UUID, hex, random string), shown raw.
    Token {
        token: String,
        /// `uuid`, `hex` or `random`.
        shape: &'static str,
        /// The request the token names, when it equals a requestId the database knows (the
        /// article's §3.2 lock stores the requestId).
        #[serde(skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        /// That request's order, when the order table has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        order_no: Option<String>,
    },
    /// No decoder recognised it: listed with its type and TTL only.
    Unknown,
}

impl LockFormat {
    pub fn name(&self) -> &'static str {
        match self {
            LockFormat::Idemguard => "idemguard",
            LockFormat::Redisson { .. } => "redisson",
            LockFormat::Token { .. } => "token",
            LockFormat::Unknown => "unknown",
        }
    }

    /// A lock idemguard did not write: no fence token, no owner heartbeat.
    pub fn is_foreign(&self) -> bool {
        !matches!(self, LockFormat::Idemguard)
    }
}

/// The first format in `order` that reads a key of `redis_type` holding `value` (a string) or
/// `fields` (a hash).
pub fn decode(
    redis_type: &str,
    value: Option<&str>,
    fields: &[(String, String)],
    order: &[Decoder],
) -> LockFormat {
    for d in order {
        let found = match (d, redis_type, value) {
            (Decoder::Idemguard, "string", Some(v)) => {
                LockHolder::from_value(v).map(|_| LockFormat::Idemguard)
            }
            (Decoder::Token, "string", Some(v)) => token(v),
            (Decoder::Redisson, "hash", _) => redisson(fields),
            _ => None,
        };
        if let Some(f) = found {
            return f;
        }
    }
    LockFormat::Unknown
}

/// One field `<clientId>:<threadId>` (a thread id is a number) holding a count ≥ 1.
fn redisson(fields: &[(String, String)]) -> Option<LockFormat> {
    let [(field, count)] = fields else {
        return None;
    };
    let (client_id, thread_id) = field.rsplit_once(':')?;
    let count: i64 = count.parse().ok()?;
    let numeric = !thread_id.is_empty() && thread_id.bytes().all(|b| b.is_ascii_digit());
    (numeric && !client_id.is_empty() && count >= 1).then(|| LockFormat::Redisson {
        client_id: client_id.to_string(),
        thread_id: thread_id.to_string(),
        count,
        seen: redisson_seen(field, count),
    })
}

/// What an operator saw of a Redisson lock, as the release compares it.
pub fn redisson_seen(field: &str, count: i64) -> String {
    format!("{field}={count}")
}

/// `<field>=<count>` back into its parts.
pub fn parse_redisson_seen(seen: &str) -> Option<(&str, i64)> {
    let (field, count) = seen.rsplit_once('=')?;
    Some((field, count.parse().ok()?))
}

/// A token: 8 to 256 printable characters without spaces, the way lock clients write them.
fn token(v: &str) -> Option<LockFormat> {
    let printable = v.bytes().all(|b| b.is_ascii_graphic());
    if !(8..=256).contains(&v.len()) || !printable {
        return None;
    }
    // Hyphenated only: redis-py's token is a UUID's 32 bare hex digits, and reads as hex.
    let shape = if v.len() == 36 && uuid::Uuid::try_parse(v).is_ok() {
        "uuid"
    } else if v.bytes().all(|b| b.is_ascii_hexdigit()) {
        "hex"
    } else {
        "random"
    };
    Some(LockFormat::Token {
        token: v.to_string(),
        shape,
        request_id: None,
        order_no: None,
    })
}

/// Redisson's channel of a lock: `redisson_lock__channel:{name}` (a name that already has a
/// hash tag keeps it).
pub fn redisson_channel(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock__channel:{name}")
    } else {
        format!("redisson_lock__channel:{{{name}}}")
    }
}

/// The placeholders a lock pattern may name: where the key carries the orderNo or requestId
/// (`order:lock:{orderNo}`). Scanned as `*`; a trace reads the key with the ID put in.
pub const ORDER_NO: &str = "{orderNo}";
pub const REQUEST_ID: &str = "{requestId}";

/// A pattern as SCAN MATCH takes it: each placeholder a `*`.
pub fn scan_glob(pattern: &str) -> String {
    pattern.replace(ORDER_NO, "*").replace(REQUEST_ID, "*")
}

/// What a trace can read of one lock pattern for its IDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceKeyOf {
    /// The key of this order or request.
    Key(String),
    /// The pattern names an ID the trace has not resolved (which one).
    NeedsId(&'static str),
    /// The pattern names no ID: no key of this order can be derived from it (why).
    NoId(String),
}

/// The key `pattern` gives for `order_no` / `request_id`. A pattern without a placeholder is
/// never guessed into a key: `order:lock:*` could hold any ID, and a fixed name (a Redisson
/// lock's own) is one lock for every order.
pub fn trace_key_of(pattern: &str, order_no: Option<&str>, request_id: Option<&str>) -> TraceKeyOf {
    let (has_order, has_req) = (pattern.contains(ORDER_NO), pattern.contains(REQUEST_ID));
    if !has_order && !has_req {
        let why = if pattern.contains(['*', '?', '[']) {
            format!(
                "lock pattern `{pattern}` does not say where the orderNo or requestId is: write \
                 its place as {ORDER_NO} or {REQUEST_ID} (e.g. `order:lock:{ORDER_NO}`) to see \
                 its lock in a trace"
            )
        } else {
            format!(
                "lock pattern `{pattern}` is one fixed key, not an order's: not read by a trace"
            )
        };
        return TraceKeyOf::NoId(why);
    }
    let mut key = pattern.to_string();
    for (place, id, name) in [
        (ORDER_NO, order_no, "orderNo"),
        (REQUEST_ID, request_id, "requestId"),
    ] {
        if key.contains(place) {
            match id {
                Some(id) => key = key.replace(place, id),
                None => return TraceKeyOf::NeedsId(name),
            }
        }
    }
    if key.contains(['*', '?', '[']) {
        return TraceKeyOf::NoId(format!(
            "lock pattern `{pattern}` keeps a wildcard besides its ID: not read by a trace"
        ));
    }
    TraceKeyOf::Key(key)
}

/// (orderNo, requestId) a key of `pattern` names, when the pattern has one placeholder between
/// literal text (`order:lock:{orderNo}` and `order:lock:42` → orderNo 42).
pub fn ids_of_key(pattern: &str, key: &str) -> (Option<String>, Option<String>) {
    for (place, is_order) in [(ORDER_NO, true), (REQUEST_ID, false)] {
        let Some((prefix, suffix)) = pattern.split_once(place) else {
            continue;
        };
        let literal = |s: &str| !s.contains(['*', '?', '[', '{']);
        if !literal(prefix) || !literal(suffix) {
            continue;
        }
        let id = key
            .strip_prefix(prefix)
            .and_then(|k| k.strip_suffix(suffix))
            .filter(|id| !id.is_empty());
        if let Some(id) = id {
            let id = Some(id.to_string());
            return if is_order { (id, None) } else { (None, id) };
        }
    }
    (None, None)
}

/// Redis glob matching of `key` against `pattern` (`*` and `?`; what SCAN MATCH lists), so a
/// release accepts exactly the keys the Locks view lists.
pub fn matches(pattern: &str, key: &str) -> bool {
    let pattern = scan_glob(pattern);
    fn go(p: &[u8], k: &[u8]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((b'*', rest)) => (0..=k.len()).any(|i| go(rest, &k[i..])),
            Some((b'?', rest)) => !k.is_empty() && go(rest, &k[1..]),
            Some((c, rest)) => k.first() == Some(c) && go(rest, &k[1..]),
        }
    }
    go(pattern.as_bytes(), key.as_bytes())
}

pub(super) async fn redisson_release(
    node: &Arc<Node>,
    key: &str,
    field: &str,
    count: i64,
) -> Result<NodeRelease, NodeError> {
    let script = redis::Script::new(REDISSON_RELEASE);
    let mut call = script.prepare_invoke();
    call.key(key)
        .key(redisson_channel(key))
        .arg(field)
        .arg(count)
        .arg(REDISSON_UNLOCK_MESSAGE);
    let answer: Value = node
        .run(|mut c| async move { call.invoke_async(&mut c).await })
        .await?;
    Ok(match answer {
        Value::Array(a) if matches!(a.first(), Some(Value::Int(1))) => NodeRelease::Deleted,
        Value::Array(a) => NodeRelease::NotHeld {
            current: a.get(1).and_then(|v| match v {
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            }),
        },
        _ => NodeRelease::NotHeld { current: None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(f: &str, c: &str) -> Vec<(String, String)> {
        vec![(f.to_string(), c.to_string())]
    }

    #[test]
    fn a_redisson_hash_names_client_thread_and_count() {
        let f = decode("hash", None, &fields("8d3e-11:57", "2"), &Decoder::ALL);
        assert_eq!(f.name(), "redisson");
        let LockFormat::Redisson {
            client_id,
            thread_id,
            count,
            seen,
        } = f
        else {
            unreachable!()
        };
        assert_eq!(
            (client_id.as_str(), thread_id.as_str(), count),
            ("8d3e-11", "57", 2)
        );
        assert_eq!(parse_redisson_seen(&seen), Some(("8d3e-11:57", 2)));
    }

    #[test]
    fn the_configured_order_and_set_decide() {
        let uuid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        assert_eq!(
            decode("string", Some(uuid), &[], &Decoder::ALL).name(),
            "token"
        );
        assert_eq!(
            decode("string", Some(uuid), &[], &[Decoder::Idemguard]).name(),
            "unknown"
        );
        assert_eq!(
            decode("hash", None, &fields("c:1", "1"), &[Decoder::Token]).name(),
            "unknown"
        );
        assert_eq!(
            decode("hash", None, &fields("c:x", "1"), &Decoder::ALL).name(),
            "unknown"
        );
    }

    #[test]
    fn a_pattern_gives_a_trace_key_only_where_it_names_the_id() {
        let key = |p| trace_key_of(p, Some("O1"), None);
        assert_eq!(
            key("order:lock:{orderNo}"),
            TraceKeyOf::Key("order:lock:O1".into())
        );
        assert_eq!(
            key("lock:req:{requestId}"),
            TraceKeyOf::NeedsId("requestId")
        );
        assert!(matches!(key("order:lock:*"), TraceKeyOf::NoId(w) if w.contains("{orderNo}")));
        assert!(matches!(key("myLock"), TraceKeyOf::NoId(w) if w.contains("fixed")));
        assert!(matches!(key("a:*:{orderNo}"), TraceKeyOf::NoId(w) if w.contains("wildcard")));
        assert_eq!(scan_glob("x:{orderNo}:{requestId}"), "x:*:*");
        assert!(matches("order:lock:{orderNo}", "order:lock:42"));
        assert_eq!(
            ids_of_key("order:lock:{orderNo}", "order:lock:42"),
            (Some("42".into()), None)
        );
        assert_eq!(
            ids_of_key("{requestId}:lock", "r-9:lock"),
            (None, Some("r-9".into()))
        );
        assert_eq!(ids_of_key("order:lock:{orderNo}", "other:1"), (None, None));
    }

    #[test]
    fn channel_and_glob_follow_redisson_and_redis() {
        assert_eq!(redisson_channel("a"), "redisson_lock__channel:{a}");
        assert_eq!(redisson_channel("{a}:b"), "redisson_lock__channel:{a}:b");
        assert!(matches("order:lock:*", "order:lock:42"));
        assert!(matches("myLock", "myLock"));
        assert!(!matches("lock:*", "order:lock:1"));
        assert!(matches("l?ck:*", "lock:"));
    }
}
