//! The API bench's load generator, run in a process of its own so that the service's CPU is the
//! service's: once, the 50 reqwest clients shared one tokio runtime with the service
//! and took 75 % of the machine, and every figure included them.
//!
//! The bench binary re-executes itself with [`CLIENT_ENV`] set ([`drive`]); the child reads one
//! [`Load`] as JSON from stdin, opens `connections` keep-alive connections (one reqwest client
//! each, the client every earlier API figure used), sends one request on each to open it, prints
//! [`STARTED`], drives the mix for `secs`, and prints one [`LoadResult`] as a JSON line.
//!
//! A Rust child rather than `wrk` + Lua: it needs nothing installed (wrk is one more Debian
//! package for scripts/stack and a Lua script to keep in step), it sends the same requests with
//! the same client as before, so old and new figures compare, and it checks every answer (the
//! status, the replay header) instead of counting bytes.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use idemguard::contracts::RequestId;

use super::proc_cpu::{self, Usage, Watch};
use super::stats::percentile;

/// Set in the child's environment: "run as the load generator".
pub const CLIENT_ENV: &str = "IDEMGUARD_API_BENCH_CLIENT";
/// The child's line once its connections are open and the measured window begins.
pub const STARTED: &str = "started";

/// What the child drives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Load {
    /// `http://host:port/orders`.
    pub url: String,
    pub connections: usize,
    pub secs: f64,
    /// Share of requests (0.0–1.0) that replay a key of `replay_keys` (with [`replay_body`]);
    /// the rest are new orders under fresh keys.
    pub replay_share: f64,
    pub replay_keys: Vec<String>,
    /// New orders go to SKUs 1..=skus (each connection its own SKU when there are enough).
    pub skus: i64,
    /// Every answer must be this status.
    pub expect_status: u16,
    /// A replay's answer must carry `Idempotent-Replayed` (idemguard; not the baselines).
    pub expect_replay_header: bool,
}

/// What the child measured in its window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadResult {
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub requests: u64,
    /// Answers with another status, or without the replay header; transport errors.
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The body of every replayed key (its request hash must match the one stored).
pub fn replay_body() -> serde_json::Value {
    serde_json::json!({"userId": 1, "skuId": 1, "quantity": 1, "amount": 1999})
}

/// Runs `load` in a child process; returns its result and the CPU each process group used in
/// the child's window (`database_name`: see [`Watch`]).
pub async fn drive(load: &Load, database_name: &str) -> (LoadResult, Usage) {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let mut child = tokio::process::Command::new(exe)
        .env(CLIENT_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the load generator starts");
    let pid = child.id().expect("the child's pid");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(format!("{}\n", serde_json::to_string(load).unwrap()).as_bytes())
        .await
        .expect("the load is sent to the child");
    drop(stdin);
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let watch = Watch {
        client_pid: pid,
        database_name: database_name.to_string(),
    };
    let (mut first, mut result) = (None, None);
    while let Some(line) = lines.next_line().await.expect("the child's output") {
        if line == STARTED {
            first = Some(proc_cpu::sample(&watch));
        } else if let Ok(r) = serde_json::from_str::<LoadResult>(&line) {
            // Sampled before the child is reaped, so its ticks are still readable.
            let last = proc_cpu::sample(&watch);
            let first = first
                .as_ref()
                .expect("the child started before it finished");
            result = Some((r, proc_cpu::usage(first, &last)));
        }
    }
    let status = child.wait().await.expect("the child ends");
    assert!(status.success(), "the load generator failed: {status}");
    result.expect("the load generator printed its result")
}

/// The child's main: reads the [`Load`] from stdin, prints [`STARTED`] and the result.
pub fn run_child() {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("the load on stdin");
    let load: Load = serde_json::from_str(&line).expect("a Load as JSON");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(generate(load));
    println!("{}", serde_json::to_string(&result).unwrap());
}

/// One connection's answer check: `Err(why)` for a wrong answer.
async fn send(
    http: &reqwest::Client,
    load: &Load,
    key: &str,
    body: &serde_json::Value,
    replay: bool,
) -> Result<(), String> {
    let r = http
        .post(&load.url)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("transport: {e}"))?;
    let status = r.status().as_u16();
    let replayed = r.headers().contains_key("idempotent-replayed");
    let text = r.bytes().await.map_err(|e| format!("body: {e}"))?;
    if status != load.expect_status {
        let shown: String = String::from_utf8_lossy(&text).chars().take(300).collect();
        return Err(format!("status {status}: {shown}"));
    }
    if replay && load.expect_replay_header && !replayed {
        return Err("a replay without Idempotent-Replayed".into());
    }
    Ok(())
}

struct Connection {
    http: reqwest::Client,
    index: usize,
}

impl Connection {
    fn request(&self, load: &Load, i: u64) -> (String, serde_json::Value, bool) {
        let pick = (self.index as u64 * 7919 + i) as usize;
        let replay =
            !load.replay_keys.is_empty() && (pick % 1000) as f64 / 1000.0 < load.replay_share;
        if replay {
            let key = &load.replay_keys[pick % load.replay_keys.len()];
            return (key.clone(), replay_body(), true);
        }
        let sku = self.index as i64 % load.skus.max(1) + 1;
        let body =
            serde_json::json!({"userId": self.index, "skuId": sku, "quantity": 1, "amount": 1999});
        let key = RequestId::generate("BENCH", "ORDER").to_string();
        (key, body, false)
    }
}

async fn generate(load: Load) -> LoadResult {
    let load = std::sync::Arc::new(load);
    let mut connections = Vec::new();
    for index in 0..load.connections {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .expect("reqwest client");
        let c = Connection { http, index };
        // Opens the connection (and warms the service) before the window.
        let (key, body, replay) = c.request(&load, 0);
        if let Err(e) = send(&c.http, &load, &key, &body, replay).await {
            panic!("the warm-up request failed: {e}");
        }
        connections.push(c);
    }
    println!("{STARTED}");
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(load.secs);
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|c| {
            let load = load.clone();
            tokio::spawn(async move {
                let (mut latencies, mut errors, mut first_error) = (Vec::new(), 0u64, None);
                let mut i = 1u64;
                while Instant::now() < until {
                    let (key, body, replay) = c.request(&load, i);
                    let t = Instant::now();
                    if let Err(e) = send(&c.http, &load, &key, &body, replay).await {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                    latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                    i += 1;
                }
                (latencies, errors, first_error)
            })
        })
        .collect();
    let (mut all, mut errors, mut first_error) = (Vec::new(), 0, None);
    for t in tasks {
        let (l, e, f) = t.await.expect("a connection's task");
        all.extend(l);
        errors += e;
        if first_error.is_none() {
            first_error = f;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    LoadResult {
        ops_per_s: all.len() as f64 / elapsed,
        p50_ms: percentile(&all, 0.5),
        p99_ms: percentile(&all, 0.99),
        requests: all.len() as u64,
        errors,
        first_error,
    }
}
