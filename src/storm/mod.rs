//! `idemguard storm`: replays the seed's 23:07 incident (§1.1: double clicks, gateway retries,
//! MQ replays) and its faults against the real service and consumer, then proves from the
//! database that nothing was processed twice (§6.5: "don't only load-test concurrency: send the
//! same request body concurrently").
//!
//! - [`scenarios`] — the seven storms;
//! - [`chaos`] — the flash sale under a seeded nemesis (`storm chaos --duration --seed`);
//! - [`rig`] — what a run stands on: fresh topics, the in-process service and consumer;
//! - [`client`] — the HTTP client that records every reply;
//! - [`invariants`] — the checks, read from the database (SQL under `queries/*/storm_*.sql`);
//! - [`interception`] — which layer stopped each duplicate, from the run's trace topic;
//! - [`metered`] — what the run's metrics counted, held to the database's counts;
//! - [`report`] — the summary, as text or JSON;
//! - [`redis_server`] — the private Redis the `redis-down` storm kills;
//! - [`processes`] — the real `serve` and lock holders the chaos storm kills.

pub mod chaos;
pub mod client;
pub mod interception;
pub mod invariants;
pub mod metered;
pub mod processes;
pub mod redis_server;
pub mod report;
pub mod rig;
pub mod scenarios;

use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::config::{Config, LockMode};
use crate::contracts::TraceEvent;
use client::StormClient;
use interception::InterceptionTable;
use invariants::Scope;
use redis_server::PrivateRedis;
use report::{HttpSummary, StormReport};
use rig::{Rig, Run};
use scenarios::Played;

/// A storm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// N identical requests (one body, one Idempotency-Key) at once — seed §6.5
    DoubleClick,
    /// The client times out and retries with the same key while the first is still running
    GatewayRetry,
    /// Payment events produced again and the consumer group's offsets rewound
    MqReplay,
    /// The real consumer binary killed between database commit and offset commit, restarted
    ConsumerCrash,
    /// A lock holder slower than its TTL (watchdog off): the fence token refuses the stale writer
    LockExpiry,
    /// The service's Redis (a private redis-server) killed mid-storm
    RedisDown,
    /// One SKU with stock 500, thousands of users double-clicking and retrying, payments replayed
    FlashSale,
    /// The flash sale in rounds for --duration while a nemesis seeded by --seed freezes Redis,
    /// ends database sessions, kills and restarts the service, kills lock holders and restarts
    /// the consumer
    Chaos,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::DoubleClick => "double-click",
            Scenario::GatewayRetry => "gateway-retry",
            Scenario::MqReplay => "mq-replay",
            Scenario::ConsumerCrash => "consumer-crash",
            Scenario::LockExpiry => "lock-expiry",
            Scenario::RedisDown => "redis-down",
            Scenario::FlashSale => "flash-sale",
            Scenario::Chaos => "chaos",
        }
    }

    /// Default size: requests (double-click, redis-down), keys (gateway-retry), orders
    /// (mq-replay, consumer-crash, lock-expiry) or users (flash-sale). Sized for 2 cores.
    pub fn default_size(self) -> usize {
        match self {
            Scenario::DoubleClick => 500,
            Scenario::GatewayRetry => 200,
            Scenario::MqReplay => 200,
            Scenario::ConsumerCrash => 100,
            Scenario::LockExpiry => 20,
            Scenario::RedisDown => 400,
            Scenario::FlashSale => 2000,
            Scenario::Chaos => 0, // sized by its duration
        }
    }

    /// Roughly how many HTTP requests the storm sends (the progress bar's length).
    fn planned_requests(self, size: usize, stock: i64) -> u64 {
        let n = size as u64;
        match self {
            Scenario::DoubleClick | Scenario::LockExpiry => n,
            Scenario::RedisDown => n + n / 10,
            Scenario::GatewayRetry | Scenario::MqReplay | Scenario::ConsumerCrash => 2 * n,
            Scenario::FlashSale => 3 * n + 3 * (stock.max(0) as u64).min(n),
            Scenario::Chaos => 0,
        }
    }
}

/// How to run a storm.
#[derive(Debug, Clone)]
pub struct StormOptions {
    pub scenario: Scenario,
    /// None: [`Scenario::default_size`].
    pub size: Option<usize>,
    /// Requests (or users) in flight at once.
    pub concurrency: usize,
    /// Turn off the API idempotency record, the fast path and the request lock (fault
    /// injection): only the database layer is left.
    pub broken: bool,
    /// Initial stock of the flash-sale SKU.
    pub stock: i64,
    /// The `idemguard` binary the consumer-crash storm runs (the CLI passes itself).
    pub binary: Option<PathBuf>,
    /// The lock TTL of the lock-expiry storm.
    pub lock_ttl: Duration,
    /// The gateway's patience in gateway-retry.
    pub gateway_timeout: Duration,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// The chaos storm's length and the seed of its nemesis's schedule.
    pub duration: Duration,
    pub seed: u64,
}

impl StormOptions {
    pub fn new(scenario: Scenario) -> StormOptions {
        StormOptions {
            scenario,
            size: None,
            concurrency: 64,
            broken: false,
            stock: 500,
            binary: None,
            lock_ttl: Duration::from_millis(200),
            gateway_timeout: Duration::from_millis(2),
            progress: false,
            duration: Duration::from_secs(60),
            seed: 1,
        }
    }
}

/// Runs one storm against the configured database, Redis and broker (fresh topics and consumer
/// group of its own), checks the invariants and reads back the run's trace.
///
/// The storm's script in order — set up, traffic, settle, check, read back — and what it
/// started is stopped and removed on every way out.
pub async fn run(mut config: Config, opts: &StormOptions) -> anyhow::Result<StormReport> {
    let scenario = opts.scenario;
    let size = opts.size.unwrap_or_else(|| scenario.default_size()).max(1);
    let concurrency = opts.concurrency.max(1);
    let mut redis = storm_config(&mut config, opts, size)?;
    let database = crate::config::redact_url(&config.database.url);
    let run = Run::new();
    let mut rig = Rig::start(config, run.clone()).await?;
    if scenario != Scenario::ConsumerCrash {
        rig.start_consumer().await?;
    }
    let progress = progress_bar(opts, size);
    let client = StormClient::new(rig.base.clone(), progress.clone())?;

    let played = play(&mut rig, &client, opts, redis.as_mut(), size, concurrency).await;
    progress.finish_and_clear();
    // Settle and stop whatever happened, so a failed storm leaves nothing running.
    let settled = match &played {
        // consumer-crash restarts its consumer before it returns Ok.
        Ok(_) => rig.drain(Duration::from_secs(120)).await,
        _ => Ok(()),
    };
    let stopped = rig.shutdown().await;
    drop(redis);
    // The trace is the last reader of the run's topics; they go whatever happened, so a failed
    // storm leaves none behind either.
    let traced = if played.is_ok() && settled.is_ok() && stopped.is_ok() {
        read_run_trace(&rig).await
    } else {
        Ok(Vec::new())
    };
    rig.delete_topics().await;
    rig.delete_keys().await;
    let played = played?;
    settled?;
    stopped?;
    let events = traced?;

    let log = client.take_log();
    let scope = Scope {
        order_pattern: run.order_pattern(),
        record_pattern: run.record_pattern(),
        group: run.group(),
        skus: played.skus.clone(),
        orders_named: log.orders_named.clone(),
        created: log.created.clone(),
    };
    let mut checks = invariants::check(&rig.db, &scope).await?;
    checks.extend(played.checks);
    // The chaos storm's service runs as real processes too, each with its own registry.
    let elsewhere = (scenario == Scenario::Chaos).then(|| {
        "the chaos storm's real serve processes count in their own registries".to_string()
    });
    let (metrics, agreement) =
        metered::read(&rig.metrics, &rig.db, &scope.order_pattern, elsewhere).await?;
    checks.extend(agreement);
    let (own, consumer) = rig.trace_counts();
    let interception = InterceptionTable::build(&events, &log.by_kind, &rig.consumed);
    let passed = checks.iter().all(|c| c.passed);
    Ok(StormReport {
        scenario: scenario.name().into(),
        run_id: run.id.clone(),
        database,
        broken: opts.broken,
        size,
        http: HttpSummary::of(&log, played.seconds),
        interception,
        metrics,
        invariants: checks,
        notes: played.notes,
        trace_dropped: own.dropped + consumer.dropped,
        consumer: rig.consumed,
        passed,
    })
}

/// Fits the configuration to the storm: the fault injection of `--broken`, the private Redis
/// the redis-down and chaos storms kill (started here, returned to be stopped), the short
/// heartbeat and lease of the chaos storm, the small batches of consumer-crash.
fn storm_config(
    config: &mut Config,
    opts: &StormOptions,
    size: usize,
) -> anyhow::Result<Option<PrivateRedis>> {
    let scenario = opts.scenario;
    if opts.broken {
        // FAULT INJECTION: every line above the database off.
        config.idempotency.enabled = false;
        config.idempotency.fast_path = false;
        config.lock.request_lock = false;
    }
    let mut redis = None;
    if matches!(scenario, Scenario::RedisDown | Scenario::Chaos) {
        let r = PrivateRedis::start()?;
        config.redis.url = r.url();
        config.lock.mode = LockMode::Single; // the locks must live on the Redis that dies
        redis = Some(r);
    }
    if scenario == Scenario::Chaos {
        // A killed service's records are taken over once its heartbeat and their lease are
        // gone: seconds, so that the clients' retries settle them within the storm.
        config.instance.heartbeat_ttl = Duration::from_secs(2);
        config.idempotency.lease = Duration::from_secs(3);
    }
    if scenario == Scenario::ConsumerCrash {
        config.consumer.batch_size = (size / 5).clamp(1, 100); // several batches: one crashes
    }
    Ok(redis)
}

/// The progress bar on stderr (`--progress`), hidden otherwise.
fn progress_bar(opts: &StormOptions, size: usize) -> ProgressBar {
    let scenario = opts.scenario;
    if opts.progress {
        let bar = ProgressBar::with_draw_target(
            Some(scenario.planned_requests(size, opts.stock)),
            ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} storm {msg} [{bar:40}] {pos}/{len} requests {per_sec} {elapsed}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(scenario.name());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    } else {
        ProgressBar::hidden()
    }
}

/// Plays the storm's traffic and faults.
async fn play(
    rig: &mut Rig,
    client: &StormClient,
    opts: &StormOptions,
    redis: Option<&mut PrivateRedis>,
    size: usize,
    concurrency: usize,
) -> anyhow::Result<Played> {
    match opts.scenario {
        Scenario::DoubleClick => scenarios::double_click(rig, client, size).await,
        Scenario::GatewayRetry => {
            scenarios::gateway_retry(rig, client, size, concurrency, opts.gateway_timeout).await
        }
        Scenario::MqReplay => scenarios::mq_replay(rig, client, size, concurrency).await,
        Scenario::ConsumerCrash => match &opts.binary {
            Some(b) => scenarios::consumer_crash(rig, client, size, concurrency, b).await,
            None => Err(anyhow::anyhow!(
                "consumer-crash needs the idemguard binary (StormOptions::binary)"
            )),
        },
        Scenario::LockExpiry => {
            scenarios::lock_expiry(rig, client, size, concurrency, opts.lock_ttl).await
        }
        Scenario::RedisDown => match redis {
            Some(r) => scenarios::redis_down(rig, client, size, concurrency, r).await,
            None => Err(anyhow::anyhow!("redis-down without its private Redis")),
        },
        Scenario::FlashSale => {
            scenarios::flash_sale(rig, client, size, opts.stock, concurrency).await
        }
        Scenario::Chaos => match (redis, &opts.binary) {
            (Some(r), Some(b)) => {
                let (duration, seed) = (opts.duration, opts.seed);
                chaos::chaos(rig, client, r, b, duration, seed, concurrency).await
            }
            (None, _) => Err(anyhow::anyhow!("chaos without its private Redis")),
            (_, None) => Err(anyhow::anyhow!(
                "chaos needs the idemguard binary to kill (StormOptions::binary)"
            )),
        },
    }
}

/// The run's trace events, read from its trace topic (a blocking read, off the runtime).
async fn read_run_trace(rig: &Rig) -> anyhow::Result<Vec<TraceEvent>> {
    let (kafka, topic) = (
        rig.config.kafka.clone(),
        rig.config.kafka.trace_topic.clone(),
    );
    match tokio::task::spawn_blocking(move || {
        interception::read_trace(&kafka, &topic, Duration::from_secs(60))
    })
    .await
    {
        Ok(read) => read,
        Err(e) => Err(e.into()),
    }
}
