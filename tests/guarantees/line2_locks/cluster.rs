//! The lock layer, the heartbeats, the fast path, `idemguard locks` and `release-lock` on the
//! real three-master Redis Cluster of `scripts/stack up` (127.0.0.1:7001-7003). Where a key
//! lives is checked independently of idemguard: each master is asked directly (`EXISTS`), and
//! the slot is what the server's `CLUSTER KEYSLOT` answers. Every test uses its own key prefix.
//! The cluster not running fails every test loudly.

use crate::common;
use crate::console::fixture as console_fixture;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use console_fixture::{press, pump_until, screen, type_str};
use crossterm::event::KeyCode;
use idemguard::api::fast_path::{FastPath, FastPathValue};
use idemguard::config::{Config, Dialect};
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Backends;
use idemguard::console::tui::keymap::View;
use idemguard::contracts::{keys, Instance};
use idemguard::db::Database;
use idemguard::lock::{Acquisition, Liveness, LockGuard, Locks, NodeRelease};
use idemguard::ops::{self, ActionOutcome, Actions};
use idemguard::trace::Tracer;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use common::locks::locks_for;

const MASTERS: [&str; 3] = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"];
/// Only one seed: the client finds the other masters, and keys on them are reached by
/// following the cluster's map (MOVED/ASK), never because they were configured.
const CLUSTER_URL: &str = "redis+cluster://127.0.0.1:7001";

fn cluster_config() -> Config {
    let mut config = common::local_config();
    config.redis.url = CLUSTER_URL.into();
    config
}

/// The cluster tests' holders are `clu-…`: the listings are checked by that prefix.
fn instance(tag: &str) -> Instance {
    common::locks::instance_in("clu", tag)
}

async fn master(addr: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| {
            panic!("cluster master {addr} is not reachable ({e}); start it: scripts/stack up")
        })
}

/// How many masters hold `key`, each asked directly (a master that does not serve its slot
/// answers MOVED: not there).
async fn masters_holding(key: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    for m in MASTERS {
        let n: Result<i64, _> = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut master(m).await)
            .await;
        match n {
            Ok(1) => found.push(m),
            Ok(_) => {}
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Moved) => {}
            Err(e) => panic!("EXISTS {key} on {m}: {e}"),
        }
    }
    found
}

/// The master that holds `key`; panics unless exactly one has it.
async fn holder_of(key: &str) -> &'static str {
    let found = masters_holding(key).await;
    assert_eq!(found.len(), 1, "{key} is on {found:?}");
    found[0]
}

async fn keyslot(key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut master(MASTERS[0]).await)
        .await
        .unwrap()
}

/// Held by every test that reads where keys live (the slot map, a master asked directly) for
/// as long as it runs; taken alone by a test that moves a slot ([`SlotMove`]). A key of another
/// test can hash into the moved slot by chance: it would then be found on another master, or
/// answered with ASK.
static SLOT_MAP: RwLock<()> = RwLock::const_new(());

/// The cluster is up and serves every slot, and no slot moves until the guard is dropped.
async fn stable_cluster() -> RwLockReadGuard<'static, ()> {
    let stable = SLOT_MAP.read().await;
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut master(MASTERS[0]).await)
        .await
        .unwrap();
    assert!(
        info.contains("cluster_state:ok"),
        "the stack's Redis Cluster is not ok (scripts/stack up): {info}"
    );
    stable
}

/// (first slot, last slot, master host:port) of a `CLUSTER SLOTS` answer.
fn slot_ranges(reply: &redis::Value) -> Vec<(i64, i64, String)> {
    let redis::Value::Array(ranges) = reply else {
        panic!("CLUSTER SLOTS: {reply:?}")
    };
    let mut slots = Vec::new();
    for r in ranges {
        let redis::Value::Array(p) = r else { panic!() };
        let (redis::Value::Int(a), redis::Value::Int(b), redis::Value::Array(m)) =
            (&p[0], &p[1], &p[2])
        else {
            panic!("{p:?}")
        };
        let redis::Value::Int(port) = &m[1] else {
            panic!("{m:?}")
        };
        slots.push((*a, *b, format!("127.0.0.1:{port}")));
    }
    slots
}

/// `n` lock keys under `prefix` per master (by the server's slot map), so that every test
/// touches all three.
async fn keys_on_every_master(prefix: &str, n: usize) -> BTreeMap<&'static str, Vec<String>> {
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut master(MASTERS[0]).await)
        .await
        .unwrap();
    let slots = slot_ranges(&reply);
    let mut out: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut i = 0;
    while out.values().map(Vec::len).sum::<usize>() < 3 * n {
        let key = keys::order_lock(&format!("{prefix}-{i}"));
        i += 1;
        let slot = keyslot(&key).await;
        let (_, _, m) = slots
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .unwrap();
        let m = MASTERS.iter().find(|x| *x == m).expect("a stack master");
        let list = out.entry(m).or_default();
        if list.len() < n {
            list.push(key);
        }
    }
    out
}

async fn hold(locks: &Locks, key: &str, ttl: Duration) -> LockGuard {
    let options = locks.options().ttl(ttl).without_watchdog();
    match locks.acquire_with(key, &options).await.expect("acquire") {
        Acquisition::Held(g) => g,
        Acquisition::Contended(c) => panic!("{key} unexpectedly held: {c:?}"),
    }
}

async fn cleanup(keys: &[String]) {
    for k in keys {
        let m = MASTERS;
        for addr in m {
            let _: Result<i64, _> = redis::cmd("DEL")
                .arg(k)
                .arg(keys::fence(k))
                .query_async(&mut master(addr).await)
                .await;
        }
    }
}

#[tokio::test]
async fn locks_on_every_master_are_taken_and_released_in_one_batch() {
    let _stable = stable_cluster().await;
    let prefix = format!("clu-batch{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 40).await;
    let all: Vec<String> = by_master.values().flatten().cloned().collect();
    let locks = locks_for(&cluster_config(), &instance("batch"));
    // All at once: the node's batches mix keys of many slots, split per slot on the way out.
    let guards =
        futures::future::join_all(all.iter().map(|k| hold(&locks, k, Duration::from_secs(30))))
            .await;
    for (m, list) in &by_master {
        for k in list {
            assert_eq!(holder_of(k).await, *m, "{k}");
            assert_eq!(holder_of(&keys::fence(k)).await, *m, "the fence of {k}");
        }
    }
    // A second holder is told it is taken, with the first one's value.
    let other = locks_for(&cluster_config(), &instance("other"));
    for k in by_master.values().map(|l| &l[0]) {
        let options = other.options().attempts(1);
        match other.acquire_with(k, &options).await.unwrap() {
            Acquisition::Contended(c) => assert!(c.holder.is_some(), "{c:?}"),
            Acquisition::Held(_) => panic!("{k} taken twice"),
        }
    }
    for g in guards {
        let report = g.release().await.expect("release");
        assert!(report.released(), "{report:?}");
    }
    for k in &all {
        assert_eq!(masters_holding(k).await, Vec::<&str>::new(), "{k}");
    }
    cleanup(&all).await;
}

#[tokio::test]
async fn fence_tokens_increase_per_key_on_every_master() {
    let _stable = stable_cluster().await;
    let prefix = format!("clu-fence{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 2).await;
    let all: Vec<String> = by_master.values().flatten().cloned().collect();
    let locks = locks_for(&cluster_config(), &instance("fence"));
    for k in &all {
        let mut last = 0;
        for _ in 0..3 {
            let g = hold(&locks, k, Duration::from_secs(10)).await;
            assert!(g.fence().0 > last, "{k}: {} after {last}", g.fence().0);
            last = g.fence().0;
            g.release().await.unwrap();
        }
        assert_eq!(locks.current_fence(k).await.unwrap().unwrap().0, last);
        let bumped = locks.bump_fence(k).await.unwrap();
        assert!(bumped.0 > last, "{k}: a bump goes past every token");
        assert_eq!(
            hold(&locks, k, Duration::from_secs(10)).await.fence().0,
            bumped.0 + 1
        );
    }
    cleanup(&all).await;
}

#[tokio::test]
async fn heartbeats_and_the_fast_path_work_across_slots() {
    let _stable = stable_cluster().await;
    let config = cluster_config();
    let liveness = Liveness::from_config(&config).unwrap();
    let who: Vec<Instance> = (0..12).map(|i| instance(&format!("beat{i}"))).collect();
    let mut beats = Vec::new();
    for w in &who {
        beats.push(liveness.start(w).await.expect("heartbeat"));
    }
    let homes: std::collections::BTreeSet<&str> = futures::future::join_all(
        who.iter()
            .map(|w| async move { holder_of(&keys::instance(&w.id)).await }),
    )
    .await
    .into_iter()
    .collect();
    assert!(homes.len() > 1, "12 heartbeats on one master: {homes:?}");
    let live = liveness.live_instances().await.unwrap();
    let ids: Vec<String> = who.iter().map(|w| w.id.clone()).collect();
    assert!(ids.iter().all(|id| live.contains(id)), "{live:?}");
    let mut asked = ids.clone();
    asked.push("clu-nobody".into());
    let alive = liveness.are_alive(&asked).await.unwrap();
    assert_eq!(alive, [vec![true; 12], vec![false]].concat());
    for b in beats {
        b.stop().await.unwrap();
    }
    assert!(!liveness.is_alive(&ids[0]).await.unwrap());

    let mut redis = common::local_config().redis;
    redis.url = CLUSTER_URL.into();
    redis.command_timeout = Duration::from_secs(1);
    let fast = FastPath::connect(&redis)
        .await
        .expect("fast path on the cluster");
    let ttl = Duration::from_secs(30);
    let mut keys_seen = Vec::new();
    for i in 0..6 {
        let request_id = format!("clu-fp-{i}-{}", common::unique_suffix());
        let mine = FastPathValue::Processing {
            hash: "h".into(),
            owner: "me".into(),
            nonce: format!("n{i}"),
        };
        assert_eq!(fast.claim(&request_id, &mine, ttl).await.unwrap(), None);
        assert_eq!(
            fast.claim(&request_id, &mine, ttl).await.unwrap(),
            Some(mine.clone())
        );
        fast.drop_placeholder(&request_id, &mine).await.unwrap();
        assert_eq!(fast.claim(&request_id, &mine, ttl).await.unwrap(), None);
        keys_seen.push(keys::idempotency_fast_path(&request_id));
    }
    cleanup(&keys_seen).await;
}

fn idemguard(config: &Config, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .arg("--config")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"))
        .args(args)
        .env("IDEMGUARD_REDIS__URL", CLUSTER_URL)
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &config.kafka.trace_topic)
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

/// For the tests that run the binary's actions: the stack's config on a migrated database of
/// the test's own with a fresh trace topic (the audit rows and trace events stay the test's),
/// the database, and the cluster's config on that database.
async fn with_database() -> (Config, Database, Config) {
    let (mut config, db) = common::migrated_database(Dialect::Postgres).await;
    let topics = common::fresh_topics(&config, &["idemguard.trace"]).await;
    config.kafka.trace_topic = topics[0].clone();
    let mut cluster = cluster_config();
    cluster.database.url = config.database.url.clone();
    (config, db, cluster)
}

/// `release-lock KEY --expect-value VALUE --bump-fence` through the binary: it exits 0 and its
/// JSON says done; the JSON.
fn release_with_fence_bump(config: &Config, key: &str, value: &str) -> serde_json::Value {
    let (code, out) = idemguard(
        config,
        &[
            "release-lock",
            key,
            "--expect-value",
            value,
            "--bump-fence",
            "--allow-actions",
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(j["outcome"], "done", "{j}");
    j
}

/// `release-lock` with the value of an earlier acquisition of the same holder (another nonce):
/// refused with exit code 5, nothing deleted.
fn release_refused_for_an_earlier_value(config: &Config, key: &str, value: &str) {
    let mut earlier = idemguard::contracts::LockHolder::from_value(value).unwrap();
    earlier.nonce = "0".repeat(32);
    let (code, out) = idemguard(
        config,
        &[
            "release-lock",
            key,
            "--expect-value",
            &earlier.to_value(),
            "--allow-actions",
        ],
    );
    assert_eq!(code, Some(5), "another value deletes nothing: {out}");
}

#[tokio::test]
async fn locks_json_lists_every_masters_locks_with_node_and_slot() {
    let _stable = stable_cluster().await;
    let prefix = format!("clu-list{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 3).await;
    let all: Vec<String> = by_master.values().flatten().cloned().collect();
    let locks = locks_for(&cluster_config(), &instance("list"));
    let mut guards = Vec::new();
    for k in &all {
        guards.push(hold(&locks, k, Duration::from_secs(60)).await);
    }
    let (code, out) = idemguard(&common::local_config(), &["locks", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let nodes = j["data"]["nodes"].as_array().unwrap();
    let cluster_rows: Vec<&str> = nodes
        .iter()
        .filter(|n| n["role"] == "cluster")
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(cluster_rows, MASTERS.to_vec(), "{nodes:?}");
    assert!(nodes.iter().all(|n| n["ok"] == true), "{nodes:?}");
    let listed = j["data"]["locks"].as_array().unwrap();
    for (m, list) in &by_master {
        for k in list {
            let l = listed
                .iter()
                .find(|l| l["key"] == k.as_str())
                .unwrap_or_else(|| panic!("{k} not listed"));
            assert_eq!(l["node"], *m, "{l}");
            assert_eq!(holder_of(k).await, *m);
            assert_eq!(l["slot"].as_i64(), Some(keyslot(k).await), "{l}");
            assert_eq!(l["scope"], "single");
            assert!(l["holder"]["instance"]
                .as_str()
                .unwrap()
                .starts_with("clu-list"));
            assert!(l["fence_counter"].as_i64().unwrap() > 0, "{l}");
            assert_eq!(l["owner_alive"], false, "no heartbeat was started: {l}");
        }
    }
    let (code, table) = idemguard(&common::local_config(), &["locks"]);
    assert_eq!(code, Some(0), "{table}");
    let k = &by_master[MASTERS[2]][0];
    let row = table
        .lines()
        .find(|l| l.contains(k.as_str()))
        .expect(&table);
    assert!(
        row.contains(&format!("@{} slot {}", MASTERS[2], keyslot(k).await)),
        "{row}"
    );
    for g in guards {
        g.release().await.unwrap();
    }
    cleanup(&all).await;
}

#[tokio::test]
async fn release_lock_deletes_on_a_master_that_is_not_the_seed() {
    let _stable = stable_cluster().await;
    let (config, _db, cluster) = with_database().await;
    let prefix = format!("clu-release{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 1).await;
    let key = by_master[MASTERS[2]][0].clone();
    let dead = locks_for(&cluster, &instance("dead"));
    let guard = hold(&dead, &key, Duration::from_secs(60)).await;
    let value = guard.value();
    std::mem::forget(guard); // the holder "crashed"
    assert_eq!(holder_of(&key).await, MASTERS[2]);

    release_refused_for_an_earlier_value(&config, &key, &value);
    assert_eq!(holder_of(&key).await, MASTERS[2]);

    let j = release_with_fence_bump(&config, &key, &value);
    assert!(
        j.to_string().contains(MASTERS[2]),
        "the report names the key's master: {j}"
    );
    assert_eq!(masters_holding(&key).await, Vec::<&str>::new(), "{key}");
    cleanup(&[key]).await;
}

#[tokio::test]
async fn a_stale_holder_never_deletes_the_next_holders_lock() {
    let _stable = stable_cluster().await;
    let prefix = format!("clu-stale{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 1).await;
    let all: Vec<String> = by_master.values().flatten().cloned().collect();
    let config = cluster_config();
    let (a, b) = (
        locks_for(&config, &instance("a")),
        locks_for(&config, &instance("b")),
    );
    for k in &all {
        let stale = hold(&a, k, Duration::from_millis(100)).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let next = hold(&b, k, Duration::from_secs(30)).await;
        assert!(next.fence() > stale.fence());
        let stale_value = stale.value();
        let report = stale.release().await.unwrap();
        assert!(report.refused(), "{report:?}");
        assert!(
            matches!(&report.nodes[0].1, NodeRelease::NotHeld { current: Some(v) } if *v == next.value()),
            "{report:?}"
        );
        // An operator releasing the value they saw earlier deletes nothing either.
        let r = a.release_if_value(k, &stale_value).await.unwrap();
        assert!(!r.released());
        let view = b.inspect(k).await;
        assert_eq!(view.values(), vec![next.value().as_str()]);
        assert_eq!(view.slot, Some(keyslot(k).await as u16));
        assert_eq!(view.nodes[0].node, holder_of(k).await);
        assert!(next.release().await.unwrap().released());
    }
    cleanup(&all).await;
}

#[tokio::test]
async fn the_locks_view_shows_each_masters_locks_with_node_and_slot() {
    let _stable = stable_cluster().await;
    let prefix = format!("clu-view{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 2).await;
    let all: Vec<String> = by_master.values().flatten().cloned().collect();
    let config = cluster_config();
    let locks = locks_for(&config, &instance("view"));
    let mut guards = Vec::new();
    for k in &all {
        guards.push(hold(&locks, k, Duration::from_secs(60)).await);
    }
    let mut backends = Backends::spawn(&config);
    let mut app = App::new(&config, Some(backends.focus.clone()));
    type_str(&mut app, ":lk");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.ui.view, View::Locks);
    pump_until(
        &mut app,
        &mut backends.updates,
        "the cluster's locks",
        |a| {
            a.stores
                .locks
                .as_ref()
                .is_some_and(|s| all.iter().all(|k| s.locks.iter().any(|l| l.key == *k)))
        },
    )
    .await;
    type_str(&mut app, &format!("/{prefix}"));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.row_count(View::Locks), all.len());
    let s = screen(&mut app, 200, 40);
    for (m, list) in &by_master {
        for k in list {
            let row = s
                .lines()
                .find(|l| l.contains(k.as_str()))
                .unwrap_or_else(|| panic!("{k} not on screen:\n{s}"));
            let place = format!("@{m} slot {}", keyslot(k).await);
            assert!(row.contains(&place), "{place} not in {row}");
        }
    }
    backends.shutdown().await;
    for g in guards {
        g.release().await.unwrap();
    }
    cleanup(&all).await;
}

// ---------------------------------------------------------------------------------------------
// A slot moving between masters: the client follows ASK while it migrates and MOVED after
// ---------------------------------------------------------------------------------------------

/// A master as a slot move names it.
#[derive(Debug, Clone)]
struct ClusterMaster {
    addr: &'static str,
    id: String,
}

/// A plain (blocking) connection to one master: a slot move is also undone from `Drop`, which
/// cannot await.
fn connect_master(addr: &str) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(format!("redis://{addr}"))?
        .get_connection_with_timeout(Duration::from_secs(2))
}

fn on_master(addr: &str, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
    cmd.query(&mut connect_master(addr)?)
}

/// `GET key` asked of one master directly, after `ASKING` when `asking` (an importing master
/// serves its importing slot's keys only then).
fn direct_get(addr: &str, key: &str, asking: bool) -> redis::RedisResult<Option<String>> {
    let mut c = connect_master(addr)?;
    if asking {
        redis::cmd("ASKING").query::<()>(&mut c)?;
    }
    redis::cmd("GET").arg(key).query(&mut c)
}

fn is_redirect(r: &redis::RedisResult<Option<String>>, kind: redis::ServerErrorKind) -> bool {
    matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(kind))
}

/// The master `addr` says serves `slot`.
fn owner_seen_by(addr: &str, slot: u16) -> redis::RedisResult<String> {
    let reply = on_master(addr, redis::cmd("CLUSTER").arg("SLOTS"))?;
    Ok(slot_ranges(&reply)
        .into_iter()
        .find(|(a, b, _)| (*a..=*b).contains(&i64::from(slot)))
        .map(|(_, _, m)| m)
        .unwrap_or_default())
}

/// A slot only this test's keys live in (`lock:order:{clu-<what>-<unique>}-<i>`), moved from
/// its master `from` to the next master `to` by the test. Dropped — whether the test passed or
/// panicked — it puts the slot back on `from` with every key that is in it (the cluster is
/// shared by every test on the machine) and deletes this test's keys.
struct SlotMove {
    slot: u16,
    from: ClusterMaster,
    to: ClusterMaster,
    third: ClusterMaster,
    /// This test's lock keys, all in `slot`.
    keys: Vec<String>,
    /// Dropped after the slot is back.
    _alone: RwLockWriteGuard<'static, ()>,
}

impl SlotMove {
    /// `n` lock keys sharing a slot that holds no other key on any master and is not moving.
    async fn own(what: &str, n: usize) -> SlotMove {
        let alone = SLOT_MAP.write().await;
        for _ in 0..20 {
            let tag = format!("{{clu-{what}-{}}}", common::unique_suffix());
            let keys: Vec<String> = (0..n)
                .map(|i| keys::order_lock(&format!("{tag}-{i}")))
                .collect();
            let slot = keyslot(&keys[0]).await as u16;
            let mut in_use = false;
            for m in MASTERS {
                let count: i64 = redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(slot)
                    .query_async(&mut master(m).await)
                    .await
                    .unwrap();
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut master(m).await)
                    .await
                    .unwrap();
                in_use |= count > 0 || nodes.contains(&format!("[{slot}-"));
            }
            if in_use {
                continue;
            }
            let owner = owner_seen_by(MASTERS[0], slot).unwrap();
            let at = MASTERS
                .iter()
                .position(|m| *m == owner)
                .expect("a stack master");
            let [from, to, third] = [0, 1, 2].map(|i| {
                let addr = MASTERS[(at + i) % 3];
                let id = redis::cmd("CLUSTER")
                    .arg("MYID")
                    .query(&mut connect_master(addr).unwrap())
                    .unwrap();
                ClusterMaster { addr, id }
            });
            return SlotMove {
                slot,
                from,
                to,
                third,
                keys,
                _alone: alone,
            };
        }
        panic!("no free slot in 20 tries: the cluster holds keys in every slot tried");
    }

    fn setslot(&self, on: &ClusterMaster, state: &str, node: Option<&ClusterMaster>) {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(self.slot).arg(state);
        if let Some(n) = node {
            cmd.arg(&n.id);
        }
        on_master(on.addr, &cmd)
            .unwrap_or_else(|e| panic!("SETSLOT {} {state} on {}: {e}", self.slot, on.addr));
    }

    /// The slot migrates: `to` imports it, `from` answers ASK for a key it no longer has.
    fn start(&self) {
        self.setslot(&self.to, "IMPORTING", Some(&self.from));
        self.setslot(&self.from, "MIGRATING", Some(&self.to));
    }

    /// `keys` (of the slot) from `from` to `to`.
    fn migrate(&self, keys: &[String]) {
        let (host, port) = self.to.addr.split_once(':').unwrap();
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg(host)
            .arg(port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys);
        on_master(self.from.addr, &cmd).unwrap_or_else(|e| panic!("MIGRATE {keys:?}: {e}"));
    }

    /// The migration ends: every master says `to` serves the slot, `from` answers MOVED.
    fn finish(&self) {
        for m in [&self.to, &self.from, &self.third] {
            self.setslot(m, "NODE", Some(&self.to));
        }
    }

    /// The slot back on `from`, with every key in it; this test's keys deleted. Whatever state
    /// the test left (migrating, moved, half moved): the redis-cli --cluster way, backwards.
    fn restore(&self) -> Result<(), String> {
        let fail = |step: &str, e: redis::RedisError| format!("slot {}: {step}: {e}", self.slot);
        let set = |on: &ClusterMaster, state: &str, node: Option<&ClusterMaster>| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(self.slot).arg(state);
            if let Some(n) = node {
                cmd.arg(&n.id);
            }
            on_master(on.addr, &cmd)
                .map_err(|e| fail(&format!("SETSLOT {state} on {}", on.addr), e))
        };
        if owner_seen_by(self.to.addr, self.slot).map_err(|e| fail("CLUSTER SLOTS", e))?
            == self.to.addr
        {
            // `to` serves it: make every master say so (a move can stop half way), then
            // migrate it back.
            for m in [&self.from, &self.third] {
                if owner_seen_by(m.addr, self.slot).map_err(|e| fail("CLUSTER SLOTS", e))?
                    != self.to.addr
                {
                    set(m, "NODE", Some(&self.to))?;
                }
            }
            set(&self.from, "IMPORTING", Some(&self.to))?;
            set(&self.to, "MIGRATING", Some(&self.from))?;
        } else {
            // `from` still serves it: a migrating `from` would answer the keys sent back with
            // ASK, a stable one takes them.
            set(&self.from, "STABLE", None)?;
        }
        let mut to = connect_master(self.to.addr).map_err(|e| fail("connect", e))?;
        let on_to: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(self.slot)
            .arg(1000)
            .query(&mut to)
            .map_err(|e| fail("GETKEYSINSLOT", e))?;
        if !on_to.is_empty() {
            // ASKING: while `to` only imports the slot, it shows its keys to nobody else.
            let (host, port) = self.from.addr.split_once(':').unwrap();
            redis::pipe()
                .cmd("ASKING")
                .ignore()
                .cmd("MIGRATE")
                .arg(host)
                .arg(port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&on_to)
                .query::<()>(&mut to)
                .map_err(|e| fail("MIGRATE back", e))?;
        }
        // NODE on `from` first: from importing, it also raises its config epoch, so its claim
        // wins over `to`'s. STABLE clears what NODE leaves (an importing `to`, a migrating
        // `from` that still holds keys).
        for m in [&self.from, &self.to, &self.third] {
            set(m, "NODE", Some(&self.from))?;
        }
        for m in [&self.from, &self.to] {
            set(m, "STABLE", None)?;
        }
        let mut del = redis::cmd("DEL");
        for k in &self.keys {
            del.arg(k).arg(keys::fence(k));
        }
        on_master(self.from.addr, &del).map_err(|e| fail("DEL", e))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut settled = true;
            for m in MASTERS {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut connect_master(m).map_err(|e| fail("connect", e))?)
                    .map_err(|e| fail("CLUSTER NODES", e))?;
                settled &= owner_seen_by(m, self.slot).map_err(|e| fail("CLUSTER SLOTS", e))?
                    == self.from.addr
                    && !nodes.contains(&format!("[{}-", self.slot));
            }
            if settled {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "slot {} is not back on {} after 10 s",
                    self.slot, self.from.addr
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for SlotMove {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!(
                "CLUSTER LEFT CHANGED: {e}. Put slot {} back on {} by hand (redis-cli --cluster fix 127.0.0.1:7001)",
                self.slot, self.from.addr
            );
        }
    }
}

/// Hold `key` as a holder that then "crashes" (no release); its value and fence token.
async fn hold_and_abandon(locks: &Locks, key: &str) -> (String, i64) {
    let guard = hold(locks, key, Duration::from_secs(60)).await;
    let held = (guard.value(), guard.fence().0);
    std::mem::forget(guard);
    held
}

fn listed<'a>(locks_json: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    locks_json["data"]["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == key)
        .unwrap_or_else(|| panic!("{key} not listed: {locks_json}"))
}

fn fence_on(addr: &str, key: &str, asking: bool) -> i64 {
    direct_get(addr, &keys::fence(key), asking)
        .unwrap()
        .unwrap_or_else(|| panic!("no {} on {addr}", keys::fence(key)))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn release_lock_and_locks_follow_ask_while_the_slot_migrates() {
    // Up; the slot move below waits until no other test reads the slot map.
    drop(stable_cluster().await);
    let (config, _db, cluster) = with_database().await;
    let moving = SlotMove::own("ask", 1).await;
    let (from, to) = (moving.from.addr, moving.to.addr);
    let key = moving.keys[0].clone();
    let dead = instance("ask");
    let (value, fence) = hold_and_abandon(&locks_for(&cluster, &dead), &key).await;
    assert_eq!(holder_of(&key).await, from);
    assert_eq!(holder_of(&keys::fence(&key)).await, from);

    moving.start();
    moving.migrate(&[key.clone(), keys::fence(&key)]);
    // What the client meets: the slot's master answers ASK, the importing one holds the lock.
    let asked = direct_get(from, &key, false);
    assert!(
        is_redirect(&asked, redis::ServerErrorKind::Ask),
        "{asked:?}"
    );
    assert_eq!(direct_get(to, &key, true).unwrap(), Some(value.clone()));

    let (code, out) = idemguard(&config, &["locks", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let l = listed(&j, &key);
    assert_eq!(l["node"], to, "listed on the master that holds it: {l}");
    assert_eq!(l["slot"], moving.slot, "{l}");
    assert_eq!(l["holder"]["instance"], dead.id.as_str(), "{l}");
    assert_eq!(l["fence_counter"], fence, "{l}");

    // Owner-checked: an earlier acquisition's value deletes nothing.
    release_refused_for_an_earlier_value(&config, &key, &value);
    assert_eq!(direct_get(to, &key, true).unwrap(), Some(value.clone()));

    release_with_fence_bump(&config, &key, &value);
    assert_eq!(direct_get(to, &key, true).unwrap(), None, "deleted on {to}");
    assert!(is_redirect(
        &direct_get(from, &key, false),
        redis::ServerErrorKind::Ask
    ));
    let raised = fence_on(to, &key, true);
    assert!(
        raised > fence,
        "--bump-fence raised the counter on {to}: {raised} > {fence}"
    );
    moving.restore().unwrap();
}

#[tokio::test]
async fn release_follows_moved_once_the_slot_changed_master() {
    // Up; the slot move below waits until no other test reads the slot map.
    drop(stable_cluster().await);
    let (config, db, cluster) = with_database().await;
    let moving = SlotMove::own("moved", 2).await;
    let (from, to) = (moving.from.addr, moving.to.addr);
    let (cached_key, cli_key) = (moving.keys[0].clone(), moving.keys[1].clone());
    let dead = locks_for(&cluster, &instance("moved"));
    let (_, cached_fence) = hold_and_abandon(&dead, &cached_key).await;
    let (cli_value, cli_fence) = hold_and_abandon(&dead, &cli_key).await;

    // The operator's client reads the lock first: its map says `from` serves the slot.
    let me = instance("operator");
    let actions = Actions::new(
        &cluster,
        db.clone(),
        locks_for(&cluster, &me),
        Tracer::log_only(&me),
        true,
    )
    .await;
    let seen = actions.locks().inspect(&cached_key).await;
    assert_eq!(seen.nodes[0].node, from, "{seen:?}");

    moving.start();
    let all: Vec<String> = moving
        .keys
        .iter()
        .flat_map(|k| [k.clone(), keys::fence(k)])
        .collect();
    moving.migrate(&all);
    moving.finish();
    let asked = direct_get(from, &cached_key, false);
    assert!(
        is_redirect(&asked, redis::ServerErrorKind::Moved),
        "{asked:?}"
    );
    assert!(direct_get(to, &cached_key, false).unwrap().is_some());

    // Sent to `from` by the old map, answered MOVED, run on `to`.
    let r = actions
        .run(&ops::release_of(&seen, false, true, None))
        .await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(
        r.detail.contains(to),
        "names the master it ran on: {}",
        r.detail
    );
    assert_eq!(direct_get(to, &cached_key, false).unwrap(), None);
    let raised = fence_on(to, &cached_key, false);
    assert!(raised > cached_fence, "{raised} > {cached_fence}");

    // A new process reads the new map: listed and released on `to`.
    let (code, out) = idemguard(&config, &["locks", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let l = listed(&j, &cli_key);
    assert_eq!(l["node"], to, "{l}");
    assert_eq!(l["fence_counter"], cli_fence, "{l}");
    let j = release_with_fence_bump(&config, &cli_key, &cli_value);
    assert!(
        j.to_string().contains(to),
        "the report names the key's master: {j}"
    );
    assert_eq!(direct_get(to, &cli_key, false).unwrap(), None);
    assert!(fence_on(to, &cli_key, false) > cli_fence);
    moving.restore().unwrap();
    db.pool.close().await;
}
