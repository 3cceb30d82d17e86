//! The Redis fast path `idem:{requestId}` (seed §5.3): answers most duplicates — replays of
//! finished requests and copies of one still in flight — before the database is touched.
//!
//! It is only a cache in front of the arbiter: every error here (Redis down, slow, evicted)
//! falls through to the idempotency record's unique insert, which decides alone.

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
}

#[derive(Clone)]
pub struct FastPath {
    /// One node or a Redis Cluster (each script touches one key: any slot will do).
    redis: RedisConn,
    claim: Script,
    drop: Script,
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
        }
    }

    /// `Ok(None)`: we set the placeholder. `Ok(Some(v))`: someone else's value. `Err`: Redis
    /// is unavailable — the caller goes on to the database.
    pub async fn claim(
        &self,
        request_id: &str,
        placeholder: &FastPathValue,
        ttl: Duration,
    ) -> redis::RedisResult<Option<FastPathValue>> {
        let mut conn = self.redis.clone();
        let raw: String = self
            .claim
            .key(keys::idempotency_fast_path(request_id))
            .arg(serde_json::to_string(placeholder).expect("serializes"))
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        if raw.is_empty() {
            return Ok(None);
        }
        // A value some other tool wrote is not ours to interpret: let the database decide.
        Ok(serde_json::from_str(&raw).ok())
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
