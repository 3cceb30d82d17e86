//! Lock layer throughput: acquire+release cycles per second on distinct keys, 50 concurrent
//! tasks, against private redis-server processes on loopback (so the shared stack is neither
//! disturbed nor disturbing).
//!
//! (a) single node: idemguard's acquire (Lua: GET, INCR fence, SET PX with the holder JSON) +
//!     release (Lua compare-and-delete), watchdog on, vs `redis-benchmark -c 50` running the raw
//!     `SET key value NX PX 30000` and the release `EVAL` on the same server in the same run;
//!     the raw pair rate is 1 / (1/rate(SET) + 1/rate(EVAL)). Target ≥ 0.7.
//! (b) RedLock on 5 nodes: idemguard vs the `rslock` crate, same nodes, same run. Target ≥ 1.5×.
//!
//! Each figure is the median of the rounds (3, or IDEMGUARD_BENCH_ROUNDS); the ratio is the
//! median of the per-round ratios (both sides of a round run back to back). Every round is a
//! fixed number of cycles with a hard time limit. CPU time per cycle (servers and this process,
//! from /proc) is printed to show where the time goes.
//! Run: `cargo bench --bench lock_layer`.

#[path = "support/stats.rs"]
mod stats;
use stats::{knob, median};
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemguard::config::{Config, LockMode};
use idemguard::contracts::{Instance, LockHolder};
use idemguard::lock::{Acquisition, Locks};
use idemguard::trace::Tracer;
use redis_server::RedisServer;

const TASKS: usize = 50;

const SINGLE_CYCLES: usize = 40_000;
const REDLOCK_CYCLES: usize = 10_000;
const RAW_REQUESTS: usize = 100_000;
const ROUND_LIMIT: Duration = Duration::from_secs(120);
const TTL: Duration = Duration::from_secs(30);
/// The textbook compare-and-delete (seed §3.2), as the raw baseline's release.
const RAW_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rounds = knob::<usize>("IDEMGUARD_BENCH_ROUNDS", 3).clamp(3, 15);
    let instance = Instance::current();

    // (a) single node
    let server = RedisServer::start();
    let locks = lock_service(
        &instance,
        LockMode::Single,
        vec![server.url()],
        server.url(),
    );
    runtime.block_on(idemguard_cycles(&locks, "warm", 2_000));
    let mut raw_set = Vec::new();
    let mut raw_eval = Vec::new();
    let mut raw_pair = Vec::new();
    let mut ours_single = Vec::new();
    for round in 0..rounds {
        let value = sample_value(&instance);
        let set = redis_benchmark(
            server.port,
            &["SET", "lock:rb:__rand_int__", &value, "NX", "PX", "30000"],
        );
        let eval = redis_benchmark(
            server.port,
            &["EVAL", RAW_RELEASE, "1", "lock:rb:__rand_int__", &value],
        );
        let pair = 1.0 / (1.0 / set + 1.0 / eval);
        let (ours, cpu) = measure_cpu(&[&server], SINGLE_CYCLES, || {
            runtime.block_on(idemguard_cycles(
                &locks,
                &format!("s{round}"),
                SINGLE_CYCLES,
            ))
        });
        println!(
            "(a) round {}: redis-benchmark SET NX PX {set:.0}/s, EVAL release {eval:.0}/s, pair {pair:.0}/s; idemguard {ours:.0} cycles/s \
             (CPU per cycle: server {:.1}us, client {:.1}us)",
            round + 1,
            cpu.server_us,
            cpu.client_us
        );
        raw_set.push(set);
        raw_eval.push(eval);
        raw_pair.push(pair);
        ours_single.push(ours);
    }
    drop(locks);
    drop(server);

    // (b) RedLock on five nodes
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let locks = lock_service(&instance, LockMode::Redlock, urls.clone(), urls[0].clone());
    let rslock = rslock::LockManager::new(urls.clone());
    runtime.block_on(idemguard_cycles(&locks, "warm", 1_000));
    runtime.block_on(rslock_cycles(&rslock, "warm", 1_000));
    let mut ours_redlock = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..rounds {
        let nodes: Vec<&RedisServer> = servers.iter().collect();
        let (ours, our_cpu) = measure_cpu(&nodes, REDLOCK_CYCLES, || {
            runtime.block_on(idemguard_cycles(
                &locks,
                &format!("r{round}"),
                REDLOCK_CYCLES,
            ))
        });
        let (other, their_cpu) = measure_cpu(&nodes, REDLOCK_CYCLES, || {
            runtime.block_on(rslock_cycles(&rslock, &format!("r{round}"), REDLOCK_CYCLES))
        });
        println!(
            "(b) round {}: idemguard RedLock {ours:.0} cycles/s (CPU per cycle: servers {:.1}us, client {:.1}us); \
             rslock {other:.0} cycles/s (servers {:.1}us, client {:.1}us)",
            round + 1,
            our_cpu.server_us,
            our_cpu.client_us,
            their_cpu.server_us,
            their_cpu.client_us
        );
        ours_redlock.push(ours);
        theirs.push(other);
    }
    drop(servers);

    let (set, eval, pair, ours_a) = (
        median(&raw_set),
        median(&raw_eval),
        median(&raw_pair),
        median(&ours_single),
    );
    let (ours_b, other_b) = (median(&ours_redlock), median(&theirs));
    let ratios_a: Vec<f64> = ours_single
        .iter()
        .zip(&raw_pair)
        .map(|(o, p)| o / p)
        .collect();
    let ratios_b: Vec<f64> = ours_redlock
        .iter()
        .zip(&theirs)
        .map(|(o, t)| o / t)
        .collect();
    println!();
    println!("lock_layer: {TASKS} concurrent tasks, distinct keys, medians of {rounds} rounds");
    println!("| measurement | cycles/s (median) |");
    println!("|---|---:|");
    println!("| redis-benchmark -c {TASKS} SET NX PX (requests/s) | {set:.0} |");
    println!("| redis-benchmark -c {TASKS} release EVAL (requests/s) | {eval:.0} |");
    println!("| raw pair (SET + EVAL) | {pair:.0} |");
    println!("| idemguard single node (acquire+release, watchdog on) | {ours_a:.0} |");
    println!("| rslock RedLock, 5 nodes | {other_b:.0} |");
    println!("| idemguard RedLock, 5 nodes | {ours_b:.0} |");
    let (ratio_a, ratio_b) = (median(&ratios_a), median(&ratios_b));
    let show = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!();
    println!(
        "(a) idemguard single / raw pair = {ratio_a:.2} (rounds: {}) (target >= 0.70: {})",
        show(&ratios_a),
        verdict(ratio_a >= 0.7)
    );
    println!(
        "(b) idemguard RedLock / rslock  = {ratio_b:.2} (rounds: {}) (target >= 1.50: {})",
        show(&ratios_b),
        verdict(ratio_b >= 1.5)
    );
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn lock_service(instance: &Instance, mode: LockMode, nodes: Vec<String>, main: String) -> Locks {
    let mut config = Config::defaults();
    config.lock.mode = mode;
    config.lock.ttl = TTL;
    config.redis.url = main;
    config.redis.redlock_nodes = if mode == LockMode::Redlock {
        nodes
    } else {
        vec![]
    };
    Locks::from_config(&config, instance, Tracer::log_only(instance)).expect("lock service")
}

/// A value of the size idemguard writes, for the raw baseline.
fn sample_value(instance: &Instance) -> String {
    LockHolder {
        instance: instance.id.clone(),
        host: instance.host.clone(),
        pid: instance.pid,
        acquired_at: idemguard::contracts::now_ms(),
        ttl_ms: TTL.as_millis() as u64,
        fence: 1,
        nonce: format!("{:032x}", rand::random::<u128>()),
    }
    .to_value()
}

/// Requests per second of one command, as redis-benchmark measures it (-c 50, random keys).
fn redis_benchmark(port: u16, command: &[&str]) -> f64 {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            &TASKS.to_string(),
            "-n",
            &RAW_REQUESTS.to_string(),
        ])
        .args(["-r", "100000000", "--csv"])
        .args(command)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-benchmark ({e}); it comes with redis-tools: scripts/stack up")
        });
    let text = String::from_utf8_lossy(&out.stdout);
    // Last line: "<test>","<rps>","<avg>",…,"<max>" — the test text may contain commas and
    // quotes, so count from the right: rps is the seventh field from the end.
    let line = text.lines().last().unwrap_or_default();
    let fields: Vec<&str> = line.rsplitn(8, "\",\"").collect();
    fields
        .get(6)
        .and_then(|f| f.trim_matches('"').parse::<f64>().ok())
        .unwrap_or_else(|| {
            panic!(
                "cannot read redis-benchmark's output: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Cycles per second of `total` acquire+release cycles on distinct keys by TASKS tasks.
async fn idemguard_cycles(locks: &Locks, round: &str, total: usize) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locks, next, round) = (locks.clone(), next.clone(), round.to_string());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    let key = format!("lock:order:B{round}x{i}");
                    let guard = match locks.acquire(&key).await.expect("acquire") {
                        Acquisition::Held(g) => g,
                        Acquisition::Contended(c) => panic!("distinct keys never contend: {c:?}"),
                    };
                    assert!(guard.release().await.expect("release").released());
                }
            })
        })
        .collect();
    tokio::time::timeout(ROUND_LIMIT, futures::future::join_all(tasks))
        .await
        .expect("a round finishes within its limit");
    total as f64 / started.elapsed().as_secs_f64()
}

async fn rslock_cycles(manager: &rslock::LockManager, round: &str, total: usize) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (manager, next, round) = (manager.clone(), next.clone(), round.to_string());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    let key = format!("lock:order:R{round}x{i}");
                    let lock = manager
                        .lock(key.as_str(), TTL)
                        .await
                        .expect("rslock acquire");
                    manager.unlock(&lock).await;
                }
            })
        })
        .collect();
    tokio::time::timeout(ROUND_LIMIT, futures::future::join_all(tasks))
        .await
        .expect("a round finishes within its limit");
    total as f64 / started.elapsed().as_secs_f64()
}

/// CPU time (user + system) of a process so far, from /proc (Linux).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    let ticks: u64 = fields.iter().sum();
    Duration::from_millis(ticks * 10) // USER_HZ = 100
}

/// CPU time per cycle of the servers and of this process while `f` ran `cycles` cycles.
struct CpuCost {
    server_us: f64,
    client_us: f64,
}

fn measure_cpu<T>(servers: &[&RedisServer], cycles: usize, f: impl FnOnce() -> T) -> (T, CpuCost) {
    let pids: Vec<u32> = servers.iter().filter_map(|s| s.pid()).collect();
    let me = std::process::id();
    let before_servers: Duration = pids.iter().map(|p| cpu_time(*p)).sum();
    let before_me = cpu_time(me);
    let out = f();
    let servers: Duration = pids.iter().map(|p| cpu_time(*p)).sum::<Duration>() - before_servers;
    let client = cpu_time(me) - before_me;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / cycles as f64;
    (
        out,
        CpuCost {
            server_us: per(servers),
            client_us: per(client),
        },
    )
}
