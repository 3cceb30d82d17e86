//! Line of defense 2 against real Redis: the shared stack (127.0.0.1:6379 for single-node locks,
//! 127.0.0.1:6381-6385 for RedLock) and, for the tests that stop nodes, private redis-server
//! processes this file starts and kills. Every test uses its own keys.

use crate::common;
use crate::support::redis_server;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{local_config, unique_suffix};
use idemguard::config::{Config, LockMode};
use idemguard::contracts::{keys, Instance, LockHolder};
use idemguard::lock::{Acquisition, LockError, LockGuard, Locks, NodeLockState, NodeRelease};
use idemguard::trace::Tracer;
use redis_server::RedisServer;

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn single_config() -> Config {
    let mut c = local_config();
    c.lock.mode = LockMode::Single;
    c
}

fn redlock_config(nodes: Vec<String>) -> Config {
    let mut c = local_config();
    c.lock.mode = LockMode::Redlock;
    c.redis.redlock_nodes = nodes;
    c
}

fn stack_redlock_config() -> Config {
    let c = local_config();
    assert_eq!(
        c.redis.redlock_nodes.len(),
        5,
        "config/local.toml lists the five RedLock nodes"
    );
    redlock_config(c.redis.redlock_nodes.clone())
}

fn lock_service(config: &Config) -> Locks {
    let instance = Instance::current();
    Locks::from_config(config, &instance, Tracer::log_only(&instance)).expect("lock service")
}

fn test_key(what: &str) -> String {
    format!("lock:order:T{what}{}", unique_suffix())
}

/// Every URL a config's locks live on.
fn lock_urls(config: &Config) -> Vec<String> {
    match config.lock.mode {
        LockMode::Single => vec![config.redis.url.clone()],
        LockMode::Redlock => config.redis.redlock_nodes.clone(),
    }
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| {
            panic!("redis at {url} is not reachable: {e}. Start the stack: scripts/stack up")
        })
}

async fn get(url: &str, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw(url).await)
        .await
        .unwrap()
}

/// Drop a test's lock and fence keys from the shared nodes.
async fn cleanup(urls: &[String], key: &str) {
    for url in urls {
        let _: () = redis::cmd("DEL")
            .arg(key)
            .arg(keys::fence(key))
            .query_async(&mut raw(url).await)
            .await
            .unwrap();
    }
}

async fn hold(locks: &Locks, key: &str, options: &idemguard::lock::AcquireOptions) -> LockGuard {
    match locks.acquire_with(key, options).await.expect("acquire") {
        Acquisition::Held(g) => g,
        Acquisition::Contended(c) => panic!("{key} is unexpectedly held: {c:?}"),
    }
}

fn start_servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

// ---------------------------------------------------------------------------------------------
// mutual exclusion: 200 contenders, a non-atomic counter
// ---------------------------------------------------------------------------------------------

/// 200 tasks (spread over four lock services, as four processes would be) each take the lock
/// once and increment a counter with a read, a pause and a write. Any overlap loses an update.
async fn contenders_count_exact(config: Config) {
    let services: Vec<Locks> = (0..4).map(|_| lock_service(&config)).collect();
    let key = test_key("count");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let options = services[0]
        .options()
        .ttl(Duration::from_secs(5))
        .attempts(100_000)
        .retry_delay(Duration::from_millis(20));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (locks, key, options) = (services[i % 4].clone(), key.clone(), options.clone());
        let (counter, inside, fences) = (counter.clone(), inside.clone(), fences.clone());
        tasks.spawn(async move {
            let guard = hold(&locks, &key, &options).await;
            assert_eq!(
                inside.fetch_add(1, Ordering::SeqCst),
                0,
                "two holders inside the critical section"
            );
            fences.lock().unwrap().push(guard.fence().0);
            let seen = counter.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_micros(300)).await;
            counter.store(seen + 1, Ordering::SeqCst);
            inside.fetch_sub(1, Ordering::SeqCst);
            let report = guard.release().await.expect("release");
            assert!(report.released(), "{report:?}");
        });
    }
    tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(r) = tasks.join_next().await {
            r.expect("contender");
        }
    })
    .await
    .expect("200 contenders finish within 180s");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        200,
        "lost updates: the lock let two holders in"
    );
    let fences = fences.lock().unwrap().clone();
    assert_eq!(fences.len(), 200);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fence tokens must strictly increase in holding order: {fences:?}"
    );
    cleanup(&lock_urls(&config), &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_node_200_contenders_count_exact() {
    // The control: without the lock the same increments lose updates, so the test can fail.
    let counter = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let counter = counter.clone();
            tokio::spawn(async move {
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(300)).await;
                counter.store(seen + 1, Ordering::SeqCst);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        counter.load(Ordering::SeqCst) < 200,
        "the unlocked control should lose updates"
    );

    contenders_count_exact(single_config()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_200_contenders_count_exact() {
    contenders_count_exact(stack_redlock_config()).await;
}

// ---------------------------------------------------------------------------------------------
// release only by the holder
// ---------------------------------------------------------------------------------------------

async fn release_with_another_value_deletes_nothing(config: Config) {
    let locks = lock_service(&config);
    let key = test_key("other");
    let a = hold(&locks, &key, &locks.options()).await;

    // Someone with a different value (same holder description, another acquisition's nonce).
    let mut other = a.holder().clone();
    other.nonce = "0000000000000000000000000000beef".into();
    let report = locks
        .release_if_value(&key, &other.to_value())
        .await
        .unwrap();
    assert!(report.refused() && !report.released(), "{report:?}");
    assert_eq!(report.current(), Some(a.value().as_str()));
    let view = locks.inspect(&key).await;
    assert_eq!(view.holder(), Some(a.holder()), "{view:?}");
    assert_eq!(view.agreeing_nodes(), lock_urls(&config).len());

    // The exact value the operator saw is released, on every node.
    for value in view.values() {
        assert!(locks
            .release_if_value(&key, value)
            .await
            .unwrap()
            .released());
    }
    assert!(locks.inspect(&key).await.is_free());
    // …after which the former holder's own release deletes nothing and says so.
    let report = a.release().await.unwrap();
    assert!(report.refused(), "{report:?}");
    assert!(
        report
            .nodes
            .iter()
            .all(|(_, r)| *r == NodeRelease::NotHeld { current: None }),
        "{report:?}"
    );
    cleanup(&lock_urls(&config), &key).await;
}

#[tokio::test]
async fn single_release_with_another_holders_value_deletes_nothing() {
    release_with_another_value_deletes_nothing(single_config()).await;
}

#[tokio::test]
async fn redlock_release_with_another_holders_value_deletes_nothing() {
    release_with_another_value_deletes_nothing(stack_redlock_config()).await;
}

/// A holds without a watchdog and is slower than its TTL; B takes the lock; A's late release
/// must leave B's lock intact.
async fn late_release_leaves_next_holder_intact(config: Config) {
    let (locks_a, locks_b) = (lock_service(&config), lock_service(&config));
    let key = test_key("late");
    let a = hold(
        &locks_a,
        &key,
        &locks_a
            .options()
            .ttl(Duration::from_millis(200))
            .without_watchdog(),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(2), a.lost())
        .await
        .expect("the loss signal fires when the TTL runs out");
    // The loss fires a TTL after the acquisition *began*, less its time and the drift; each
    // node's key was set before the acquisition returned, so it is gone one TTL after the loss,
    // however slow the acquisition was on a loaded machine.
    tokio::time::sleep(Duration::from_millis(200 + 50)).await;
    let b = hold(
        &locks_b,
        &key,
        &locks_b.options().ttl(Duration::from_secs(10)),
    )
    .await;
    assert!(
        b.fence() > a.fence(),
        "B's fence {} must exceed A's {}",
        b.fence(),
        a.fence()
    );

    let report = a.release().await.unwrap();
    assert!(
        report.refused(),
        "A's late release must delete nothing: {report:?}"
    );
    let now_held = LockHolder::from_value(
        report
            .current()
            .expect("the release reports who holds it now"),
    )
    .unwrap();
    assert_eq!(now_held.nonce, b.holder().nonce);

    let view = locks_b.inspect(&key).await;
    assert_eq!(
        view.holder().map(|h| &h.nonce),
        Some(&b.holder().nonce),
        "{view:?}"
    );
    assert_eq!(
        view.agreeing_nodes(),
        lock_urls(&config).len(),
        "B's lock is intact on every node: {view:?}"
    );
    assert!(b.release().await.unwrap().released());
    cleanup(&lock_urls(&config), &key).await;
}

#[tokio::test]
async fn single_late_release_after_expiry_leaves_next_holder_intact() {
    late_release_leaves_next_holder_intact(single_config()).await;
}

#[tokio::test]
async fn redlock_late_release_after_expiry_leaves_next_holder_intact() {
    late_release_leaves_next_holder_intact(stack_redlock_config()).await;
}

// ---------------------------------------------------------------------------------------------
// watchdog
// ---------------------------------------------------------------------------------------------

async fn watchdog_keeps_lock_for_three_ttls(config: Config) {
    let locks = lock_service(&config);
    let ttl = Duration::from_millis(600);
    let key = test_key("dog");
    let guard = hold(&locks, &key, &locks.options().ttl(ttl)).await;
    let started = Instant::now();
    while started.elapsed() < ttl * 3 + Duration::from_millis(200) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let view = locks.inspect(&key).await;
        assert_eq!(
            view.holder(),
            Some(guard.holder()),
            "lost after {:?}: {view:?}",
            started.elapsed()
        );
        assert!(
            view.pttl_ms().is_some_and(|p| p > 0 && p <= 600),
            "{view:?}"
        );
        assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    }
    assert!(
        guard.renewals() >= 4,
        "only {} renewals in 2s of a 600ms lock",
        guard.renewals()
    );
    assert!(guard.release().await.unwrap().released());

    // The control: the same lock without the watchdog is gone after one TTL.
    let guard = hold(&locks, &key, &locks.options().ttl(ttl).without_watchdog()).await;
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    assert!(locks.inspect(&key).await.is_free());
    assert!(guard.is_lost());
    assert!(guard.release().await.unwrap().refused());
    cleanup(&lock_urls(&config), &key).await;
}

#[tokio::test]
async fn single_watchdog_keeps_lock_alive_for_three_ttls() {
    watchdog_keeps_lock_for_three_ttls(single_config()).await;
}

#[tokio::test]
async fn redlock_watchdog_keeps_lock_alive_for_three_ttls() {
    watchdog_keeps_lock_for_three_ttls(stack_redlock_config()).await;
}

#[tokio::test]
async fn watchdog_stops_at_the_renewal_cap() {
    let mut config = single_config();
    config.lock.max_renewals = 2;
    let locks = lock_service(&config);
    let key = test_key("cap");
    let ttl = Duration::from_millis(300);
    let guard = hold(&locks, &key, &locks.options().ttl(ttl)).await;
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("a capped lock is lost");
    assert_eq!(guard.renewals(), 2);
    assert!(
        guard.lost_reason().unwrap().contains("cap of 2 renewals"),
        "{:?}",
        guard.lost_reason()
    );
    cleanup(&lock_urls(&config), &key).await;
}

/// A real process holds the lock (with its watchdog) and is SIGKILLed: its lock disappears
/// within one TTL, and its heartbeat within one heartbeat TTL.
#[tokio::test]
async fn killed_holder_lock_disappears_within_one_ttl() {
    let config = single_config();
    let key = test_key("kill");
    let ttl = Duration::from_secs(1);
    let local = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .arg("--config")
        .arg(&local)
        .args(["lock-hold", &key, "--ttl", "1s"])
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .env("IDEMGUARD_INSTANCE__HEARTBEAT_TTL", "1500ms")
        .env("IDEMGUARD_LOCK__MODE", "single")
        .env("IDEMGUARD_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn idemguard lock-hold");
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(30), line)
        .await
        .expect("the holder reports within 30s")
        .unwrap()
        .unwrap();
    let held: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(held["held"], true, "{line}");
    let value = held["value"].as_str().unwrap().to_string();
    let instance = held["instance"].as_str().unwrap().to_string();

    let locks = lock_service(&config);
    assert_eq!(
        get(&config.redis.url, &key).await.as_deref(),
        Some(value.as_str())
    );
    assert!(locks.liveness().is_alive(&instance).await.unwrap());
    // Held past two TTLs: the child's watchdog renews it.
    tokio::time::sleep(ttl * 2 + Duration::from_millis(300)).await;
    assert_eq!(
        get(&config.redis.url, &key).await.as_deref(),
        Some(value.as_str()),
        "the live holder's watchdog must keep it"
    );

    child.kill().unwrap(); // SIGKILL: no release, no goodbye
    child.wait().unwrap();
    let killed = Instant::now();
    let mut gone_after = None;
    while killed.elapsed() < Duration::from_secs(3) {
        if get(&config.redis.url, &key).await.is_none() {
            gone_after = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gone_after = gone_after.expect("the dead holder's lock never expired");
    assert!(
        gone_after <= ttl + Duration::from_millis(100),
        "gone only after {gone_after:?} (TTL {ttl:?})"
    );
    assert!(
        gone_after >= Duration::from_millis(200),
        "gone after {gone_after:?}: it expired, the dead process did not release it"
    );

    let mut dead_after = None;
    while killed.elapsed() < Duration::from_secs(4) {
        if !locks.liveness().is_alive(&instance).await.unwrap() {
            dead_after = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dead_after = dead_after.expect("the dead holder kept a heartbeat");
    assert!(
        dead_after <= Duration::from_millis(1600),
        "heartbeat gone only after {dead_after:?}"
    );
    cleanup(&lock_urls(&config), &key).await;
}

#[tokio::test]
async fn failed_renewal_fires_the_loss_signal() {
    // 1. The value is gone (an operator deleted it, or it was taken over): the next renewal
    //    finds it not ours.
    let config = single_config();
    let locks = lock_service(&config);
    let key = test_key("gone");
    let ttl = Duration::from_millis(600);
    let guard = hold(&locks, &key, &locks.options().ttl(ttl)).await;
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw(&config.redis.url).await)
        .await
        .unwrap();
    tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("the loss signal fires at the next renewal");
    assert!(
        guard
            .lost_reason()
            .unwrap()
            .contains("no longer holds our value"),
        "{:?}",
        guard.lost_reason()
    );
    assert!(guard.remaining_validity().is_zero());
    cleanup(&lock_urls(&config), &key).await;

    // 2. The node dies: renewals fail, and the signal fires before the validity runs out.
    let mut server = RedisServer::start();
    let mut config = single_config();
    config.redis.url = server.url();
    config.redis.command_timeout = Duration::from_millis(200);
    let locks = lock_service(&config);
    let ttl = Duration::from_millis(900);
    let acquired = Instant::now();
    let guard = hold(&locks, &key, &locks.options().ttl(ttl)).await;
    server.kill();
    tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("the loss signal fires before the TTL runs out");
    assert!(
        acquired.elapsed() < ttl,
        "fired after {:?}",
        acquired.elapsed()
    );
    let reason = guard.lost_reason().unwrap();
    assert!(
        reason.contains("validity fell below") && reason.contains(&server.addr()),
        "{reason}"
    );
}

// ---------------------------------------------------------------------------------------------
// RedLock with nodes down (private servers)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn redlock_acquires_with_two_of_five_nodes_down() {
    let mut servers = start_servers(5);
    let config = redlock_config(servers.iter().map(|s| s.url()).collect());
    let locks = lock_service(&config);
    let warm = hold(&locks, &test_key("warm"), &locks.options()).await; // connections open
    drop(warm);
    servers[1].kill();
    servers[3].kill();
    let key = test_key("two-down");
    let guard = hold(&locks, &key, &locks.options()).await;
    let view = locks.inspect(&key).await;
    assert_eq!(view.agreeing_nodes(), 3, "{view:?}");
    assert_eq!(view.holder(), Some(guard.holder()));
    let down: Vec<&str> = view
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeLockState::Unreachable { .. }))
        .map(|n| n.node.as_str())
        .collect();
    assert_eq!(down, vec![servers[1].addr(), servers[3].addr()]);
    let report = guard.release().await.unwrap();
    assert!(report.released(), "{report:?}");
    for s in servers.iter().filter(|s| s.is_running()) {
        assert_eq!(get(&s.url(), &key).await, None);
    }
}

#[tokio::test]
async fn redlock_with_three_of_five_down_fails_fast_and_leaves_nothing() {
    let mut servers = start_servers(5);
    let config = redlock_config(servers.iter().map(|s| s.url()).collect());
    let locks = lock_service(&config);
    drop(hold(&locks, &test_key("warm"), &locks.options()).await);
    for i in [0, 2, 4] {
        servers[i].kill();
    }
    let key = test_key("three-down");
    // Many slow tries allowed: failing fast means not using them when a quorum is impossible.
    let options = locks
        .options()
        .attempts(20)
        .retry_delay(Duration::from_millis(500));
    let started = Instant::now();
    let err = locks
        .acquire_with(&key, &options)
        .await
        .expect_err("no quorum with 2 of 5 nodes");
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1000),
        "took {took:?}: it must fail fast"
    );
    match &err {
        LockError::NoQuorum {
            granted,
            quorum,
            nodes,
            failures,
            ..
        } => {
            assert_eq!(
                (*granted, *quorum, *nodes, failures.len()),
                (2, 3, 5, 3),
                "{err}"
            );
        }
        other => panic!("expected NoQuorum, got {other}"),
    }
    let message = err.to_string();
    for i in [0, 2, 4] {
        assert!(message.contains(&servers[i].addr()), "{message}");
    }
    assert!(message.contains("scripts/stack status"), "{message}");
    for i in [1, 3] {
        assert_eq!(
            get(&servers[i].url(), &key).await,
            None,
            "a lock was left on {}",
            servers[i].addr()
        );
    }
}

/// Per-node fence counters drift apart; the quorum's maximum is written back, so a later holder
/// whose quorum misses the node with the highest counter still gets a larger token.
#[tokio::test]
async fn redlock_fence_tokens_strictly_increase_across_holders() {
    let mut servers = start_servers(5);
    let config = redlock_config(servers.iter().map(|s| s.url()).collect());
    let key = test_key("fence");
    // Above the clock the other nodes' new counters start from (microseconds, ~1.8e15).
    const HIGH: i64 = 4_000_000_000_000_000;
    let _: () = redis::cmd("SET")
        .arg(keys::fence(&key))
        .arg(HIGH)
        .query_async(&mut raw(&servers[0].url()).await)
        .await
        .unwrap();

    let a_locks = lock_service(&config);
    let a = hold(&a_locks, &key, &a_locks.options()).await;
    assert_eq!(a.fence().0, HIGH + 1, "the maximum over the quorum");
    for s in &servers {
        let counter: i64 = redis::cmd("GET")
            .arg(keys::fence(&key))
            .query_async(&mut raw(&s.url()).await)
            .await
            .unwrap();
        assert_eq!(
            counter,
            HIGH + 1,
            "node {} was not raised to the quorum's token",
            s.addr()
        );
    }
    let mut last = a.fence();
    assert!(a.release().await.unwrap().released());

    servers[0].kill(); // the node that had the high counter
    for holder in 0..5 {
        let locks = lock_service(&config); // a new process each time
        let g = hold(&locks, &key, &locks.options()).await;
        assert!(
            g.fence() > last,
            "holder {holder}: fence {} after {last}",
            g.fence()
        );
        last = g.fence();
        assert!(g.release().await.unwrap().released());
    }
    assert_eq!(
        lock_service(&config).current_fence(&key).await.unwrap(),
        Some(last)
    );
}

#[tokio::test]
async fn single_node_down_is_named_with_a_hint() {
    let mut server = RedisServer::start();
    let mut config = single_config();
    config.redis.url = server.url();
    let locks = lock_service(&config);
    drop(hold(&locks, &test_key("warm"), &locks.options()).await);
    server.kill();
    for _ in 0..2 {
        // first on the dropped connection, then on a refused reconnect
        let err = locks
            .acquire(&test_key("down"))
            .await
            .expect_err("the node is down");
        let message = err.to_string();
        assert!(matches!(err, LockError::Node(_)), "{message}");
        assert!(
            message.contains(&format!("redis node {}", server.addr()))
                && message.contains("scripts/stack status"),
            "{message}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let err = locks
        .liveness()
        .is_alive("nobody")
        .await
        .expect_err("the main redis is down");
    assert!(err.to_string().contains(&server.addr()), "{err}");
}

// ---------------------------------------------------------------------------------------------
// liveness, contention, the console's read API, trace events
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn heartbeat_tells_a_live_instance_from_a_dead_one() {
    let mut config = single_config();
    config.instance.heartbeat_ttl = Duration::from_millis(600);
    let locks = lock_service(&config);
    let me = Instance::current();
    let heartbeat = locks.liveness().start(&me).await.unwrap();
    assert!(locks.liveness().is_alive(&me.id).await.unwrap());
    let beat = locks
        .liveness()
        .beat_of(&me.id)
        .await
        .unwrap()
        .expect("the beat is readable");
    assert_eq!(beat.instance, me);
    tokio::time::sleep(Duration::from_millis(1300)).await; // two heartbeat TTLs: refreshed
    assert!(locks.liveness().is_alive(&me.id).await.unwrap());
    let other = Instance::current();
    assert_eq!(
        locks
            .liveness()
            .are_alive(&[me.id.clone(), other.id.clone()])
            .await
            .unwrap(),
        vec![true, false]
    );

    drop(heartbeat); // like a crash: no more beats, the key expires
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!locks.liveness().is_alive(&me.id).await.unwrap());

    let heartbeat = locks.liveness().start(&other).await.unwrap();
    heartbeat.stop().await.unwrap(); // a clean shutdown is dead at once
    assert!(!locks.liveness().is_alive(&other.id).await.unwrap());
}

#[tokio::test]
async fn contended_acquire_names_the_holder_and_waits_a_bounded_time() {
    let config = single_config();
    let (a_locks, b_locks) = (lock_service(&config), lock_service(&config));
    let key = test_key("busy");
    let a = hold(&a_locks, &key, &a_locks.options()).await;
    let started = Instant::now();
    let options = b_locks
        .options()
        .attempts(4)
        .retry_delay(Duration::from_millis(40));
    match b_locks.acquire_with(&key, &options).await.unwrap() {
        Acquisition::Contended(c) => {
            assert_eq!(c.holder.as_ref(), Some(a.holder()));
            assert_eq!(c.attempts, 4);
            assert!(c.pttl_ms.is_some_and(|p| p > 0), "{c:?}");
        }
        Acquisition::Held(_) => panic!("two holders"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(3 * 40 + 400),
        "bounded waiting took {:?}",
        started.elapsed()
    );
    // Waiting long enough gets it once A is done. The release waits until B has really tried
    // the busy lock: its attempt is seen on the node itself (MONITOR, filtered by the key; A's
    // renewals carry A's nonce), not assumed after a sleep.
    let mut attempts_on_node = redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_async_monitor()
        .await
        .unwrap()
        .into_on_message::<String>();
    let b_wait = tokio::spawn({
        let (b_locks, key) = (b_locks.clone(), key.clone());
        async move {
            b_locks
                .acquire_with(
                    &key,
                    &b_locks
                        .options()
                        .attempts(200)
                        .retry_delay(Duration::from_millis(10)),
                )
                .await
        }
    });
    let a_nonce = a.holder().nonce.clone();
    tokio::time::timeout(Duration::from_secs(10), async {
        use futures::StreamExt;
        while let Some(line) = attempts_on_node.next().await {
            if line.contains(&key) && !line.contains(&a_nonce) {
                return;
            }
        }
    })
    .await
    .expect("B tried the busy lock within 10 s");
    assert!(!b_wait.is_finished(), "B waits while A holds");
    assert!(a.release().await.unwrap().released());
    let b = b_wait
        .await
        .unwrap()
        .unwrap()
        .held()
        .expect("B gets it after A released");
    assert!(b.release().await.unwrap().released());
    cleanup(&lock_urls(&config), &key).await;
}

#[tokio::test]
async fn scan_lists_holders_ttls_and_foreign_values() {
    let config = single_config();
    let locks = lock_service(&config);
    let keys: Vec<String> = (0..3).map(|_| test_key("scan")).collect();
    let mut guards = Vec::new();
    for k in &keys {
        guards.push(hold(&locks, k, &locks.options().ttl(Duration::from_secs(20))).await);
    }
    let foreign = test_key("foreign");
    let _: () = redis::cmd("SET")
        .arg(&foreign)
        .arg("held-by-some-other-tool")
        .query_async(&mut raw(&config.redis.url).await)
        .await
        .unwrap();

    let scan = locks.scan_locks(1_000_000).await;
    assert!(
        scan.nodes.iter().all(|n| n.error.is_none()),
        "{:?}",
        scan.nodes
    );
    for (k, g) in keys.iter().zip(&guards) {
        let view = scan
            .locks
            .iter()
            .find(|v| &v.key == k)
            .unwrap_or_else(|| panic!("{k} not listed"));
        assert_eq!(view.holder(), Some(g.holder()));
        assert_eq!(view.fence(), Some(g.fence()));
        assert!(
            view.pttl_ms().is_some_and(|p| p > 10_000 && p <= 20_000),
            "{view:?}"
        );
        assert_eq!(view.ids().0.as_deref(), k.strip_prefix("lock:order:"));
    }
    let view = scan
        .locks
        .iter()
        .find(|v| v.key == foreign)
        .expect("a foreign value is listed too");
    assert_eq!(view.holder(), None);
    assert_eq!(view.pttl_ms(), Some(-1), "no TTL: the console flags it");
    assert_eq!(view.values(), vec!["held-by-some-other-tool"]);
    assert!(locks
        .release_if_value(&foreign, "held-by-some-other-tool")
        .await
        .unwrap()
        .released());

    for (k, g) in keys.iter().zip(guards) {
        assert!(g.release().await.unwrap().released());
        cleanup(&lock_urls(&config), k).await;
    }
    cleanup(&lock_urls(&config), &foreign).await;
}

#[tokio::test]
async fn redlock_per_node_view_release_and_fence_bump() {
    let mut servers = start_servers(5);
    let config = redlock_config(servers.iter().map(|s| s.url()).collect());
    let locks = lock_service(&config);
    let key = test_key("view");
    let guard = hold(
        &locks,
        &key,
        &locks
            .options()
            .ttl(Duration::from_secs(30))
            .without_watchdog(),
    )
    .await;
    servers[4].kill();
    let scan = locks.scan_locks(1000).await;
    assert_eq!(
        scan.nodes.iter().filter(|n| n.error.is_some()).count(),
        1,
        "{:?}",
        scan.nodes
    );
    assert!(scan.nodes[4]
        .error
        .as_deref()
        .unwrap()
        .contains(&servers[4].addr()));
    let view = scan.locks.iter().find(|v| v.key == key).expect("listed");
    assert_eq!(view.agreeing_nodes(), 4);
    assert!(matches!(
        view.nodes[4].state,
        NodeLockState::Unreachable { .. }
    ));

    // The operator releases exactly what they saw; the fence moves past the holder's.
    let seen = view
        .values()
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    for v in &seen {
        assert!(locks.release_if_value(&key, v).await.unwrap().released());
    }
    assert!(locks.inspect(&key).await.holder().is_none());
    let bumped = locks.bump_fence(&key).await.unwrap();
    assert!(bumped > guard.fence(), "{bumped} > {}", guard.fence());
    // The stale holder comes back: its release deletes nothing, and a new holder's token is
    // above the bumped one.
    let report = guard.release().await.unwrap();
    assert!(report.refused(), "{report:?}");
    assert!(
        matches!(report.nodes[4].1, NodeRelease::Unreachable { .. }),
        "{report:?}"
    );
    let next = hold(&locks, &key, &locks.options()).await;
    assert!(next.fence() > bumped);
    assert!(next.release().await.unwrap().released());
}

/// Every decision of the lock layer is a trace event carrying the orderNo from the key.
/// The capturing subscriber is global (a thread-scoped one misses events when other tests'
/// threads cache the callsites as disabled); this test reads only the events of its own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_emits_a_trace_event_with_its_ids() {
    let captured = common::log::test_log();

    let config = single_config();
    let locks = lock_service(&config);
    let key = test_key("trace");
    let order_no = key.strip_prefix("lock:order:").unwrap().to_string();
    let guard = hold(
        &locks,
        &key,
        &locks.options().ttl(Duration::from_millis(300)),
    )
    .await;
    assert!(locks.acquire(&key).await.unwrap().held().is_none()); // contended
    tokio::time::sleep(Duration::from_millis(250)).await; // one renewal
    let mut stale = guard.holder().clone();
    stale.nonce = "stale".into();
    assert!(locks
        .release_if_value(&key, &stale.to_value())
        .await
        .unwrap()
        .refused());
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw(&config.redis.url).await)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost");
    let second = hold(&locks, &key, &locks.options()).await;
    assert!(second.release().await.unwrap().released());

    let ours: Vec<common::log::Seen> = captured
        .trace_events()
        .into_iter()
        .filter(|s| s.order_no == order_no)
        .collect();
    let outcomes: Vec<&str> = ours.iter().map(|s| s.outcome.as_str()).collect();
    for want in [
        "lock_acquired",
        "lock_contended",
        "lock_renewed",
        "lock_release_refused",
        "lock_lost",
        "lock_released",
    ] {
        assert!(outcomes.contains(&want), "no {want} in {outcomes:?}");
    }
    for seen in &ours {
        assert!(seen.detail.contains(&key), "{seen:?}");
    }
    drop(guard);
    cleanup(&lock_urls(&config), &key).await;
}

#[test]
fn futures_of_the_lock_layer_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    let config = single_config();
    let locks = lock_service(&config);
    assert_send(&locks.acquire("lock:order:x"));
    assert_send(&locks.scan_locks(10));
    assert_send(&locks.release_if_value("lock:order:x", "v"));
    assert_send(&locks.bump_fence("lock:order:x"));
    assert_send(&locks.liveness().is_alive("x"));
}

/// Concurrent operations on one node are coalesced into few script calls, and every caller
/// still gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_operations_on_a_node_are_coalesced() {
    let server = RedisServer::start();
    let mut config = single_config();
    config.redis.url = server.url();
    let locks = lock_service(&config);
    let mut admin = raw(&server.url()).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .unwrap();
    let started_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let key = format!("lock:order:Tcoalesce{i}");
                let g = hold(&locks, &key, &locks.options()).await;
                assert!(
                    g.fence().0 > started_us,
                    "{key}: a key's first counter starts from the clock in microseconds, got {}",
                    g.fence()
                );
                assert_eq!(g.value(), locks.inspect(&key).await.values()[0]);
                assert!(g.release().await.unwrap().released());
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .unwrap();
    let calls: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no EVALSHA in {stats}"));
    // 400 operations (200 acquires, 200 releases), plus a failed first call before the script
    // was loaded.
    assert!(
        calls < 300,
        "{calls} script calls for 400 operations: nothing was coalesced"
    );
}

/// The service works from a second runtime after the first one is gone (its batch drivers
/// died with it).
#[test]
fn a_lock_service_outlives_its_first_runtime() {
    let config = single_config();
    let locks = lock_service(&config);
    let key = test_key("runtimes");
    for _ in 0..2 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let g = hold(&locks, &key, &locks.options()).await;
            assert!(g.release().await.unwrap().released());
        });
        drop(runtime);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(cleanup(&lock_urls(&config), &key));
}

/// "(is it running? …)" is for a node that could not be reached; a node that answers "not
/// you" (a user and password it does not know) is up, and its error says it refused us, without the hint.
#[tokio::test]
async fn only_an_unreachable_node_gets_the_is_it_running_hint() {
    let mut config = single_config();
    config.redis.url = format!("redis://no-such-user-{}:pw@127.0.0.1:6379", unique_suffix());
    let refused = lock_service(&config)
        .acquire(&test_key("wrongpass"))
        .await
        .expect_err("a user that does not exist cannot take a lock")
        .to_string();
    assert!(refused.contains("refused us"), "{refused}");
    assert!(
        refused.to_lowercase().contains("authentication"),
        "{refused}"
    );
    assert!(!refused.contains("is it running?"), "{refused}");
    assert!(
        !refused.contains(":pw@"),
        "no password in the error: {refused}"
    );

    // A port nobody listens on: unreachable, with the hint.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    config.redis.url = format!("redis://127.0.0.1:{port}");
    let down = lock_service(&config)
        .acquire(&test_key("down"))
        .await
        .expect_err("nothing listens there")
        .to_string();
    assert!(down.contains("is it running?"), "{down}");
}
