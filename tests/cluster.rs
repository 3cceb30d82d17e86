//! The lock layer, the heartbeats, the fast path, `idemguard locks` and `release-lock` on the
//! real three-master Redis Cluster of `scripts/stack up` (127.0.0.1:7001-7003). Where a key
//! lives is checked independently of idemguard: each master is asked directly (`EXISTS`), and
//! the slot is what the server's `CLUSTER KEYSLOT` answers. Every test uses its own key prefix.
//! The cluster not running fails every test loudly.

mod common;
mod console_fixture;

use std::collections::BTreeMap;
use std::time::Duration;

use console_fixture::{press, pump_until, screen, type_str};
use crossterm::event::KeyCode;
use idemguard::api::fast_path::{FastPath, FastPathValue};
use idemguard::config::{Config, Dialect};
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Backends;
use idemguard::console::tui::keymap::View;
use idemguard::contracts::{keys, Instance};
use idemguard::lock::{Acquisition, Liveness, LockGuard, Locks, NodeRelease};

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

/// The cluster is up and serves every slot.
async fn assert_cluster_ok() {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut master(MASTERS[0]).await)
        .await
        .unwrap();
    assert!(
        info.contains("cluster_state:ok"),
        "the stack's Redis Cluster is not ok (scripts/stack up): {info}"
    );
}

/// `n` lock keys under `prefix` per master (by the server's slot map), so that every test
/// touches all three.
async fn keys_on_every_master(prefix: &str, n: usize) -> BTreeMap<&'static str, Vec<String>> {
    let mut slots: Vec<(i64, i64, String)> = Vec::new();
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut master(MASTERS[0]).await)
        .await
        .unwrap();
    let redis::Value::Array(ranges) = reply else {
        panic!("CLUSTER SLOTS: {reply:?}")
    };
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
    assert_cluster_ok().await;
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
    assert_cluster_ok().await;
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
    assert_cluster_ok().await;
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

    let fast = FastPath::connect(CLUSTER_URL, Duration::from_secs(1))
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

#[tokio::test]
async fn locks_json_lists_every_masters_locks_with_node_and_slot() {
    assert_cluster_ok().await;
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
    assert_cluster_ok().await;
    let (mut config, _db) = common::migrated_database(Dialect::Postgres).await;
    let topics = common::fresh_topics(&config, &["idemguard.trace"]).await;
    config.kafka.trace_topic = topics[0].clone();
    let prefix = format!("clu-release{}", common::unique_suffix());
    let by_master = keys_on_every_master(&prefix, 1).await;
    let key = by_master[MASTERS[2]][0].clone();
    let mut cluster = cluster_config();
    cluster.database.url = config.database.url.clone();
    let dead = locks_for(&cluster, &instance("dead"));
    let guard = hold(&dead, &key, Duration::from_secs(60)).await;
    let value = guard.value();
    std::mem::forget(guard); // the holder "crashed"
    assert_eq!(holder_of(&key).await, MASTERS[2]);

    let mut earlier = idemguard::contracts::LockHolder::from_value(&value).unwrap();
    earlier.nonce = "0".repeat(32);
    let (code, out) = idemguard(
        &config,
        &[
            "release-lock",
            &key,
            "--expect-value",
            &earlier.to_value(),
            "--allow-actions",
        ],
    );
    assert_eq!(code, Some(5), "another value deletes nothing: {out}");
    assert_eq!(holder_of(&key).await, MASTERS[2]);

    let (code, out) = idemguard(
        &config,
        &[
            "release-lock",
            &key,
            "--expect-value",
            &value,
            "--bump-fence",
            "--allow-actions",
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(j["outcome"], "done", "{j}");
    assert!(
        out.contains(MASTERS[2]),
        "the report names the key's master: {out}"
    );
    assert_eq!(masters_holding(&key).await, Vec::<&str>::new(), "{key}");
    cleanup(&[key]).await;
}

#[tokio::test]
async fn a_stale_holder_never_deletes_the_next_holders_lock() {
    assert_cluster_ok().await;
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
    assert_cluster_ok().await;
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
