//! What a storm run stands on: its own topics (payment, DLQ, trace — fresh per run, so runs never
//! mix), the real order service in-process on a loopback port, the payment consumer (in-process
//! or the real binary), and the waits that tell when everything has settled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::processes::ChildConfig;
use crate::api::server::{self, Server};
use crate::config::Config;
use crate::contracts::{format_ms, now_ms, Instance};
use crate::db::Database;
use crate::metrics::Metrics;
use crate::stream::lag::consumer_lag;
use crate::stream::{ConsumeOptions, ConsumeStats, PaymentConsumer};
use crate::trace::Tracer;

/// Partitions of each storm topic.
const PARTITIONS: i32 = 3;

/// The identity of one run: in every requestId, topic and consumer group it creates.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    date: String,
}

impl Run {
    pub fn new() -> Run {
        let id = format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        Run {
            id,
            date: format_ms(now_ms())[..10].replace('-', ""),
        }
    }
    /// The Idempotency-Key of order request `n`: `STORM:ORDER:{yyyymmdd}:{run}-{n}`.
    pub fn order_key(&self, n: usize) -> String {
        format!("STORM:ORDER:{}:{}-{n:07}", self.date, self.id)
    }
    /// The Idempotency-Key of a payment callback.
    pub fn pay_key(&self, n: usize, copy: usize) -> String {
        format!("STORM:PAY:{}:{}-{n:07}-{copy}", self.date, self.id)
    }
    pub fn pay_no(&self, n: usize) -> String {
        format!("PAY{}{n:07}", self.id)
    }
    /// LIKE pattern of the run's order requestIds.
    pub fn order_pattern(&self) -> String {
        format!("STORM:ORDER:%:{}-%", self.id)
    }
    /// LIKE pattern of every requestId of the run: orders and payment callbacks.
    pub fn record_pattern(&self) -> String {
        format!("STORM:%:%:{}-%", self.id)
    }
    pub fn group(&self) -> String {
        format!("idemguard-storm-{}", self.id)
    }
    /// SCAN pattern of every Redis key named after one of the run's requestIds: fast-path
    /// copies, request locks and their fence counters.
    pub fn key_pattern(&self) -> String {
        format!("*STORM:*:*:{}-*", self.id)
    }
}

impl Default for Run {
    fn default() -> Self {
        Run::new()
    }
}

/// The run's configuration with fresh topics, and the database the storm reads from.
pub struct Rig {
    pub run: Run,
    pub config: Config,
    /// A small pool of the storm's own (reads, checks, scenario writes).
    pub db: Database,
    pub tracer: Tracer,
    /// The run's own registry: every in-process writer of the run counts its decisions here.
    pub metrics: Arc<Metrics>,
    pub server: Option<Server>,
    pub base: String,
    consumer: Option<RunningConsumer>,
    consumer_tracer: Tracer,
    /// Counters of every in-process consumer incarnation of the run, summed.
    pub consumed: ConsumerCounts,
}

/// What the in-process consumers counted themselves (the trace is cross-checked against it).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ConsumerCounts {
    pub received: u64,
    pub applied: u64,
    pub dedup_hits: u64,
    pub sink_duplicates: u64,
    pub dlq: u64,
    /// Batches retried after a database error (never sent to the DLQ).
    pub db_retries: u64,
}

struct RunningConsumer {
    stop: CancellationToken,
    stats: Arc<ConsumeStats>,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The config of the storm's own pools (checks, consumer): small, the service gets the rest.
fn small_pool(config: &Config) -> Config {
    let mut c = config.clone();
    c.database.max_connections = c.database.max_connections.clamp(1, 4);
    c
}

impl Rig {
    /// Creates the run's topics, connects, starts the service (not yet the consumer).
    pub async fn start(mut config: Config, run: Run) -> anyhow::Result<Rig> {
        let base = format!("storm.{}", run.id);
        config.kafka.payment_topic = format!("{base}.payment.succeeded");
        config.kafka.dlq_topic = format!("{base}.payment.succeeded.dlq");
        config.kafka.trace_topic = format!("{base}.trace");
        config.kafka.consumer_group = run.group();
        create_topics(&config).await?;
        let instance = Instance::current();
        let metrics = Arc::new(Metrics::new());
        let tracer = Tracer::from_config(&config, &instance)?.metered(metrics.clone());
        let consumer_tracer =
            Tracer::from_config(&config, &Instance::current())?.metered(metrics.clone());
        let db = Database::connect(&small_pool(&config)).await?;
        let server = server::start_metered(config.clone(), "127.0.0.1:0", metrics.clone()).await?;
        let base = format!("http://{}", server.addr);
        Ok(Rig {
            run,
            config,
            db,
            tracer,
            metrics,
            server: Some(server),
            base,
            consumer: None,
            consumer_tracer,
            consumed: ConsumerCounts::default(),
        })
    }

    /// Starts the in-process consumer on the run's group.
    pub async fn start_consumer(&mut self) -> anyhow::Result<()> {
        if self.consumer.is_some() {
            return Ok(());
        }
        let db = Database::connect(&small_pool(&self.config)).await?;
        let options = ConsumeOptions {
            group: Some(self.run.group()),
            crash_after_db_commit: None,
        };
        let consumer =
            PaymentConsumer::new(&self.config, db, self.consumer_tracer.clone(), options)?;
        let stats = consumer.stats();
        let stop = CancellationToken::new();
        let handle = tokio::spawn(consumer.run(stop.clone()));
        self.consumer = Some(RunningConsumer {
            stop,
            stats,
            handle,
        });
        Ok(())
    }

    /// Stops the in-process consumer after its current batch (offsets committed).
    pub async fn stop_consumer(&mut self) -> anyhow::Result<Option<Arc<ConsumeStats>>> {
        let Some(c) = self.consumer.take() else {
            return Ok(None);
        };
        c.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), c.handle)
            .await
            .map_err(|_| anyhow::anyhow!("the consumer did not stop within 30s"))???;
        let get = |a: &std::sync::atomic::AtomicU64| ConsumeStats::get(a);
        self.consumed.received += get(&c.stats.received);
        self.consumed.applied += get(&c.stats.applied);
        self.consumed.dedup_hits += get(&c.stats.dedup_hits);
        self.consumed.sink_duplicates += get(&c.stats.sink_duplicates);
        self.consumed.dlq += get(&c.stats.dlq);
        self.consumed.db_retries += get(&c.stats.db_retries);
        Ok(Some(c.stats))
    }

    /// Payment events of the run the outbox relay has not published yet.
    async fn pending(&self) -> anyhow::Result<i64> {
        with_retries("counting the run's unpublished events", || async {
            Ok(sqlx::query_scalar(self.db.sql("storm_outbox_pending"))
                .bind(self.config.kafka.payment_topic.as_str())
                .fetch_one(&self.db.pool)
                .await?)
        })
        .await
    }

    /// Waits (bounded) until the outbox has published every payment event of the run and the
    /// consumer group has committed everything on the payment topic.
    pub async fn drain(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let pending = self.pending().await?;
            let lag = if pending == 0 { self.lag().await? } else { -1 };
            if pending == 0 && lag == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the run did not settle within {within:?}: {pending} payment event(s) not published by the outbox relay, consumer lag {lag} (is the consumer running? is the broker up? scripts/stack status)"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (bounded) until the outbox relay has published every payment event of the run.
    pub async fn wait_published(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let pending = self.pending().await?;
            if pending == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!("{pending} payment event(s) not published by the outbox relay within {within:?} (is the broker up? scripts/stack status)");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Messages on the payment topic the run's group has not committed.
    pub async fn lag(&self) -> anyhow::Result<i64> {
        let (kafka, group, topic) = (
            self.config.kafka.clone(),
            self.run.group(),
            self.config.kafka.payment_topic.clone(),
        );
        let lags = tokio::task::spawn_blocking(move || {
            consumer_lag(&kafka, &group, &topic, Duration::from_secs(10))
        })
        .await??;
        Ok(lags.iter().map(|p| p.lag).sum())
    }

    /// Moves the run's group back to the start of every partition (an operator's rewind). The
    /// group must have no live member: stop the consumer first.
    pub async fn rewind_group(&self) -> anyhow::Result<()> {
        let (kafka, group, topic) = (
            self.config.kafka.clone(),
            self.run.group(),
            self.config.kafka.payment_topic.clone(),
        );
        let servers = kafka.bootstrap_servers.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let c: BaseConsumer = crate::kafka_client::client_config(&kafka)
                .set("group.id", &group)
                .set("enable.auto.commit", "false")
                .set("log_level", "3")
                .create()?;
            let mut tpl = TopicPartitionList::new();
            for p in 0..PARTITIONS {
                tpl.add_partition_offset(&topic, p, Offset::Offset(0))?;
            }
            c.commit(&tpl, CommitMode::Sync)
                .map_err(|e| anyhow::anyhow!("kafka {servers}: cannot rewind group {group}: {e}"))
        })
        .await?
    }

    /// Produces every payment event of the run a second time, exactly as the relay published
    /// it (same key, headers, payload) — what a producer retry or a replay tool does.
    pub async fn reproduce_events(&self) -> anyhow::Result<usize> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[allow(dead_code)]
            event_id: String,
            msg_key: String,
            headers: String,
            payload: String,
        }
        let rows: Vec<Row> = with_retries("reading the run's outbox", || async {
            Ok(sqlx::query_as(self.db.sql("storm_outbox_events"))
                .bind(self.config.kafka.payment_topic.as_str())
                .fetch_all(&self.db.pool)
                .await?)
        })
        .await?;
        let producer: FutureProducer = crate::kafka_client::producer_config(&self.config.kafka)
            .set("acks", "all")
            .set("log_level", "3")
            .create()?;
        let topic = self.config.kafka.payment_topic.as_str();
        let sends = rows.iter().map(|row| {
            let mut hs = OwnedHeaders::new();
            if let Ok(serde_json::Value::Object(map)) =
                serde_json::from_str::<serde_json::Value>(&row.headers)
            {
                for (k, v) in map {
                    if let serde_json::Value::String(v) = v {
                        hs = hs.insert(Header {
                            key: &k,
                            value: Some(v.as_bytes()),
                        });
                    }
                }
            }
            let record = FutureRecord::to(topic)
                .key(&row.msg_key)
                .payload(&row.payload)
                .headers(hs);
            producer.send(record, Duration::from_secs(30))
        });
        for r in futures::future::join_all(sends).await {
            r.map_err(|(e, _)| {
                anyhow::anyhow!(
                    "kafka {}: cannot re-produce a payment event: {e}",
                    self.config.kafka.bootstrap_servers
                )
            })?;
        }
        Ok(rows.len())
    }

    /// Runs the real `idemguard consume` binary on the run's group with
    /// `--crash-after-db-commit 1` and waits (bounded) for it to abort.
    pub async fn crash_real_consumer(
        &self,
        binary: &std::path::Path,
        within: Duration,
    ) -> anyhow::Result<String> {
        // The child reads the run's exact configuration from a private file, removed afterwards.
        let file = ChildConfig::write(&self.config, &self.run.id)?;
        let child = file
            .command(
                binary,
                &[
                    "consume",
                    "--group",
                    &self.run.group(),
                    "--crash-after-db-commit",
                    "1",
                ],
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output();
        let out = tokio::time::timeout(within, child).await;
        drop(file);
        let out = out.map_err(|_| {
            anyhow::anyhow!(
                "{} consume did not crash within {within:?} (no batch arrived?)",
                binary.display()
            )
        })??;
        if out.status.success() {
            anyhow::bail!(
                "{} consume exited cleanly; it was meant to abort after its first database commit",
                binary.display()
            );
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        Ok(stderr
            .lines()
            .rfind(|l| l.contains("crashing"))
            .unwrap_or("aborted")
            .to_string())
    }

    /// Stops everything the run started and flushes the trace producers. Returns the consumer's
    /// counters when it was running.
    pub async fn shutdown(&mut self) -> anyhow::Result<Option<Arc<ConsumeStats>>> {
        let stats = self.stop_consumer().await?;
        self.stop_server().await?;
        let (a, b) = (self.tracer.clone(), self.consumer_tracer.clone());
        tokio::task::spawn_blocking(move || {
            a.flush(Duration::from_secs(5));
            b.flush(Duration::from_secs(5));
        })
        .await?;
        Ok(stats)
    }

    /// Stops the in-process service (the requests in flight finish; the outbox is published):
    /// at the end, or when the chaos storm runs the real `serve` on its address instead.
    pub async fn stop_server(&mut self) -> anyhow::Result<()> {
        if let Some(s) = self.server.take() {
            s.shutdown.cancel();
            tokio::time::timeout(Duration::from_secs(30), s.done)
                .await
                .map_err(|_| anyhow::anyhow!("the service did not stop within 30s"))???;
        }
        Ok(())
    }

    /// Trace events emitted/delivered/dropped by the storm's own tracers.
    pub fn trace_counts(&self) -> (crate::trace::TraceCounts, crate::trace::TraceCounts) {
        (self.tracer.stats(), self.consumer_tracer.stats())
    }

    /// Deletes the run's topics (best effort: the broker may not support it).
    pub async fn delete_topics(&self) {
        let Ok(admin) = crate::kafka_client::client_config(&self.config.kafka)
            .set("log_level", "3")
            .create::<AdminClient<DefaultClientContext>>()
        else {
            return;
        };
        let k = &self.config.kafka;
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(5)));
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            admin.delete_topics(&[&k.payment_topic, &k.dlq_topic, &k.trace_topic], &opts),
        )
        .await;
    }

    /// Deletes the run's Redis keys on the main Redis and every RedLock node (best effort): the
    /// fast-path copies alone would otherwise stay for `fast_path_ttl` (a day), thousands a run.
    pub async fn delete_keys(&self) {
        let r = &self.config.redis;
        let access = crate::lock::RedisAccess::of(r);
        for url in std::iter::once(&r.url).chain(&r.redlock_nodes) {
            let _ = tokio::time::timeout(
                Duration::from_secs(10),
                delete_matching(&access, url, &self.run.key_pattern()),
            )
            .await;
        }
    }
}

/// The storm's own database work, retried (5 attempts, bounded): the chaos storm ends every
/// session of the run's database, the storm's own too, and the tester is not what is under test.
pub async fn with_retries<T, F, Fut>(what: &str, mut work: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut attempt = 1;
    loop {
        match work().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt >= 5 => return Err(e.context(format!("{what} ({attempt} attempts)"))),
            Err(e) => {
                tracing::debug!(error = %e, attempt, "storm: {what} failed; retrying");
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                attempt += 1;
            }
        }
    }
}

/// `access`: the TLS files and password of `[redis]`, as every other client of the run has them.
async fn delete_matching(
    access: &crate::lock::RedisAccess,
    url: &str,
    pattern: &str,
) -> redis::RedisResult<()> {
    let mut conn = access
        .client(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut cursor: u64 = 0;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !found.is_empty() {
            let _: i64 = redis::cmd("DEL").arg(&found).query_async(&mut conn).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

async fn create_topics(config: &Config) -> anyhow::Result<()> {
    let servers = &config.kafka.bootstrap_servers;
    let admin: AdminClient<DefaultClientContext> =
        crate::kafka_client::client_config(&config.kafka)
            .set("log_level", "3")
            .create()?;
    let k = &config.kafka;
    let topics: Vec<NewTopic> = [&k.payment_topic, &k.dlq_topic, &k.trace_topic]
        .iter()
        .map(|n| NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(1)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = tokio::time::timeout(Duration::from_secs(20), admin.create_topics(&topics, &opts))
        .await
        .map_err(|_| anyhow::anyhow!("kafka {servers} did not answer within 20s (is it running? scripts/stack status)"))?
        .map_err(|e| anyhow::anyhow!("kafka {servers}: cannot create the run's topics: {e} (is it running? scripts/stack status)"))?;
    for r in results {
        r.map_err(|(t, e)| anyhow::anyhow!("kafka {servers}: cannot create topic {t}: {e}"))?;
    }
    Ok(())
}
