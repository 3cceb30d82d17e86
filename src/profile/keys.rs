//! The Redis side of a suggested profile: a bounded sample of the keys (`SCAN`, never `KEYS`),
//! grouped into patterns by replacing the parts that look like IDs, each pattern with its count,
//! type and value shape as the lock decoders read it — and, where the part replaced is an
//! orderNo or a requestId the database knows, the placeholder a trace reads the key by.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::config::{Config, RedisTarget};
use crate::lock::formats::{self, Decoder, LockFormat};

/// Keys sampled at most, and examples read per pattern.
pub const EXAMPLES_PER_PATTERN: usize = 3;
/// Bytes of a string value read at most (`GETRANGE`).
const VALUE_BYTES: isize = 512;

/// What one example key holds.
#[derive(Debug, Clone)]
pub struct KeyExample {
    pub key: String,
    pub redis_type: String,
    pub pttl_ms: i64,
    pub format: LockFormat,
}

/// A group of keys that differ only where an ID is.
#[derive(Debug, Clone)]
pub struct KeyPattern {
    /// With `*` where an ID was: `acme:pay:lock:*`.
    pub glob: String,
    pub count: usize,
    pub examples: Vec<KeyExample>,
    /// The ID part of each example (what the `*` stood for).
    pub ids: Vec<String>,
}

impl KeyPattern {
    /// Looks like a lock: a lock decoder other than "unknown" read an example, or `lock` is one
    /// of its words; and it expires (a lock without a TTL would be held for ever).
    pub fn is_lock(&self) -> bool {
        let decoded = self.examples.iter().any(|e| {
            matches!(
                e.format,
                LockFormat::Redisson { .. } | LockFormat::Idemguard
            )
        });
        let named = self
            .glob
            .split([':', '_', '-', '.'])
            .any(|w| w.eq_ignore_ascii_case("lock") || w.eq_ignore_ascii_case("locks"));
        let token = self
            .examples
            .iter()
            .any(|e| matches!(e.format, LockFormat::Token { .. }) && e.pttl_ms > 0);
        decoded || (named && (token || self.examples.iter().any(|e| e.pttl_ms > 0)))
    }
}

/// The sample: the patterns, most keys first, and how it was bounded.
#[derive(Debug, Clone, Default)]
pub struct KeySample {
    pub patterns: Vec<KeyPattern>,
    pub keys_seen: usize,
    /// The SCAN walked the whole keyspace (else it stopped at its bound).
    pub complete: bool,
    /// What was sampled: the node, and for a cluster which seed.
    pub node: String,
}

/// A key's part that is an ID: digits, a UUID, a long hex or token — anything with a digit and
/// six characters or more.
fn is_id_part(part: &str) -> bool {
    part.len() >= 6 && part.chars().any(|c| c.is_ascii_digit())
}

/// The key with its ID parts as `*`, and the first ID part (`None`: no part looked like an ID).
pub fn pattern_of(key: &str) -> (String, Option<String>) {
    let mut id = None;
    let parts: Vec<&str> = key
        .split(':')
        .map(|p| {
            if is_id_part(p) {
                id.get_or_insert_with(|| p.to_string());
                "*"
            } else {
                p
            }
        })
        .collect();
    (parts.join(":"), id)
}

/// Samples up to `limit` keys of the main Redis matching `matching` (SCAN MATCH; `*`: all)
/// within `deadline`.
pub async fn sample(
    config: &Config,
    matching: &str,
    limit: usize,
    deadline: Duration,
) -> anyhow::Result<KeySample> {
    let (url, node) = match RedisTarget::parse(&config.redis.url).map_err(anyhow::Error::msg)? {
        RedisTarget::Cluster { seeds } => {
            let first = seeds.first().cloned().unwrap_or_default();
            let shown = format!(
                "{} (the first seed of a cluster: its keys only)",
                crate::config::host_port(&first)
            );
            (first, shown)
        }
        _ => (
            config.redis.url.clone(),
            crate::config::host_port(&config.redis.url),
        ),
    };
    let started = Instant::now();
    let client = crate::lock::RedisAccess::of(&config.redis).client(&url)?;
    let mut conn = tokio::time::timeout(deadline, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| anyhow::anyhow!("redis {node} did not answer within {deadline:?}"))??;
    let mut groups: BTreeMap<String, KeyPattern> = BTreeMap::new();
    let (mut cursor, mut seen, mut complete) = (0u64, 0usize, false);
    while seen < limit && started.elapsed() < deadline {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(matching)
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await?;
        for key in keys.into_iter().take(limit - seen) {
            seen += 1;
            let (glob, id) = pattern_of(&key);
            let g = groups.entry(glob.clone()).or_insert_with(|| KeyPattern {
                glob,
                count: 0,
                examples: Vec::new(),
                ids: Vec::new(),
            });
            g.count += 1;
            if g.examples.len() < EXAMPLES_PER_PATTERN {
                g.examples
                    .push(example(&mut conn, &key, &config.foreign_locks.decoders).await?);
                g.ids.extend(id);
            }
        }
        cursor = next;
        if cursor == 0 {
            complete = true;
            break;
        }
    }
    let mut patterns: Vec<KeyPattern> = groups.into_values().collect();
    patterns.sort_by(|a, b| b.count.cmp(&a.count).then(a.glob.cmp(&b.glob)));
    Ok(KeySample {
        patterns,
        keys_seen: seen,
        complete,
        node,
    })
}

/// One key's type, TTL and value shape (a string's first bytes, a small hash's fields).
async fn example(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    decoders: &[Decoder],
) -> anyhow::Result<KeyExample> {
    let redis_type: String = redis::cmd("TYPE").arg(key).query_async(conn).await?;
    let pttl_ms: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await?;
    let (value, fields) = match redis_type.as_str() {
        "string" => {
            let v: Vec<u8> = redis::cmd("GETRANGE")
                .arg(key)
                .arg(0)
                .arg(VALUE_BYTES - 1)
                .query_async(conn)
                .await?;
            (Some(String::from_utf8_lossy(&v).into_owned()), Vec::new())
        }
        "hash" => {
            let n: i64 = redis::cmd("HLEN").arg(key).query_async(conn).await?;
            let fields: Vec<(String, String)> = if n <= 4 {
                redis::cmd("HGETALL").arg(key).query_async(conn).await?
            } else {
                Vec::new()
            };
            (None, fields)
        }
        _ => (None, Vec::new()),
    };
    let order = if decoders.is_empty() {
        &Decoder::ALL[..]
    } else {
        decoders
    };
    Ok(KeyExample {
        key: key.to_string(),
        format: formats::decode(&redis_type, value.as_deref(), &fields, order),
        redis_type,
        pttl_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_parts_of_a_key_become_a_star() {
        assert_eq!(
            pattern_of("acme:pay:lock:ORD20261201000042"),
            ("acme:pay:lock:*".into(), Some("ORD20261201000042".into()))
        );
        assert_eq!(
            pattern_of("lock:user:1008:createOrder").0,
            "lock:user:1008:createOrder"
        );
        assert_eq!(
            pattern_of("idem:0193a1c2-7f3e-7c1a-9d2b-5e8f6a7b8c9d").0,
            "idem:*"
        );
        assert_eq!(pattern_of("myLock"), ("myLock".into(), None));
    }
}
