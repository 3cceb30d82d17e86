//! RedLock against the `rslock` crate, same run, on the stack's five RedLock nodes
//! (127.0.0.1:6381-6385, `scripts/stack up`), keys unique to the run:
//!
//! (a) one client, acquire+release cycles one after another: p50 and p99 of a cycle, both
//!     sides alternating by round. Target: idemguard's p50 <= 0.5x rslock's.
//! (b) 50 clients (tasks) on distinct keys: cycles per second. Target: >= 0.7x rslock.
//! (c) `INFO commandstats` of every node before and after (a): commands executed per cycle per
//!     node, the commands run inside scripts included (Redis counts them in their own
//!     `cmdstat_*` lines as well as in `evalsha`). Other users of the nodes add noise; the counts
//!     read from both sides' source are printed beside them.
//! (d) where the CPU goes in (a) and (b), from `/proc` (`support/proc_cpu.rs`): cores used by the
//!     bench process (the client under test and its runtime), the five nodes' redis-servers, the
//!     rest of the machine, and idle; and CPU µs per cycle in the client and in the nodes.
//!
//!   scripts/stack up && cargo bench --bench redlock
//!
//! Sizes: IDEMGUARD_BENCH_ROUNDS (default 3) rounds; IDEMGUARD_BENCH_CYCLES (default 2000)
//! single-client cycles and 5x that many 50-client cycles per side per round.

#[path = "support/proc_cpu.rs"]
mod proc_cpu;
#[path = "support/stats.rs"]
mod stats;
use proc_cpu::{Group, Usage};
use stats::{knob, median, percentile};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemguard::config::{Config, LockMode};
use idemguard::contracts::Instance;
use idemguard::lock::{Acquisition, Locks};
use idemguard::trace::Tracer;

const TASKS: usize = 50;
const TTL: Duration = Duration::from_secs(30);
const ROUND_LIMIT: Duration = Duration::from_secs(180);

fn nodes() -> Vec<String> {
    (6381..=6385)
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect()
}

fn lock_service(instance: &Instance) -> Locks {
    let mut config = Config::defaults();
    config.lock.mode = LockMode::Redlock;
    config.lock.ttl = TTL;
    config.redis.redlock_nodes = nodes();
    Locks::from_config(&config, instance, Tracer::log_only(instance)).expect("lock service")
}

async fn ours_once(locks: &Locks, key: String) {
    let guard = match locks.acquire(&key).await.expect("acquire") {
        Acquisition::Held(g) => g,
        Acquisition::Contended(c) => panic!("distinct keys never contend: {c:?}"),
    };
    assert!(guard.release().await.expect("release").released());
}

async fn theirs_once(manager: &rslock::LockManager, key: String) {
    let lock = manager
        .lock(key.as_str(), TTL)
        .await
        .expect("rslock acquire");
    manager.unlock(&lock).await;
}

/// Latencies (µs) of `n` cycles by one client.
async fn single<F, Fut>(n: usize, mut cycle: F) -> Vec<f64>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        cycle(i).await;
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    out
}

/// `work`'s output and where the CPU went while it ran.
async fn measured<T>(work: impl std::future::Future<Output = T>) -> (T, Usage) {
    let before = proc_cpu::sample(&watch());
    let out = work.await;
    (out, proc_cpu::usage(&before, &proc_cpu::sample(&watch())))
}

/// Cycles per second of `total` cycles shared by TASKS tasks, and where the CPU went meanwhile.
async fn many<F, Fut>(total: usize, cycle: F) -> (f64, Usage)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let before = proc_cpu::sample(&watch());
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (next, cycle) = (next.clone(), cycle.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    cycle(i).await;
                }
            })
        })
        .collect();
    tokio::time::timeout(ROUND_LIMIT, futures::future::join_all(tasks))
        .await
        .expect("a round finishes within its limit");
    let rate = total as f64 / started.elapsed().as_secs_f64();
    (rate, proc_cpu::usage(&before, &proc_cpu::sample(&watch())))
}

/// The bench process is the client under test; no load generator, no database of its own.
fn watch() -> proc_cpu::Watch {
    proc_cpu::Watch {
        client_pid: 0,
        database_name: "idemguard-redlock-bench-uses-no-database".into(),
    }
}

/// Cores of the client (this process), the lock nodes, the rest of the machine, and idle; and
/// CPU µs per cycle in the client and the nodes, at `rate` cycles per second.
fn cpu_line(u: &Usage, rate: f64) -> String {
    let (client, nodes) = (u.of(Group::Service), u.of(Group::LockNodes));
    let rest = u.others + u.cores.values().sum::<f64>() - client - nodes;
    format!(
        "cores: client {client:.2} nodes {nodes:.2} rest {rest:.2} idle {:.2}; CPU per cycle: client {:.0} us, nodes {:.0} us",
        u.idle,
        client / rate * 1e6,
        nodes / rate * 1e6
    )
}

/// `cmdstat_*` calls of every node, and their server time (µs) under "<name> us".
async fn commandstats() -> Vec<BTreeMap<String, u64>> {
    let mut out = Vec::new();
    for url in nodes() {
        let client = redis::Client::open(url.as_str()).expect("node url");
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("RedLock node {url} unreachable ({e}): scripts/stack up"));
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut con)
            .await
            .expect("INFO commandstats");
        let mut m = BTreeMap::new();
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let field = |prefix: &str| -> u64 {
                rest.split(',')
                    .find_map(|f| f.strip_prefix(prefix))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0)
            };
            m.insert(name.to_string(), field("calls="));
            m.insert(format!("{name} us"), field("usec="));
        }
        out.push(m);
    }
    out
}

/// Commands per cycle per node (mean over the nodes) between two snapshots, by command; the
/// INFO calls of the snapshots themselves are left out.
fn per_cycle(
    before: &[BTreeMap<String, u64>],
    after: &[BTreeMap<String, u64>],
    cycles: usize,
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (b, a) in before.iter().zip(after) {
        for (name, calls) in a {
            if name.starts_with("info") || name.starts_with("client|setinfo") {
                continue;
            }
            let d = calls.saturating_sub(*b.get(name).unwrap_or(&0));
            if d > 0 {
                *out.entry(name.clone()).or_default() +=
                    d as f64 / cycles as f64 / before.len() as f64;
            }
        }
    }
    out
}

/// "6.00 commands per cycle per node, scripts' calls included (del 1.00 (0.6 us), …)": a
/// script's server time includes its calls', which are also listed on their own.
fn show(counts: &BTreeMap<String, f64>) -> String {
    let commands = counts.iter().filter(|(n, _)| !n.ends_with(" us"));
    let total: f64 = commands
        .clone()
        .filter(|(n, _)| !n.starts_with("eval"))
        .map(|(_, c)| c)
        .sum();
    let parts: Vec<String> = commands
        .filter(|(_, c)| **c >= 0.05)
        .map(|(n, c)| {
            let us = counts.get(&format!("{n} us")).copied().unwrap_or(0.0);
            format!("{n} {c:.2} ({us:.1} us)")
        })
        .collect();
    format!(
        "{total:.2} commands per cycle per node, scripts' calls included; server time per cycle per node in brackets, a script's including its calls' ({})",
        parts.join(", ")
    )
}

#[tokio::main]
async fn main() {
    let rounds = knob::<usize>("IDEMGUARD_BENCH_ROUNDS", 3);
    let cycles = knob::<usize>("IDEMGUARD_BENCH_CYCLES", 2000);
    let instance = Instance::current();
    let locks = lock_service(&instance);
    let manager = rslock::LockManager::new(nodes());
    let run = uuid::Uuid::now_v7().simple().to_string();
    println!("redlock: 5 nodes 6381-6385, {rounds} rounds, {cycles} single-client cycles, {} cycles at {TASKS} clients, per side per round", cycles * 5);
    // Warm both: connections open, scripts loaded.
    single(200, |i| {
        ours_once(&locks, format!("bench:rl:{run}:warm:o{i}"))
    })
    .await;
    single(200, |i| {
        theirs_once(&manager, format!("bench:rl:{run}:warm:t{i}"))
    })
    .await;

    let (mut o50, mut o99, mut t50, mut t99, mut ot, mut tt) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut ocalls, mut tcalls) = (BTreeMap::new(), BTreeMap::new());
    for r in 0..rounds {
        let b = commandstats().await;
        let (ours, o_single) = measured(single(cycles, |i| {
            ours_once(&locks, format!("bench:rl:{run}:{r}:o{i}"))
        }))
        .await;
        let m = commandstats().await;
        let (theirs, t_single) = measured(single(cycles, |i| {
            theirs_once(&manager, format!("bench:rl:{run}:{r}:t{i}"))
        }))
        .await;
        let a = commandstats().await;
        ocalls = per_cycle(&b, &m, cycles);
        tcalls = per_cycle(&m, &a, cycles);
        let l = locks.clone();
        let run_o = format!("bench:rl:{run}:{r}:mo");
        let (o_rate, o_cpu) = many(cycles * 5, move |i| {
            let (l, k) = (l.clone(), format!("{run_o}{i}"));
            async move { ours_once(&l, k).await }
        })
        .await;
        let mg = manager.clone();
        let run_t = format!("bench:rl:{run}:{r}:mt");
        let (t_rate, t_cpu) = many(cycles * 5, move |i| {
            let (mg, k) = (mg.clone(), format!("{run_t}{i}"));
            async move { theirs_once(&mg, k).await }
        })
        .await;
        println!(
            "  round {}: single client p50/p99 idemguard {:.0}/{:.0} us, rslock {:.0}/{:.0} us | {TASKS} clients idemguard {o_rate:.0}/s, rslock {t_rate:.0}/s",
            r + 1,
            median(&ours),
            percentile(&ours, 0.99),
            median(&theirs),
            percentile(&theirs, 0.99)
        );
        println!(
            "    single client idemguard {}",
            cpu_line(&o_single, cycles as f64 / o_single.secs)
        );
        println!(
            "    single client rslock    {}",
            cpu_line(&t_single, cycles as f64 / t_single.secs)
        );
        println!("    {TASKS} clients idemguard {}", cpu_line(&o_cpu, o_rate));
        println!("    {TASKS} clients rslock    {}", cpu_line(&t_cpu, t_rate));
        o50.push(median(&ours));
        o99.push(percentile(&ours, 0.99));
        t50.push(median(&theirs));
        t99.push(percentile(&theirs, 0.99));
        ot.push(o_rate);
        tt.push(t_rate);
    }
    let (o50, o99, t50, t99, ot, tt) = (
        median(&o50),
        median(&o99),
        median(&t50),
        median(&t99),
        median(&ot),
        median(&tt),
    );
    println!("single client, acquire+release: idemguard p50 {o50:.0} us p99 {o99:.0} us; rslock p50 {t50:.0} us p99 {t99:.0} us; p50 ratio {:.2} (target <= 0.50)", o50 / t50);
    println!("{TASKS} clients: idemguard {ot:.0} cycles/s, rslock {tt:.0} cycles/s, ratio {:.2} (target >= 0.70)", ot / tt);
    println!("idemguard, measured (last round): {}", show(&ocalls));
    println!("rslock,    measured (last round): {}", show(&tcalls));
    println!("from the source: idemguard acquire = 1 EVALSHA per node running GET, INCR, SET (+ SET of the seed with its TTL when the fence counter is new; PTTL, and PEXPIRE when short-lived, when it exists); release = 1 EVALSHA per node running GET + DEL (DELEX on Redis 8.4+)");
    println!("from the source: rslock 0.10 acquire = SET NX PX per node; release = 1 EVALSHA per node running GET + DEL; both fanned out with join_all (rslock-0.10.0/src/lock.rs exec_or_retry)");
}
