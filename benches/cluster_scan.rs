//! The Locks view on a Redis Cluster: a full scan of 100,000 locks spread
//! over the stack's three masters (127.0.0.1:7001-7003), and the latency another client sees
//! for GET and SET on those masters while it runs — against the same scan and probe on one node
//! (the stack's 127.0.0.1:6379), measured in the same run.
//!
//!     cargo bench --bench cluster_scan
//!
//! The locks (`IDEMGUARD_BENCH_LOCKS`, default 100,000) are written under a prefix of this run,
//! each with its fence counter, in pipelines of 1,000 per master, and deleted at the end. On
//! the shared single node the scan also meets other tests' keys; only this run's are counted.

use std::time::{Duration, Instant};

use idemguard::config::{Config, ConfigSource};
use idemguard::contracts::{keys, now_ms, LockHolder};
use idemguard::lock::cluster::keyslot;
use idemguard::lock::LockInspector;

const ROUNDS: usize = 3;
const MASTERS: [&str; 3] = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"];
const SINGLE: &str = "127.0.0.1:6379";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn config(redis_url: &str) -> Config {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    let mut c = Config::load(&ConfigSource {
        file: Some(file),
        env: vec![],
    })
    .expect("config/local.toml loads");
    c.redis.url = redis_url.into();
    c.redis.redlock_nodes = Vec::new();
    c.redis.command_timeout = Duration::from_secs(5);
    c
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn conn(addr: &str) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_connection()
        .unwrap_or_else(|e| panic!("redis {addr} is not reachable ({e}): scripts/stack up"))
}

/// The master of each slot, from `CLUSTER SLOTS`.
fn slot_map() -> Vec<(u16, u16, String)> {
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut conn(MASTERS[0]))
        .expect("the stack's Redis Cluster (scripts/stack up)");
    let redis::Value::Array(ranges) = reply else {
        panic!("CLUSTER SLOTS: {reply:?}")
    };
    ranges
        .into_iter()
        .map(|r| match r {
            redis::Value::Array(p) => match (&p[0], &p[1], &p[2]) {
                (redis::Value::Int(a), redis::Value::Int(b), redis::Value::Array(m)) => {
                    let redis::Value::Int(port) = &m[1] else {
                        panic!("{m:?}")
                    };
                    (*a as u16, *b as u16, format!("127.0.0.1:{port}"))
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect()
}

fn master_of(map: &[(u16, u16, String)], key: &str) -> String {
    let slot = keyslot(key);
    map.iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, m)| m.clone())
        .expect("every slot is served")
}

fn lock_keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| keys::order_lock(&format!("{prefix}-{i}")))
        .collect()
}

/// SET each lock (an idemguard holder, 1 h TTL) and its fence counter on `addr`.
fn fill(addr: &str, keys: &[&String]) {
    let mut c = conn(addr);
    let now = now_ms();
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for (i, key) in chunk.iter().enumerate() {
            let h = LockHolder {
                instance: format!("bench-instance-{}", i % 100),
                host: "bench-host".into(),
                pid: 1000,
                acquired_at: now,
                ttl_ms: 3_600_000,
                fence: i as i64,
                nonce: format!("n{i}"),
            };
            pipe.cmd("SET")
                .arg(*key)
                .arg(h.to_value())
                .arg("PX")
                .arg(3_600_000)
                .ignore();
            pipe.cmd("SET").arg(keys::fence(key)).arg(i).ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
    }
}

fn remove(addr: &str, keys: &[&String]) {
    let mut c = conn(addr);
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("UNLINK").arg(*key).arg(keys::fence(key)).ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
    }
}

/// Another client: on its own OS thread, a GET and a SET on each of `targets` (a key of each
/// node) every millisecond, each round trip recorded in ms, until `stop`. Sorted.
fn probe(
    targets: Vec<(String, String)>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<f64>> {
    std::thread::spawn(move || {
        let mut conns: Vec<(redis::Connection, String)> =
            targets.into_iter().map(|(a, k)| (conn(&a), k)).collect();
        let mut lat = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for (c, key) in &mut conns {
                let t = Instant::now();
                let _: Option<String> = redis::cmd("GET").arg(&*key).query(c).unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                let _: () = redis::cmd("SET").arg(&*key).arg("x").query(c).unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        lat
    })
}

struct Measured {
    scan_ms: f64,
    p50: f64,
    p99: f64,
    worst: f64,
    baseline_worst: f64,
    samples: usize,
}

async fn measure(
    label: &str,
    url: &str,
    probes: Vec<(String, String)>,
    prefix: &str,
    n: usize,
) -> Vec<Measured> {
    let inspector = LockInspector::from_config(&config(url)).expect("inspector");
    let mut out = Vec::new();
    for round in 0..ROUNDS {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let base = probe(probes.clone(), stop.clone());
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let base = base.join().unwrap();

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let during = probe(probes.clone(), stop.clone());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = Instant::now();
        let scan = inspector.scan(1_000_000).await;
        let scan_ms = t.elapsed().as_secs_f64() * 1000.0;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let during = during.join().unwrap();
        let ours = scan.locks.iter().filter(|l| l.key.contains(prefix)).count();
        assert!(scan.all_nodes_ok(), "{:?}", scan.nodes);
        assert_eq!(ours, n, "{label}: every lock of this run found");
        let m = Measured {
            scan_ms,
            p50: percentile(&during, 0.5),
            p99: percentile(&during, 0.99),
            worst: during.last().copied().unwrap_or(0.0),
            baseline_worst: base.last().copied().unwrap_or(0.0),
            samples: during.len(),
        };
        println!(
            "{label} round {round}: {} locks listed ({ours} of this run) over {} node(s) in {scan_ms:.0} ms; \
             another client's GET/SET: idle worst {:.2} ms; during the scan p50 {:.3} ms, p99 {:.2} ms, worst {:.2} ms ({} round trips)",
            scan.locks.len(),
            scan.nodes.len(),
            m.baseline_worst,
            m.p50,
            m.p99,
            m.worst,
            m.samples
        );
        out.push(m);
    }
    out
}

fn summary(label: &str, m: &[Measured]) -> (f64, f64, f64, f64) {
    let scan = median(m.iter().map(|x| x.scan_ms).collect());
    let p50 = median(m.iter().map(|x| x.p50).collect());
    let p99 = median(m.iter().map(|x| x.p99).collect());
    let worst = median(m.iter().map(|x| x.worst).collect());
    let max_worst = m.iter().map(|x| x.worst).fold(0.0, f64::max);
    println!(
        "{label}: median of {ROUNDS} rounds: scan {scan:.0} ms; another client's GET/SET during it \
         p50 {p50:.3} ms, p99 {p99:.2} ms, worst {worst:.2} ms (worst of all rounds {max_worst:.2} ms)"
    );
    (scan, p50, p99, worst)
}

#[tokio::main]
async fn main() {
    let n = env_usize("IDEMGUARD_BENCH_LOCKS", 100_000);
    let prefix = format!("igbench-clu-{}-{}", std::process::id(), now_ms());
    let keys = lock_keys(&prefix, n);
    let map = slot_map();
    let mut per_master: Vec<(String, Vec<&String>)> = MASTERS
        .iter()
        .map(|m| (m.to_string(), Vec::new()))
        .collect();
    for k in &keys {
        let m = master_of(&map, k);
        per_master
            .iter_mut()
            .find(|(a, _)| *a == m)
            .expect("a stack master")
            .1
            .push(k);
    }
    let t = Instant::now();
    for (m, list) in &per_master {
        fill(m, list);
    }
    let all: Vec<&String> = keys.iter().collect();
    fill(SINGLE, &all);
    println!(
        "wrote {n} locks (+ fence counters) to the cluster ({}) and to {SINGLE} in {:.1} s",
        per_master
            .iter()
            .map(|(m, l)| format!("{m}: {}", l.len()))
            .collect::<Vec<_>>()
            .join(", "),
        t.elapsed().as_secs_f64()
    );

    // A probe key on each master (found by its slot), and one on the single node.
    let probe_key = |m: &str| {
        (0..)
            .map(|i| format!("igbench-probe-{i}"))
            .find(|k| master_of(&map, k) == m)
            .unwrap()
    };
    let cluster_probes: Vec<(String, String)> = MASTERS
        .iter()
        .map(|m| (m.to_string(), probe_key(m)))
        .collect();
    let single_probes = vec![(SINGLE.to_string(), "igbench-probe-single".to_string())];

    let single = measure(
        "one node",
        &format!("redis://{SINGLE}"),
        single_probes.clone(),
        &prefix,
        n,
    )
    .await;
    let cluster = measure(
        "cluster",
        &format!("redis+cluster://{}", MASTERS.join(",")),
        cluster_probes.clone(),
        &prefix,
        n,
    )
    .await;

    for (m, list) in &per_master {
        remove(m, list);
    }
    remove(SINGLE, &all);
    for (a, k) in cluster_probes.iter().chain(&single_probes) {
        let _: () = redis::cmd("DEL").arg(k).query(&mut conn(a)).unwrap();
    }

    let (s_scan, _, s_p99, s_worst) = summary("one node", &single);
    let (c_scan, _, c_p99, c_worst) = summary("cluster", &cluster);
    println!(
        "cluster / one node: scan {:.2}x, p99 {:.2}x, worst {:.2}x (target: worst < 5 ms)",
        c_scan / s_scan,
        c_p99 / s_p99,
        c_worst / s_worst
    );
}
