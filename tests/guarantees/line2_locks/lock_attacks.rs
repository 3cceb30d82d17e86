//! The Redis locks: each test replays an attack that worked, against the shared Redis
//! and the RedLock nodes of `scripts/stack up`, with keys unique to the test (deleted at the
//! end, also when an assertion fails).
//!
//! - a forged `--expect-value` (a dead instance, the live holder's nonce) deleted a live
//!   holder's lock;
//! - fence counters never expired (one per order, on every node, for ever);
//! - one key of another type under `lock:*` (a Redisson lock is a hash) hid every lock.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect, LockMode};
use idemguard::console::{read::locks as console_locks, tui::confirm};
use idemguard::contracts::{keys, now_ms, LockHolder, OrderNo};
use idemguard::lock::{LockGuard, LockInspector, LockView, Locks, NodeLockState};
use idemguard::ops::ActionOutcome;

use common::locks::{actions_for, instance, locks_for};

fn with_mode(config: &Config, mode: LockMode) -> Config {
    let mut c = config.clone();
    c.lock.mode = mode;
    c
}

/// The servers a mode's locks live on.
fn lock_urls(config: &Config) -> Vec<String> {
    match config.lock.mode {
        LockMode::Single => vec![config.redis.url.clone()],
        LockMode::Redlock => config.redis.redlock_nodes.clone(),
    }
}

async fn hold(locks: &Locks, key: &str, options: &idemguard::lock::AcquireOptions) -> LockGuard {
    locks
        .acquire_with(key, options)
        .await
        .expect("acquire")
        .held()
        .unwrap_or_else(|| panic!("{key} unexpectedly held"))
}

/// Deletes every key under `prefix` (locks and their fence counters) on the main Redis and every
/// RedLock node when dropped: the tests share those servers, and the console scans `lock:*`.
struct Cleanup {
    urls: Vec<String>,
    prefix: String,
}

impl Cleanup {
    fn new(config: &Config, prefix: &str) -> Cleanup {
        let mut urls = vec![config.redis.url.clone()];
        urls.extend(config.redis.redlock_nodes.iter().cloned());
        Cleanup {
            urls,
            prefix: prefix.to_string(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for url in &self.urls {
            let Ok(mut c) = redis::Client::open(url.as_str()).and_then(|c| c.get_connection())
            else {
                continue;
            };
            for pattern in [
                format!("{}*", self.prefix),
                keys::fence_pattern(&self.prefix),
            ] {
                let mut cursor: u64 = 0;
                loop {
                    let Ok((next, found)): redis::RedisResult<(u64, Vec<String>)> =
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(&pattern)
                            .arg("COUNT")
                            .arg(1000)
                            .query(&mut c)
                    else {
                        break;
                    };
                    if !found.is_empty() {
                        let _: redis::RedisResult<i64> =
                            redis::cmd("DEL").arg(&found).query(&mut c);
                    }
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
        }
    }
}

/// A connection to the Redis node at `url`.
async fn node(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("redis (scripts/stack up)")
}

/// Keys matching `pattern` on `url`, by SCAN.
async fn count_keys(url: &str, pattern: &str) -> usize {
    let mut c = node(url).await;
    let mut cursor: u64 = 0;
    let mut n = 0;
    loop {
        let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .unwrap();
        n += page.len();
        if next == 0 {
            return n;
        }
        cursor = next;
    }
}

/// Whether `key` exists on `url` (one EXISTS: a SCAN of a shared server can outlast a counter).
async fn exists_on(url: &str, key: &str) -> bool {
    let mut c = node(url).await;
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut c)
        .await
        .unwrap()
        == 1
}

fn idemguard(config: &Config, args: &[String]) -> (Option<i32>, String) {
    let mode = match config.lock.mode {
        LockMode::Single => "single",
        LockMode::Redlock => "redlock",
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .arg("--config")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"))
        .args(args)
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_LOCK__MODE", mode)
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .env("IDEMGUARD_LOG", "error")
        .output()
        .expect("run idemguard");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// release-lock judges the stored value, byte for byte
// ---------------------------------------------------------------------------------------------

/// While a live holder keeps K, its value with the instance changed to a dead one (same nonce)
/// is passed as `--expect-value` without `--force`: the CLI and the console's executor delete
/// nothing, on one node and under RedLock.
async fn a_forged_expect_value_does_not_release_a_live_holders_lock(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    for mode in [LockMode::Single, LockMode::Redlock] {
        let config = with_mode(&config, mode);
        let key = keys::order_lock(&format!("forged{}", OrderNo::generate().as_str()));
        let _cleanup = Cleanup::new(&config, &key);
        let live = instance("live");
        let holder = locks_for(&config, &live);
        let heartbeat = holder.liveness().start(&live).await.expect("heartbeat");
        let guard = hold(&holder, &key, &holder.options()).await;
        let stored: Vec<String> = holder
            .inspect(&key)
            .await
            .values()
            .into_iter()
            .map(str::to_string)
            .collect();
        let dead = instance("dead").id; // never had a heartbeat
        let forged: Vec<String> = stored
            .iter()
            .map(|v| {
                let mut h = LockHolder::from_value(v).expect("an idemguard value");
                h.instance = dead.clone();
                h.to_value()
            })
            .collect();

        // The headless twin, exactly as an operator would type it.
        let mut args = vec!["release-lock".to_string(), key.clone()];
        for f in &forged {
            args.extend(["--expect-value".to_string(), f.clone()]);
        }
        args.push("--allow-actions".into());
        let (code, out) = idemguard(&config, &args);
        assert_eq!(code, Some(5), "{dialect} {mode:?}: a value no node holds is a change since it was seen, nothing deleted: {out}");
        assert_eq!(
            holder.inspect(&key).await.values(),
            stored,
            "{dialect} {mode:?}: the live holder's lock is intact"
        );

        // The console: a row showing the forged value as a dead owner's goes through the confirm
        // popup (which then does not force) and the executor.
        let nodes = lock_urls(&config)
            .iter()
            .zip(&forged)
            .map(|(url, v)| {
                LockView::held_on(&idemguard::config::host_port(url), v.clone(), 30_000)
            })
            .collect::<Vec<_>>();
        let mut row = LockView::new(key.clone(), mode, nodes, None, now_ms());
        row.judge_owner(Some(&BTreeSet::new()));
        let popup = confirm::release(&[&row], now_ms(), "local", false);
        assert_eq!(
            popup.missing(),
            None,
            "the popup believes the owner dead and needs no reason"
        );
        let ops = actions_for(&config, &db, true).await;
        for planned in popup.confirmed() {
            let r = ops.run(&planned.action).await;
            assert_eq!(
                r.outcome,
                ActionOutcome::Changed,
                "{dialect} {mode:?}: {}",
                r.detail
            );
        }
        assert_eq!(
            holder.inspect(&key).await.values(),
            stored,
            "{dialect} {mode:?}: the live holder's lock is intact"
        );
        assert!(
            !guard.is_lost(),
            "{dialect} {mode:?}: the holder never lost its lock"
        );

        // The value actually stored, without --force: refused, the owner has a heartbeat.
        let mut args = vec!["release-lock".to_string(), key.clone()];
        for v in &stored {
            args.extend(["--expect-value".to_string(), v.clone()]);
        }
        args.push("--allow-actions".into());
        let (code, out) = idemguard(&config, &args);
        assert_eq!(code, Some(4), "{dialect} {mode:?}: {out}");
        assert!(
            guard.release().await.unwrap().released(),
            "{dialect} {mode:?}"
        );
        heartbeat.stop().await.unwrap();
    }
    db.pool.close().await;
}

per_dialect!(a_forged_expect_value_does_not_release_a_live_holders_lock => a_forged_expect_value_does_not_release_a_live_holders_lock_postgres, a_forged_expect_value_does_not_release_a_live_holders_lock_mysql);

// ---------------------------------------------------------------------------------------------
// fence counters expire, and restart above every earlier token
// ---------------------------------------------------------------------------------------------

/// After N acquisitions and releases with a short `lock.fence_ttl`, the number of `fence:` keys
/// under the test's prefix returns to its baseline on every node; the counter of a lock still
/// held stays; a counter that expired restarts above the tokens issued before.
#[tokio::test]
async fn fence_counters_expire_after_their_locks_and_restart_above_every_earlier_token() {
    for mode in [LockMode::Single, LockMode::Redlock] {
        let mut config = with_mode(&common::local_config(), mode);
        config.lock.fence_ttl = Duration::from_millis(300);
        let prefix = format!("lock:order:fencettl{}", common::unique_suffix());
        let _cleanup = Cleanup::new(&config, &prefix);
        let fence_pattern = keys::fence_pattern(&prefix);
        let urls = lock_urls(&config);
        let count = || async {
            futures::future::join_all(urls.iter().map(|u| count_keys(u, &fence_pattern))).await
        };
        let baseline = count().await;
        assert_eq!(baseline, vec![0; urls.len()], "{mode:?}: a fresh prefix");

        let locks = locks_for(&config, &instance("fence"));
        // Held across at least two lifetimes of its own counter (600 ms + 300 ms from its
        // acquisition): only the watchdog's renewals, every 200 ms, keep the counter. (A TTL of
        // 150 ms, renewed every 50 ms, was lost at load 8-11: a renewal came late.)
        let held_ttl = Duration::from_millis(600);
        let held_key = format!("{prefix}:held");
        let held_fence = keys::fence(&held_key);
        let held_at = Instant::now();
        let held = hold(&locks, &held_key, &locks.options().ttl(held_ttl)).await;
        let watch_held_until = held_at + 2 * (held_ttl + config.lock.fence_ttl);
        let short = locks
            .options()
            .ttl(Duration::from_millis(200))
            .without_watchdog();
        let mut first = Vec::new();
        for i in 0..20 {
            let key = format!("{prefix}:{i}");
            let g = hold(&locks, &key, &short).await;
            first.push(g.fence());
            // Checked at once, not after the loop: a counter lives 500 ms, and 20 acquisitions
            // on five nodes can take longer on a loaded machine.
            for u in &urls {
                assert!(
                    exists_on(u, &keys::fence(&key)).await,
                    "{mode:?}: no counter of {key} on {u}"
                );
            }
            assert!(g.release().await.unwrap().released());
        }
        let now = count().await;
        assert!(
            now.iter().all(|n| *n <= 21),
            "{mode:?}: one counter per key on every node, none else: {now:?}"
        );

        // Bounded wait: the released keys' counters go; the held one's stays throughout.
        let started = Instant::now();
        let mut expired_at = None;
        while started.elapsed() < expired_at.unwrap_or(Duration::from_secs(10))
            || Instant::now() < watch_held_until
        {
            for u in &urls {
                assert_eq!(
                    count_keys(u, &held_fence).await,
                    1,
                    "{mode:?}: the counter of a held lock expired on {u}"
                );
            }
            let now = count().await;
            if expired_at.is_none() && now == vec![1; urls.len()] {
                // Go on watching the held one for two more lifetimes.
                expired_at = Some(started.elapsed() + Duration::from_millis(900));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            expired_at.is_some(),
            "{mode:?}: fence counters never expired: {:?} keys left",
            count().await
        );
        assert!(!held.is_lost(), "{mode:?}: {:?}", held.lost_reason());

        // A counter that expired restarts above every token issued before (the database keeps
        // the largest it saw on the row and would refuse a restart at 1).
        let again = hold(&locks, &format!("{prefix}:0"), &short).await;
        let issued_max = first.iter().max().copied().unwrap();
        assert!(
            again.fence() > issued_max,
            "{mode:?}: restarted at {} after {issued_max}",
            again.fence()
        );
        assert!(again.release().await.unwrap().released());
        assert!(held.release().await.unwrap().released());

        let started = Instant::now();
        while count().await != baseline {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{mode:?}: fence counters left after every lock was released: {:?}",
                count().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// a key of another type under lock:* hides nothing
// ---------------------------------------------------------------------------------------------

/// A Redisson lock (a hash) next to idemguard's own locks, on the main Redis and on every RedLock
/// node: `locks --json`, the console's scan and the lock layer's reader list both.
#[tokio::test]
async fn a_hash_under_lock_star_is_listed_with_its_type_and_hides_no_lock() {
    let config = common::local_config();
    let prefix = format!("lock:order:odd{}", common::unique_suffix());
    let _cleanup = Cleanup::new(&config, &prefix);
    let redisson = format!("{prefix}:redisson");
    let mut all_urls = vec![config.redis.url.clone()];
    all_urls.extend(config.redis.redlock_nodes.iter().cloned());
    for url in &all_urls {
        let mut c = node(url).await;
        let _: i64 = redis::cmd("HSET")
            .arg(&redisson)
            .arg(format!("{}:1", uuid::Uuid::new_v4()))
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(&redisson)
            .arg(60_000)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let single = locks_for(&with_mode(&config, LockMode::Single), &instance("own"));
    let redlock = locks_for(
        &with_mode(&config, LockMode::Redlock),
        &instance("own-redlock"),
    );
    let own = format!("{prefix}:own");
    let own_guards = [
        hold(&single, &own, &single.options()).await,
        hold(&redlock, &own, &redlock.options()).await,
    ];

    // The headless twin.
    let (code, out) = idemguard(&config, &["locks".to_string(), "--json".to_string()]);
    assert_eq!(code, Some(0), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let rows = json["data"]["locks"].as_array().expect("locks");
    for scope in ["single", "redlock"] {
        let row = |key: &str| {
            rows.iter()
                .find(|r| r["key"] == key && r["scope"] == scope)
                .unwrap_or_else(|| panic!("{key} [{scope}] not listed: {out}"))
        };
        let odd = row(&redisson);
        assert_eq!(odd["type"], "hash", "{odd}");
        assert!(odd["pttl_ms"].as_i64().unwrap() > 0, "{odd}");
        assert_eq!(odd["flags"], serde_json::json!(["other_type"]), "{odd}");
        let mine = row(&own);
        assert_eq!(
            (
                mine["type"].as_str(),
                mine["holder"]["instance"].is_string()
            ),
            (Some("string"), true),
            "{mine}"
        );
    }

    // The console's scan (the Locks view's collector).
    let scan = LockInspector::from_config(&config)
        .unwrap()
        .scan(console_locks::LOCK_LIST_LIMIT)
        .await;
    assert!(scan.all_nodes_ok(), "{:?}", scan.first_error());
    assert!(
        scan.live_instances.is_some(),
        "owner liveness is still read"
    );
    for scope in ["single", "redlock"] {
        let row = |key: &str| {
            scan.locks
                .iter()
                .find(|r| r.key == key && r.scope.as_str() == scope)
                .unwrap_or_else(|| panic!("{key} [{scope}] not in the console's scan"))
        };
        assert_eq!(row(&redisson).other_type(), Some("hash"));
        assert!(row(&own).holder().is_some());
    }

    // The lock layer's reader (what release-lock inspects).
    for locks in [&single, &redlock] {
        let scan = locks.scan_locks(1_000_000).await;
        assert!(
            scan.nodes.iter().all(|n| n.error.is_none()),
            "{:?}",
            scan.nodes
        );
        let view = |key: &str| {
            scan.locks
                .iter()
                .find(|l| l.key == key)
                .unwrap_or_else(|| panic!("{key} not in the lock layer's scan"))
                .clone()
        };
        assert!(view(&own).holder().is_some());
        let odd = view(&redisson);
        assert!(odd.nodes.iter().all(|n| matches!(&n.state, NodeLockState::Other { redis_type, pttl_ms, .. } if redis_type == "hash" && *pttl_ms > 0)), "{odd:?}");
        assert_eq!(locks.inspect(&redisson).await.other_type(), Some("hash"));
    }
    for g in own_guards {
        assert!(g.release().await.unwrap().released());
    }
}
