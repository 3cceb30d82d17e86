//! Locks held far past their TTL, on the real Redis. A lock renewed for ever looks healthy —
//! its PTTL keeps coming back — while it blocks every other copy: `locks --json` counts an
//! idemguard value from its `acquired_at`; the console counts a Redisson lock from when it first
//! saw that value and flags it past `console.lock_held_warning`. Redisson's fair-lock queue and
//! timeout keys left without a TTL are listed and flagged.

use crate::common;
use crate::support::tmux;

use std::time::Duration;

use idemguard::contracts::{now_ms, LockHolder};

/// Deletes the test's keys when it ends, passed or not.
struct Keys(Vec<String>);

impl Drop for Keys {
    fn drop(&mut self) {
        let config = common::local_config();
        if let Ok(mut c) =
            redis::Client::open(config.redis.url.as_str()).and_then(|c| c.get_connection())
        {
            for k in &self.0 {
                let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(k).query(&mut c);
            }
        }
    }
}

async fn redis() -> redis::aio::MultiplexedConnection {
    let url = common::local_config().redis.url;
    redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the main Redis (scripts/stack status)")
}

async fn run(c: &mut redis::aio::MultiplexedConnection, cmd: &mut redis::Cmd) {
    let _: redis::Value = cmd.query_async(c).await.unwrap();
}

/// A Redisson lock: a hash `<clientId>:<threadId>` = reentrancy count, with Redisson's 30 s
/// lease (its watchdog renews it every 10 s).
async fn redisson_lock(c: &mut redis::aio::MultiplexedConnection, key: &str) {
    let field = format!("{}:77", uuid::Uuid::new_v4());
    run(c, redis::cmd("HSET").arg(key).arg(field).arg(1)).await;
    run(c, redis::cmd("PEXPIRE").arg(key).arg(30_000)).await;
}

const PATTERNS: &str = "lock:*,redisson_lock_queue:*,redisson_lock_timeout:*";

/// `locks --json`: an idemguard lock acquired 20 minutes ago and renewed (its PTTL fresh) is
/// flagged `held_long`, counted from its `acquired_at`; a Redisson lock seen once is counted
/// from now; a fair lock's queue without a TTL is flagged, its timeouts with a TTL are not.
#[tokio::test]
async fn locks_json_flags_a_lock_held_past_the_warning_and_fair_lock_leftovers() {
    let config = common::local_config();
    let tag = common::unique_suffix();
    let own = format!("lock:order:held{tag}");
    let redisson = format!("lock:order:held{tag}:redisson");
    let queue = format!("redisson_lock_queue:{{held{tag}}}");
    let timeouts = format!("redisson_lock_timeout:{{held{tag}}}");
    let _keys = Keys(vec![
        own.clone(),
        redisson.clone(),
        queue.clone(),
        timeouts.clone(),
    ]);
    let mut c = redis().await;
    let acquired_at = now_ms() - 20 * 60_000;
    let holder = LockHolder {
        instance: format!("held-{tag}"),
        host: "h".into(),
        pid: 1,
        acquired_at,
        ttl_ms: 30_000,
        fence: 1,
        nonce: tag.clone(),
    };
    run(
        &mut c,
        redis::cmd("SET")
            .arg(&own)
            .arg(holder.to_value())
            .arg("PX")
            .arg(30_000),
    )
    .await;
    redisson_lock(&mut c, &redisson).await;
    run(&mut c, redis::cmd("RPUSH").arg(&queue).arg("c1:77")).await;
    run(
        &mut c,
        redis::cmd("ZADD").arg(&timeouts).arg(now_ms()).arg("c2:78"),
    )
    .await;
    run(&mut c, redis::cmd("PEXPIRE").arg(&timeouts).arg(60_000)).await;

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .arg("--config")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"))
        .args(["locks", "--json"])
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_REDIS__REDLOCK_NODES", "")
        .env("IDEMGUARD_FOREIGN_LOCKS__PATTERNS", PATTERNS)
        .env("IDEMGUARD_CONSOLE__LOCK_HELD_WARNING", "10m")
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .env("IDEMGUARD_LOG", "error")
        .output()
        .expect("run idemguard");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let rows = json["data"]["locks"].as_array().expect("locks");
    let row = |key: &str| {
        rows.iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("{key} not listed: {text}"))
    };
    let own = row(&own);
    assert_eq!(own["held"]["since"], "acquired_at", "{own}");
    assert_eq!(own["held"]["since_ms"], acquired_at, "{own}");
    assert!(
        own["held"]["held_ms"].as_i64().unwrap() >= 20 * 60_000,
        "{own}"
    );
    assert!(own["pttl_ms"].as_i64().unwrap() > 0, "renewed: {own}");
    // (Its instance has no heartbeat here, so it is also `dead_owner`.)
    let flags = own["flags"].as_array().unwrap();
    assert!(flags.contains(&"held_long".into()), "{own}");

    let redisson = row(&redisson);
    assert_eq!(redisson["held"]["since"], "first_seen", "{redisson}");
    assert_eq!(
        redisson["flags"],
        serde_json::json!(["other_type"]),
        "{redisson}"
    );

    let queue = row(&queue);
    assert_eq!(
        queue["flags"],
        serde_json::json!(["no_ttl", "other_type", "fair_lock_leftover"]),
        "{queue}"
    );
    let timeouts = row(&timeouts);
    assert_eq!(
        timeouts["flags"],
        serde_json::json!(["other_type"]),
        "{timeouts}"
    );
}

/// The console, in a real terminal: a Redisson lock renewed while the console watches is
/// flagged `held_long` once the same value has been seen for longer than the warning, its HELD
/// a lower bound (`≥`).
#[tokio::test]
async fn the_locks_view_flags_a_redisson_lock_renewed_past_the_warning() {
    let config = common::local_config();
    let tag = common::unique_suffix();
    let key = format!("lock:order:held{tag}:redisson");
    let _keys = Keys(vec![key.clone()]);
    let mut c = redis().await;
    redisson_lock(&mut c, &key).await;

    let mut env: Vec<(&str, String)> = tmux::local_env(&config);
    env.extend([
        ("IDEMGUARD_LOCK__TTL", "1s".to_string()),
        ("IDEMGUARD_CONSOLE__LOCK_HELD_WARNING", "3s".to_string()),
        ("IDEMGUARD_TRACE__ENABLED", "false".to_string()),
    ]);
    let t = tmux::Terminal::console("igh", (220, 50), &env, "");
    t.wait_for("the console", Duration::from_secs(30), |s| {
        s.contains("idemguard console")
    });
    t.keys(&["3"]);
    let seen = t.wait_for("the Redisson lock", Duration::from_secs(30), |s| {
        s.contains(&key)
    });
    let line = |s: &str| {
        s.lines()
            .find(|l| l.contains(&key))
            .unwrap_or("")
            .to_string()
    };
    assert!(!line(&seen).contains("held_long"), "{seen}");
    // Its watchdog renews it: the PTTL comes back, the value stays.
    run(&mut c, redis::cmd("PEXPIRE").arg(&key).arg(30_000)).await;
    let flagged = t.wait_for("the lock flagged", Duration::from_secs(30), |s| {
        line(s).contains("held_long")
    });
    assert!(line(&flagged).contains('≥'), "{flagged}");
    t.quit_console(Duration::from_secs(10));
}
