//! The Redis side of one trace, read through the lock layer's inspection API
//! ([`LockInspector`]): `lock:order:…` and `lock:req:…` on the main Redis and the RedLock nodes
//! (with their fence counters and their holders' heartbeats), the keys a team's
//! `foreign_locks.patterns` give for the order and request (`order:lock:{orderNo}`), and the
//! fast-path key `idem:…`. The full lock list is [`LockInspector::scan`]; a lock is a
//! [`crate::lock::LockView`] everywhere. Read-only: nothing here writes.
//!
//! A plain-token lock (the article's §3.2 `setIfAbsent(lockKey, requestId, 30s)`) names its
//! holder only by its value: [`link_tokens`] asks the database, once for a whole list, which
//! values are requestIds it knows, and links those locks to their request and order.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use sqlx::Row;

use crate::console::read::records::TraceIds;
use crate::contracts::{keys, now_ms};
use crate::db::Database;
use crate::lock::formats::{self, LockFormat, TraceKeyOf};
use crate::lock::{LockInspector, LockView};

/// Tokens asked about per statement: a scan of a million keys is a thousand statements, each
/// one JSON array, never one per key.
const TOKENS_PER_STATEMENT: usize = 1_000;

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
    /// What the trace could not read and why: a lock pattern that names no ID, one that needs
    /// an ID the trace has not resolved, tokens that could not be linked to their request.
    pub notes: Vec<String>,
}

/// The lock keys of one order / request: idemguard's own, then each pattern's that names an ID
/// the trace has (`notes`: the patterns that give no key, and why — never a guess).
pub fn lock_keys_of(
    patterns: &[String],
    order_no: Option<&str>,
    request_id: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    let mut lock_keys: Vec<String> = Vec::new();
    lock_keys.extend(order_no.map(keys::order_lock));
    lock_keys.extend(request_id.map(keys::request_lock));
    let mut notes = Vec::new();
    for p in patterns {
        match formats::trace_key_of(p, order_no, request_id) {
            TraceKeyOf::Key(k) if !lock_keys.contains(&k) => lock_keys.push(k),
            TraceKeyOf::Key(_) => {}
            TraceKeyOf::NeedsId(id) => notes.push(format!(
                "lock pattern `{p}` needs the {id}, which this trace has not resolved"
            )),
            // idemguard's own `lock:*` is read through its own key formats above.
            TraceKeyOf::NoId(_) if p == keys::LOCK_PATTERN => {}
            TraceKeyOf::NoId(why) => notes.push(why),
        }
    }
    (lock_keys, notes)
}

/// (orderNo, requestId) a lock row names: the request its token was linked to, idemguard's own
/// key formats, or a pattern's `{orderNo}` / `{requestId}` place.
pub fn ids_of(view: &LockView, patterns: &[String]) -> (Option<String>, Option<String>) {
    if let LockFormat::Token {
        request_id: Some(r),
        order_no,
        ..
    } = &view.format
    {
        return (order_no.clone(), Some(r.clone()));
    }
    let own = keys::ids_of_lock(&view.key);
    if own != (None, None) {
        return own;
    }
    patterns
        .iter()
        .map(|p| formats::ids_of_key(p, &view.key))
        .find(|ids| *ids != (None, None))
        .unwrap_or((None, None))
}

/// Link every plain-token lock of `locks` whose value is a requestId the database knows (its
/// idempotency record or an order's req_id) to that request and its order. Err: the database
/// could not be asked, or the source profile cannot run the statement (the locks stay as read).
pub async fn link_tokens(db: &Database, locks: &mut [LockView]) -> anyhow::Result<()> {
    let tokens: BTreeSet<String> = locks
        .iter()
        .filter_map(|l| match &l.format {
            LockFormat::Token { token, .. } => Some(token.clone()),
            _ => None,
        })
        .collect();
    if tokens.is_empty() {
        return Ok(());
    }
    const STATEMENT: &str = "console_lock_token_requests";
    if let Some(why) = db.queries.missing(STATEMENT) {
        anyhow::bail!("lock tokens not linked to requests: {why}");
    }
    let tokens: Vec<String> = tokens.into_iter().collect();
    let mut known: HashMap<String, Option<String>> = HashMap::new();
    for chunk in tokens.chunks(TOKENS_PER_STATEMENT) {
        let read = sqlx::query(db.sql(STATEMENT))
            .bind(serde_json::to_string(chunk)?)
            .fetch_all(&db.pool);
        let rows = db.bounded(read).await.map_err(|e| {
            let e = crate::console::read::records::query_error(db, STATEMENT, e);
            anyhow::anyhow!("lock tokens not linked to requests: {e:#}")
        })?;
        for r in rows {
            known.insert(r.try_get("request_id")?, r.try_get("order_no")?);
        }
    }
    for l in locks.iter_mut() {
        if let LockFormat::Token {
            token,
            request_id,
            order_no,
            ..
        } = &mut l.format
        {
            if let Some(o) = known.get(token.as_str()) {
                *request_id = Some(token.clone());
                order_no.clone_from(o);
            }
        }
    }
    Ok(())
}

/// Reads `lock:order:{orderNo}`, `lock:req:{requestId}` and the keys `patterns` give for the
/// IDs' order and request (main and RedLock nodes), their fence counters and
/// `idem:{requestId}`; with `db`, a token lock is linked to the request it names. Err when the
/// main Redis cannot be read.
pub async fn trace_keys(
    inspector: &LockInspector,
    patterns: &[String],
    ids: &TraceIds,
    db: Option<&Database>,
) -> anyhow::Result<TraceKeys> {
    let read_at_ms = now_ms();
    let (order_no, request_id) = (ids.order_no.as_deref(), ids.request_id.as_deref());
    let (lock_keys, mut notes) = lock_keys_of(patterns, order_no, request_id);
    let mut inspected = inspector.inspect(&lock_keys).await?;
    if let Some(db) = db {
        // Bounded apart from Redis: a database that hangs costs the link, never the keys.
        let wait = crate::console::read::sources::POLL_TIMEOUT / 2;
        match tokio::time::timeout(wait, link_tokens(db, &mut inspected.locks)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => notes.push(format!("{e:#}")),
            Err(_) => notes.push(format!(
                "lock tokens not linked to requests: the database did not answer within {wait:?}"
            )),
        }
    }
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
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_the_keys_its_patterns_name_and_says_which_it_cannot() {
        let patterns: Vec<String> = [
            "lock:*",
            "order:lock:{orderNo}",
            "lock:order:{orderNo}",
            "app:{requestId}",
            "redisson:*",
            "myLock",
        ]
        .map(String::from)
        .to_vec();
        let (k, notes) = lock_keys_of(&patterns, Some("O1"), None);
        assert_eq!(k, ["lock:order:O1", "order:lock:O1"]);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].contains("needs the requestId"), "{notes:?}");
        assert!(notes[1].contains("`redisson:*`"), "{notes:?}");
        assert!(notes[2].contains("`myLock` is one fixed key"), "{notes:?}");
    }
}
