//! The Redis fast path `idem:{requestId}` (seed §5.3): answers most duplicates — replays of
//! finished requests and copies of one still in flight — before the database is touched.
//!
//! It is only a cache in front of the arbiter: every error here (Redis down, slow, evicted)
//! falls through to the idempotency record's unique insert, which decides alone.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use serde::{Deserialize, Serialize};

use crate::contracts::keys;
use crate::lock::RedisConn;

/// What `idem:{requestId}` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FastPathValue {
    /// A request is being processed by `owner`.
    Processing {
        hash: String,
        owner: String,
        nonce: String,
    },
    /// The stored first response (SUCCEEDED or FAILED alike): replayed as is.
    Finished {
        hash: String,
        code: u16,
        body: String,
    },
}

impl FastPathValue {
    pub fn hash(&self) -> &str {
        match self {
            FastPathValue::Processing { hash, .. } | FastPathValue::Finished { hash, .. } => hash,
        }
    }

    /// The value read back; `None` for one that is not ours (another tool's, or a shape this
    /// version does not know), which the database then decides.
    ///
    /// Read through a flat record of every field rather than the tagged enum: serde buffers a
    /// tagged enum's whole content before choosing the variant, and a replay reads one value
    /// per request. The stored shape is the enum's JSON, unchanged.
    pub fn decode(raw: &str) -> Option<FastPathValue> {
        let f: Fields<'_> = serde_json::from_str(raw).ok()?;
        match f.state.as_ref() {
            "PROCESSING" => Some(FastPathValue::Processing {
                hash: f.hash.into_owned(),
                owner: f.owner?.into_owned(),
                nonce: f.nonce?.into_owned(),
            }),
            "FINISHED" => Some(FastPathValue::Finished {
                hash: f.hash.into_owned(),
                code: f.code?,
                body: f.body?,
            }),
            _ => None,
        }
    }
}

/// Every field of either state (see [`FastPathValue::decode`]); text without escapes is
/// borrowed from the value read.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow)]
    state: Cow<'a, str>,
    #[serde(borrow)]
    hash: Cow<'a, str>,
    #[serde(borrow, default)]
    owner: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    nonce: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    body: Option<String>,
}

#[derive(Clone)]
pub struct FastPath {
    /// One node or a Redis Cluster (each script touches one key: any slot will do).
    redis: RedisConn,
    claim: Script,
    drop: Script,
    /// The server refused `SET … NX … GET` (Redis < 7.0): claim with the script instead.
    old_server: Arc<AtomicBool>,
}

impl FastPath {
    /// The fast path on the main Redis (`redis.url`, one node or a cluster, reached as
    /// `[redis]` says).
    pub async fn connect(redis: &crate::config::RedisConfig) -> redis::RedisResult<FastPath> {
        let access = crate::lock::RedisAccess::of(redis);
        Ok(FastPath::new(
            crate::lock::open_main(&redis.url, &access).await?,
        ))
    }

    pub(crate) fn new(redis: RedisConn) -> FastPath {
        FastPath {
            redis,
            claim: Script::new(include_str!("../../queries/redis/api_fast_path_claim.lua")),
            drop: Script::new(include_str!("../../queries/redis/api_fast_path_drop.lua")),
            old_server: Arc::new(AtomicBool::new(false)),
        }
    }

    /// `Ok(None)`: we set the placeholder. `Ok(Some(v))`: someone else's value. `Err`: Redis
    /// is unavailable — the caller goes on to the database.
    ///
    /// "Query + placeholder" in one atomic command: `SET … NX PX … GET` answers the value
    /// already there — a replay's whole answer — or sets ours. A server older than 7.0 refuses
    /// NX with GET; there the same step is the script `api_fast_path_claim.lua`.
    pub async fn claim(
        &self,
        request_id: &str,
        placeholder: &FastPathValue,
        ttl: Duration,
    ) -> redis::RedisResult<Option<FastPathValue>> {
        let key = keys::idempotency_fast_path(request_id);
        let value = serde_json::to_string(placeholder).expect("serializes");
        let ttl_ms = ttl.as_millis() as u64;
        let raw = if self.old_server.load(Ordering::Relaxed) {
            self.claim_by_script(&key, &value, ttl_ms).await?
        } else {
            let mut conn = self.redis.clone();
            let set = redis::cmd("SET")
                .arg(&key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .arg("GET")
                .query_async::<Option<String>>(&mut conn)
                .await;
            match set {
                Err(e) if is_syntax_error(&e) => {
                    self.old_server.store(true, Ordering::Relaxed);
                    self.claim_by_script(&key, &value, ttl_ms).await?
                }
                other => other?,
            }
        };
        // A value some other tool wrote is not ours to interpret: let the database decide.
        Ok(raw.as_deref().and_then(FastPathValue::decode))
    }

    async fn claim_by_script(
        &self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> redis::RedisResult<Option<String>> {
        let mut conn = self.redis.clone();
        let raw: String = self
            .claim
            .key(key)
            .arg(value)
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await?;
        Ok(Some(raw).filter(|r| !r.is_empty()))
    }

    /// Store the finished response for replays.
    pub async fn store(
        &self,
        request_id: &str,
        value: &FastPathValue,
        ttl: Duration,
    ) -> redis::RedisResult<()> {
        let mut conn = self.redis.clone();
        redis::cmd("SET")
            .arg(keys::idempotency_fast_path(request_id))
            .arg(serde_json::to_string(value).expect("serializes"))
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async::<()>(&mut conn)
            .await
    }

    /// Remove our placeholder if it is still ours.
    pub async fn drop_placeholder(
        &self,
        request_id: &str,
        placeholder: &FastPathValue,
    ) -> redis::RedisResult<()> {
        let mut conn = self.redis.clone();
        self.drop
            .key(keys::idempotency_fast_path(request_id))
            .arg(serde_json::to_string(placeholder).expect("serializes"))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|_| ())
    }
}

/// Redis < 7.0's answer to `SET … NX … GET`.
fn is_syntax_error(e: &redis::RedisError) -> bool {
    matches!(e.kind(), redis::ErrorKind::Server(_))
        && e.to_string().to_ascii_lowercase().contains("syntax error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_back_what_is_stored() {
        let values = [
            FastPathValue::Processing {
                hash: "ab12".into(),
                owner: "host-1-\"x\"".into(),
                nonce: "n-1".into(),
            },
            FastPathValue::Finished {
                hash: "ab12".into(),
                code: 201,
                body: r#"{"orderNo":"O-1","note":"a \"quoted\" é"}"#.into(),
            },
        ];
        for v in values {
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(FastPathValue::decode(&json), Some(v.clone()), "{json}");
            assert_eq!(serde_json::from_str::<FastPathValue>(&json).unwrap(), v);
        }
    }

    #[test]
    fn decode_leaves_foreign_values_to_the_database() {
        for raw in [
            "",
            "1",
            "plain text",
            r#"{"state":"DONE","hash":"h"}"#,
            r#"{"state":"FINISHED","hash":"h","body":"no code"}"#,
            r#"{"state":"PROCESSING","hash":"h","owner":"o"}"#,
            r#"{"state":"FINISHED","code":201,"body":"no hash"}"#,
        ] {
            assert_eq!(FastPathValue::decode(raw), None, "{raw}");
        }
    }
}
