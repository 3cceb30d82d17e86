//! `idemguard consume`: a consumer-group member on `payment.succeeded` that makes at-least-once
//! delivery effectively once (seed §4, §6.3).
//!
//! The loop, per batch of `consumer.batch_size` messages when it keeps up, up to
//! `consumer.batch_size_max` when it is behind (a full batch lets the next take up to that):
//! 1. parse; a poison message (not JSON, missing fields, IDs that disagree with the headers,
//!    unknown order, larger than `consumer.max_message_bytes`) goes to the DLQ with its reason
//!    and original partition/offset — once per group and source position (`processed_event`,
//!    outcome `dlq`), so a retried or redelivered batch does not publish it again. One too large
//!    for the DLQ is published as a record of it cut to fit, or kept as `dlq_failed` when even
//!    that is refused ([`super::poison`]): no message holds up the batch;
//! 2. drop events the dedup state has seen within the TTL — memory first, then
//!    `processed_event` — before any sink work (`dedup_hit`);
//! 3. run each sink in its own transaction (order → PAID; then points and notification,
//!    concurrently when `consumer.concurrent_sinks`; then `processed_event`); a sink's unique key
//!    saying "already there" is `sink_duplicate`;
//! 4. only then commit the offsets. With `consumer.async_offset_commit` the loop does not wait
//!    for the broker's answer here: the commit runs while the next batch is received and looked
//!    up, and its answer is awaited before that batch writes anything (and at a stop). A refused
//!    commit ends `consume` either way, before another batch is applied.
//!
//! A crash anywhere before step 4 redelivers the batch, and every step is idempotent, so the
//! redelivery changes nothing. A transient database error retries the whole batch with backoff
//! (never the DLQ): the partition waits rather than losing or doubling anything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::dedup::DedupState;
use super::poison;
use super::sinks::{self, DeadLetter, Delivery, PaidDecision, SinkWrite};
use crate::config::Config;
use crate::contracts::{headers, now_ms, Layer, Outcome, PaymentSucceeded, TraceEvent};
use crate::db::orders::Orders;
use crate::db::Database;
use crate::trace::Tracer;

/// Counters of one consumer, readable while it runs.
#[derive(Debug, Default)]
pub struct ConsumeStats {
    pub received: AtomicU64,
    pub applied: AtomicU64,
    pub dedup_hits: AtomicU64,
    pub sink_duplicates: AtomicU64,
    pub transitions_rejected: AtomicU64,
    pub dlq: AtomicU64,
    pub batches: AtomicU64,
    pub db_retries: AtomicU64,
    /// Poison not published again: this group's `processed_event` already records it sent.
    pub dlq_duplicates: AtomicU64,
    /// DLQ publications the broker refused or did not acknowledge (a refusal for good is
    /// followed by a record of the message; anything else retries the batch).
    pub dlq_failures: AtomicU64,
    /// Poison messages the DLQ refused even as a record: kept in `processed_event` as
    /// `dlq_failed` ([`poison`]).
    pub dlq_unpublished: AtomicU64,
    /// Errors from the broker while receiving (the loop logs them and goes on).
    pub receive_errors: AtomicU64,
    /// Time spent processing batches, from the batch in hand to its database commit (µs).
    pub busy_micros: AtomicU64,
    /// The largest batch so far (the adaptive size reached).
    pub largest_batch: AtomicU64,
}

impl ConsumeStats {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Options that are not configuration: fault injection for the storm tester and the tests.
#[derive(Debug, Clone, Default)]
pub struct ConsumeOptions {
    /// Abort the process right after the database commit of this many batches, before the
    /// offset commit — the crash the sinks' unique keys exist for.
    pub crash_after_db_commit: Option<u64>,
    /// Overrides `kafka.consumer_group` (the benchmark and tests use their own groups).
    pub group: Option<String>,
}

/// Logs partition assignment changes; offsets are committed after every batch, so a revoke
/// never has processed-but-uncommitted work to lose.
///
/// No `commit_callback`: librdkafka hands the answer to a manual asynchronous commit
/// (`rd_kafka_commit(…, async)`) only to an `offset_commit_cb`, which rdkafka never installs —
/// its OFFSET_COMMIT event carries the auto-commit's answers only. A refusal was never seen there
/// (librdkafka logged it at warning level, below our `log_level` 3), which is why an evicted
/// member kept consuming with `async_offset_commit` on. The loop awaits every commit's answer
/// itself ([`PendingCommit`]).
///
/// It counts the assignments lost (`lost`): a member whose group session timed out — frozen or
/// starved for `session.timeout.ms` — has its partitions revoked as lost by librdkafka itself,
/// which then rejoins. A batch applied across such a loss must not go on as if nothing happened:
/// its late commit is refused by the broker, or — when librdkafka rejoined before sending it —
/// accepted under the new membership; which of the two is a race between librdkafka's session
/// timer and the commit. [`PendingCommit::answer`] treats both alike.
#[derive(Default)]
struct RebalanceLog {
    lost: AtomicU64,
}

impl ClientContext for RebalanceLog {}

impl ConsumerContext for RebalanceLog {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            if consumer.assignment_lost() {
                self.lost.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(
                    partitions = tpl.count(),
                    "partitions revoked as lost (the group session timed out)"
                );
            } else {
                tracing::info!(
                    partitions = tpl.count(),
                    "partitions revoked (offsets of finished batches are already committed)"
                );
            }
        }
    }
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| format!("{}/{}", e.topic(), e.partition()))
                    .collect();
                tracing::info!(partitions = %parts.join(","), "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
            Rebalance::Revoke(_) => {}
        }
    }
}

pub struct PaymentConsumer {
    db: Database,
    orders: Orders,
    tracer: Tracer,
    consumer: Arc<StreamConsumer<RebalanceLog>>,
    dlq: FutureProducer,
    dlq_topic: String,
    group: String,
    topic: String,
    batch_size: usize,
    batch_size_max: usize,
    /// The size the next batch may reach: adapts between `batch_size` and `batch_size_max`.
    batch_target: usize,
    concurrent_sinks: bool,
    async_commit: bool,
    dedup: DedupState,
    options: ConsumeOptions,
    stats: Arc<ConsumeStats>,
    retention: crate::config::RetentionConfig,
    /// `consumer.max_message_bytes` and `consumer.dlq_max_message_bytes` ([`poison`]).
    max_message_bytes: usize,
    dlq_max_message_bytes: usize,
    /// The messages of the batch in hand kept cut ([`poison::kept`]), by partition and offset:
    /// their whole size.
    cut: HashMap<(i32, i64), usize>,
}

/// An offset commit on its way to the broker (`consumer.async_offset_commit`), on a blocking
/// thread: the next batch is received and looked up meanwhile, and writes nothing before its
/// answer — so a member evicted from its group ends on the refusal exactly as with a synchronous
/// commit, one round trip to the broker later and nothing applied in between.
struct PendingCommit {
    answer: tokio::task::JoinHandle<KafkaResult<()>>,
    consumer: Arc<StreamConsumer<RebalanceLog>>,
    /// [`RebalanceLog::lost`] when the batch was received.
    lost_before: u64,
}

impl PendingCommit {
    /// Waits for the broker's answer. Polled again after it was dropped unfinished, it goes on
    /// waiting (a `select!` may drop it); not polled again once it has answered. An accepted
    /// commit of a batch the member lost its assignment across is refused all the same
    /// ([`RebalanceLog`]): the outcome no longer depends on who won the race.
    async fn answer(&mut self) -> Result<(), CommitRefused> {
        let answer = self.answer_of_broker().await;
        if let (Err(_), Some(m)) = (&answer, crate::metrics::recording()) {
            m.consumer_commit_failures.inc();
        }
        answer
    }

    async fn answer_of_broker(&mut self) -> Result<(), CommitRefused> {
        match (&mut self.answer).await {
            Ok(Ok(())) if self.assignment_lost() => Err(CommitRefused(
                "the member's partitions were revoked as lost while it applied the batch (no \
                 heartbeat within session.timeout.ms: the process was frozen or starved), so \
                 another member may own them now"
                    .into(),
            )),
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(CommitRefused(e.to_string())),
            Err(e) => Err(CommitRefused(format!("the commit's thread failed: {e}"))),
        }
    }

    /// Lost since the batch was received: still lost (librdkafka's own flag, until the member is
    /// assigned again), or lost and assigned again meanwhile (the count went up).
    fn assignment_lost(&self) -> bool {
        self.consumer.assignment_lost()
            || self.consumer.context().lost.load(Ordering::SeqCst) != self.lost_before
    }

    /// [`PendingCommit::answer`], consuming the commit, as `consume`'s error.
    async fn await_answer(mut self) -> anyhow::Result<()> {
        Ok(self.answer().await?)
    }
}

/// The broker refused an offset commit (the member was evicted from its group, the coordinator
/// moved): `consume` ends with it. Never retried as a database error is — the partitions may be
/// someone else's now.
#[derive(Debug)]
struct CommitRefused(String);

impl std::fmt::Display for CommitRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offset commit failed: {} (the batches since the last committed offset will be redelivered and change nothing)", self.0)
    }
}

impl std::error::Error for CommitRefused {}

/// A message that cannot be processed, and why.
struct Poison {
    message: OwnedMessage,
    reason: String,
    /// Its whole size when it was kept cut ([`poison::kept`]).
    cut_from: Option<usize>,
}

/// What became of a poison message at the DLQ ([`PaymentConsumer::dead_letter_one`]).
enum DeadLettered {
    /// Published, whole or as a record of it cut to fit (recorded as `dlq`).
    Published,
    /// Refused for good even as a record: kept in `processed_event` as `dlq_failed`.
    Refused,
}

impl PaymentConsumer {
    /// Joins the group and subscribes. Fails with the broker's address when it cannot.
    pub fn new(
        config: &Config,
        db: Database,
        tracer: Tracer,
        options: ConsumeOptions,
    ) -> anyhow::Result<PaymentConsumer> {
        let group = options
            .group
            .clone()
            .unwrap_or_else(|| config.kafka.consumer_group.clone());
        let servers = &config.kafka.bootstrap_servers;
        let consumer: StreamConsumer<RebalanceLog> =
            crate::kafka_client::client_config(&config.kafka)
                .set("group.id", &group)
                .set(
                    "client.id",
                    format!("idemguard-consume-{}", tracer.instance_id()),
                )
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .set("session.timeout.ms", "10000")
                .set("heartbeat.interval.ms", "1000")
                // A topic created (or partitions added) after the consumer started is seen within
                // 10 s, not librdkafka's default 5 minutes; until then each poll reports it missing.
                .set("topic.metadata.refresh.interval.ms", "10000")
                // Bounded reads: a fetch, a partition's share of it, what is read ahead.
                .set("fetch.max.bytes", poison::FETCH_MAX_BYTES)
                .set(
                    "max.partition.fetch.bytes",
                    poison::PARTITION_FETCH_MAX_BYTES,
                )
                .set("queued.max.messages.kbytes", poison::QUEUED_MAX_KBYTES)
                .set("log_level", "3")
                .create_with_context(RebalanceLog::default())
                .map_err(|e| anyhow::anyhow!("kafka {servers}: cannot create the consumer: {e}"))?;
        consumer
            .subscribe(&[&config.kafka.payment_topic])
            .map_err(|e| {
                anyhow::anyhow!(
                    "kafka {servers}: cannot subscribe to {}: {e}",
                    config.kafka.payment_topic
                )
            })?;
        let dlq: FutureProducer = crate::kafka_client::client_config(&config.kafka)
            .set(
                "client.id",
                format!("idemguard-dlq-{}", tracer.instance_id()),
            )
            .set("acks", "all")
            .set("message.timeout.ms", "30000")
            .set(
                "message.max.bytes",
                config.consumer.dlq_max_message_bytes.to_string(),
            )
            .set("log_level", "3")
            .create()
            .map_err(|e| anyhow::anyhow!("kafka {servers}: cannot create the DLQ producer: {e}"))?;
        Ok(PaymentConsumer {
            orders: Orders::new(db.clone(), tracer.clone()),
            db,
            tracer,
            consumer: Arc::new(consumer),
            dlq,
            dlq_topic: config.kafka.dlq_topic.clone(),
            group,
            topic: config.kafka.payment_topic.clone(),
            batch_size: config.consumer.batch_size,
            batch_size_max: config
                .consumer
                .batch_size_max
                .max(config.consumer.batch_size),
            batch_target: config.consumer.batch_size,
            concurrent_sinks: config.consumer.concurrent_sinks,
            async_commit: config.consumer.async_offset_commit,
            dedup: DedupState::new(
                config.consumer.dedup_ttl,
                config.consumer.dedup_memory_entries,
            ),
            options,
            stats: Arc::new(ConsumeStats::default()),
            retention: config.retention.clone(),
            max_message_bytes: config.consumer.max_message_bytes,
            dlq_max_message_bytes: config.consumer.dlq_max_message_bytes,
            cut: HashMap::new(),
        })
    }

    pub fn stats(&self) -> Arc<ConsumeStats> {
        self.stats.clone()
    }

    /// Consume until `shutdown` is cancelled. Returns after the last finished batch's offsets
    /// are committed.
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(group = %self.group, topic = %self.topic, "consuming");
        // The dedup state past its TTL, beside the loop, stopped with it.
        let stop_purge = shutdown.child_token();
        let purge_task = crate::db::retention::spawn(
            self.db.clone(),
            crate::db::retention::Purge::CONSUME,
            self.retention.clone(),
            stop_purge.clone(),
        );
        let result = self.consume(&shutdown).await;
        stop_purge.cancel(); // ends after its current statement
        let _ = purge_task.await;
        result
    }

    async fn consume(&mut self, shutdown: &CancellationToken) -> anyhow::Result<()> {
        // The last batch's offset commit while it is in flight (`async_offset_commit`).
        let mut pending: Option<PendingCommit> = None;
        loop {
            let Some(batch) = self.receive(&mut pending, shutdown).await? else {
                break;
            };
            if batch.is_empty() {
                continue;
            }
            let batch_len = batch.len();
            self.adapt_batch_size(batch_len);
            let lost_before = self.consumer.context().lost.load(Ordering::SeqCst);
            let next = next_offsets(&batch);
            let started = Instant::now();
            if !self
                .process_with_retry(batch, &mut pending, shutdown)
                .await?
            {
                break; // shut down while the database was unavailable: nothing committed
            }
            let st = &self.stats;
            st.busy_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            if let Some(m) = self.tracer.metrics() {
                m.consumer_batch_messages.observe(batch_len as f64);
                m.consumer_batch_seconds
                    .observe(started.elapsed().as_secs_f64());
            }
            let n = st.batches.fetch_add(1, Ordering::Relaxed) + 1;
            if self.options.crash_after_db_commit == Some(n) {
                eprintln!("idemguard consume: crashing after the database commit of batch {n}, before the offset commit (fault injection)");
                std::process::abort();
            }
            let commit = self.start_commit(to_tpl(&next), lost_before);
            if self.async_commit {
                pending = Some(commit);
            } else {
                commit.await_answer().await?;
            }
        }
        if let Some(last) = pending {
            // The last finished batch's position, confirmed before `run` returns.
            last.await_answer().await?;
        }
        let st = &self.stats;
        let get = ConsumeStats::get;
        tracing::info!(
            received = get(&st.received),
            applied = get(&st.applied),
            dedup_hits = get(&st.dedup_hits),
            sink_duplicates = get(&st.sink_duplicates),
            dlq = get(&st.dlq),
            db_retries = get(&st.db_retries),
            "stopped"
        );
        Ok(())
    }

    /// The next batch, while the previous batch's offset commit (if in flight) is answered: a
    /// refusal ends `consume` at once, also when no message comes. `None` once shut down (a
    /// batch being filled is dropped: its offsets were never committed).
    async fn receive(
        &mut self,
        pending: &mut Option<PendingCommit>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<Vec<OwnedMessage>>> {
        // Pinned outside the loop: an answer arriving while the batch fills must not drop the
        // messages already taken from the queue.
        let next = self.next_batch();
        tokio::pin!(next);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                answer = async { pending.as_mut().expect("guarded by is_some").answer().await },
                    if pending.is_some() =>
                {
                    *pending = None;
                    answer?;
                }
                batch = &mut next => return batch.map(Some),
            }
        }
    }

    fn adapt_batch_size(&mut self, got: usize) {
        self.stats
            .largest_batch
            .fetch_max(got as u64, Ordering::Relaxed);
        self.batch_target =
            next_batch_target(got, self.batch_target, self.batch_size, self.batch_size_max);
    }

    /// Up to the adaptive batch size and [`BATCH_BYTES`]: waits for the first message, then
    /// takes what arrives within 20 ms. A message too large is kept cut ([`poison::kept`]).
    async fn next_batch(&mut self) -> anyhow::Result<Vec<OwnedMessage>> {
        let mut batch = Vec::new();
        self.cut.clear();
        let max = self.max_message_bytes;
        let first = self.consumer.recv().await;
        match first {
            Ok(m) => batch.push(keep(&m, max, &mut self.cut)),
            Err(e) => {
                self.stats.receive_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "kafka receive error; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(batch);
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(20);
        let mut bytes = batch.iter().map(poison::size_of).sum::<usize>();
        while batch.len() < self.batch_target && bytes < BATCH_BYTES {
            match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Ok(Ok(m)) => {
                    let kept = keep(&m, max, &mut self.cut);
                    bytes += poison::size_of(&kept);
                    batch.push(kept);
                }
                Ok(Err(e)) => {
                    self.stats.receive_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "kafka receive error");
                    break;
                }
                Err(_) => break,
            }
        }
        self.stats
            .received
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(batch)
    }

    /// Retries the batch while the database fails transiently; false if shut down meanwhile.
    /// A refused offset commit of the previous batch is not retried: it ends `consume`.
    async fn process_with_retry(
        &mut self,
        batch: Vec<OwnedMessage>,
        pending: &mut Option<PendingCommit>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<bool> {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.process(&batch, pending).await {
                Ok(()) => return Ok(true),
                Err(e) if e.is::<CommitRefused>() => return Err(e),
                Err(e) => {
                    self.stats.db_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %format!("{e:#}"), retry_in = ?backoff, "batch failed; retrying (nothing was committed to Kafka, every sink is idempotent)");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(false),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// One batch through the pipeline: parse → dedup (memory, then one query) → the previous
    /// batch's offset commit answered → sink 1 → sinks 2 and 3 → the persisted dedup state →
    /// poison to the DLQ. The order of the steps is the guarantee (nothing written before the
    /// previous commit is answered, poison last, after every write), and each step narrows the
    /// list the next one sees.
    async fn process(
        &mut self,
        batch: &[OwnedMessage],
        pending: &mut Option<PendingCommit>,
    ) -> anyhow::Result<()> {
        let now = now_ms();
        let (parsed, mut poison) = self.read_batch(batch);
        // The dedup state: memory first, then one query for the batch's misses.
        let misses: Vec<&str> = parsed
            .iter()
            .filter(|(_, e)| !self.dedup.contains(&e.event_id, now))
            .map(|(_, e)| e.event_id.as_str())
            .collect();
        let persisted = sinks::already_processed(&self.db, &self.group, &misses).await?;
        // Everything above only read. Before the first write, the previous batch's offset commit
        // must be answered: a member evicted from its group stops here, having applied nothing
        // of this batch — as it stops on a refused synchronous commit.
        if let Some(mut previous) = pending.take() {
            previous.answer().await?;
        }
        let fresh = self.drop_seen(parsed, &persisted, now);

        // Sink 1: order → PAID. Decides which events go on to the other sinks.
        let decisions = if fresh.is_empty() {
            Vec::new()
        } else {
            sinks::mark_paid(&self.orders, &fresh).await?
        };
        let (effects, processed) = self.route_decisions(batch, &fresh, &decisions, &mut poison);

        // Sinks 2 and 3, each with its own unique key, each in its own transaction.
        if !effects.is_empty() {
            self.apply_effects(&effects).await?;
        }
        // Sink 4, last: the persisted dedup state.
        if !processed.is_empty() {
            let ttl = self.dedup.ttl_ms();
            sinks::record_processed(&self.db, &self.group, ttl, &processed).await?;
            for (d, _) in &processed {
                self.dedup.remember(&d.event.event_id, now);
            }
        }
        // Poison last: after every database write succeeded.
        self.dead_letter(&poison).await
    }

    /// The batch parsed: the payment events, and the messages that are poison (unreadable, or
    /// kept cut for their size).
    fn read_batch<'b>(
        &self,
        batch: &'b [OwnedMessage],
    ) -> (Vec<(&'b OwnedMessage, PaymentSucceeded)>, Vec<Poison>) {
        let mut poison: Vec<Poison> = Vec::new();
        let mut parsed: Vec<(&OwnedMessage, PaymentSucceeded)> = Vec::new();
        for m in batch {
            let cut_from = self.cut.get(&(m.partition(), m.offset())).copied();
            let read = match cut_from {
                Some(size) => Err(poison::too_large(size, self.max_message_bytes)),
                None => parse(m),
            };
            match read {
                Ok(e) => parsed.push((m, e)),
                Err(reason) => poison.push(Poison {
                    message: m.clone(),
                    reason,
                    cut_from,
                }),
            }
        }
        (parsed, poison)
    }

    /// The events not seen before — in memory, earlier in this batch, or in the persisted
    /// dedup state; each one seen is counted and traced as a dedup hit.
    fn drop_seen(
        &mut self,
        parsed: Vec<(&OwnedMessage, PaymentSucceeded)>,
        persisted: &HashSet<String>,
        now: i64,
    ) -> Vec<Delivery> {
        let mut fresh: Vec<Delivery> = Vec::new();
        let mut in_batch: HashSet<String> = HashSet::new();
        for (m, event) in parsed {
            let started = Instant::now();
            let seen = self.dedup.contains(&event.event_id, now)
                || in_batch.contains(&event.event_id)
                || persisted.contains(&event.event_id);
            if seen {
                self.stats.dedup_hits.fetch_add(1, Ordering::Relaxed);
                self.dedup.remember(&event.event_id, now);
                self.tracer.emit(
                    TraceEvent::new(Layer::Stream, Outcome::DedupHit)
                        .order_no(&event.order_no)
                        .request_id(&event.request_id)
                        .event_id(&event.event_id)
                        .detail(format!(
                            "partition {} offset {}: seen within the dedup TTL",
                            m.partition(),
                            m.offset()
                        ))
                        .since(started),
                );
                continue;
            }
            in_batch.insert(event.event_id.clone());
            fresh.push(Delivery {
                event,
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
            });
        }
        fresh
    }

    /// What sink 1 decided, per event: the events whose effects (points, notification) are
    /// written, the events recorded as processed with their verdict, and — pushed to `poison`
    /// — the events for an unknown order or already used by another order.
    fn route_decisions<'d>(
        &self,
        batch: &[OwnedMessage],
        fresh: &'d [Delivery],
        decisions: &[PaidDecision],
        poison: &mut Vec<Poison>,
    ) -> (Vec<&'d Delivery>, Vec<(&'d Delivery, &'static str)>) {
        let mut effects: Vec<&Delivery> = Vec::new();
        let mut processed: Vec<(&Delivery, &'static str)> = Vec::new();
        for (d, decision) in fresh.iter().zip(decisions) {
            let ev = |o: Outcome| {
                TraceEvent::new(Layer::Stream, o)
                    .order_no(&d.event.order_no)
                    .request_id(&d.event.request_id)
                    .event_id(&d.event.event_id)
            };
            match decision {
                PaidDecision::Applied => {
                    effects.push(d);
                    processed.push((d, "applied"));
                }
                PaidDecision::AlreadyApplied => {
                    self.sink_duplicate(
                        ev(Outcome::SinkDuplicate)
                            .detail("order_record: already PAID by this event"),
                    );
                    effects.push(d);
                    processed.push((d, "applied"));
                }
                PaidDecision::PaidByOther(by) => {
                    self.stats
                        .transitions_rejected
                        .fetch_add(1, Ordering::Relaxed);
                    self.tracer.emit(ev(Outcome::TransitionRejected).detail(format!("order already PAID by event {by}: no points or notification for a second payment")));
                    processed.push((d, "paid_by_other"));
                }
                PaidDecision::Rejected(status) => {
                    self.stats
                        .transitions_rejected
                        .fetch_add(1, Ordering::Relaxed);
                    self.tracer.emit(
                        ev(Outcome::TransitionRejected)
                            .detail(format!("order is {status}; PAID not allowed")),
                    );
                    processed.push((d, "rejected"));
                }
                PaidDecision::UnknownOrder | PaidDecision::EventUsedElsewhere(_) => {
                    let message = batch
                        .iter()
                        .find(|m| m.partition() == d.partition && m.offset() == d.offset)
                        .expect("delivery comes from the batch");
                    let reason = match decision {
                        // The order named by the sink is the one this event cannot pay.
                        PaidDecision::EventUsedElsewhere(refused) => format!(
                            "event {} already paid another order, so it cannot pay order {refused}",
                            d.event.event_id
                        ),
                        _ => format!("unknown order {}", d.event.order_no),
                    };
                    poison.push(Poison {
                        message: message.clone(),
                        reason,
                        cut_from: None,
                    });
                }
            }
        }
        (effects, processed)
    }

    /// Sinks 2 and 3: the points and the notifications of the events sink 1 applied —
    /// concurrently, or the notifications only once the points are written.
    async fn apply_effects(&self, effects: &[&Delivery]) -> anyhow::Result<()> {
        let (points, notes) = if self.concurrent_sinks {
            futures::join!(
                sinks::write_points(&self.db, effects),
                sinks::write_notifications(&self.db, effects)
            )
        } else {
            let points = sinks::write_points(&self.db, effects).await;
            let notes = match points {
                Ok(_) => sinks::write_notifications(&self.db, effects).await,
                Err(_) => Ok(Vec::new()), // not attempted: the batch is retried
            };
            (points, notes)
        };
        let points = points?;
        // Counted as soon as the points are committed: a retry after a later failure
        // finds them there and would count them as duplicates.
        let applied = points.iter().filter(|w| **w == SinkWrite::Applied).count();
        self.stats
            .applied
            .fetch_add(applied as u64, Ordering::Relaxed);
        // Applied events are not traced one by one; the metric says the trace's word.
        if let Some(m) = self.tracer.metrics() {
            m.applied(applied as u64);
        }
        self.report_sink("points_ledger", effects, &points);
        let notes = notes?;
        self.report_sink("notification", effects, &notes);
        Ok(())
    }

    /// Publishes each poison message once per group: a message whose source position this
    /// group's `processed_event` already records as dead-lettered (a batch retried after a
    /// failed publish or a failed offset commit, a redelivery after a crash) is not published
    /// again. Each publication is recorded once the broker has acknowledged it, also when a later
    /// one of the batch fails. One window is left: a crash or a database failure between the
    /// acknowledgement and that record's commit publishes the message again on redelivery — with
    /// the same `dlq.id` header, by which a DLQ reader drops it.
    async fn dead_letter(&self, poison: &[Poison]) -> anyhow::Result<()> {
        if poison.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = poison.iter().map(|p| dead_letter_id(&p.message)).collect();
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let published = sinks::already_processed(&self.db, &self.group, &id_refs).await?;
        let mut sent: Vec<DeadLetter<'_>> = Vec::new();
        let mut failure = None;
        for (p, id) in poison.iter().zip(&ids) {
            if published.contains(id) {
                self.stats.dlq_duplicates.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match self.dead_letter_one(p, id).await {
                Ok(how) => sent.push(DeadLetter {
                    id,
                    order_no: header_str(&p.message, headers::ORDER_NO)
                        .filter(|o| crate::contracts::OrderNo::parse(o).is_ok()),
                    topic: p.message.topic(),
                    partition: p.message.partition(),
                    offset: p.message.offset(),
                    outcome: match how {
                        DeadLettered::Published => "dlq",
                        DeadLettered::Refused => "dlq_failed",
                    },
                }),
                Err(e) => {
                    self.stats.dlq_failures.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = self.tracer.metrics() {
                        m.dlq_publish_failures.inc();
                    }
                    failure = Some(e);
                    break;
                }
            }
        }
        let ttl = self.dedup.ttl_ms();
        sinks::record_dead_letters(&self.db, &self.group, ttl, &sent).await?;
        failure.map_or(Ok(()), Err)
    }

    fn report_sink(&self, sink: &str, batch: &[&Delivery], writes: &[SinkWrite]) {
        for (d, w) in batch.iter().zip(writes) {
            if *w == SinkWrite::Duplicate {
                self.sink_duplicate(
                    TraceEvent::new(Layer::Stream, Outcome::SinkDuplicate)
                        .order_no(&d.event.order_no)
                        .request_id(&d.event.request_id)
                        .event_id(&d.event.event_id)
                        .detail(format!("{sink}: unique key already holds this event")),
                );
            }
        }
    }

    fn sink_duplicate(&self, event: TraceEvent) {
        self.stats.sink_duplicates.fetch_add(1, Ordering::Relaxed);
        self.tracer.emit(event);
    }

    /// One poison message to the DLQ ([`poison`]): whole; refused for good (its size), a
    /// record of it cut to fit the DLQ — as it is at once for a message kept cut; refused even
    /// so, nothing is published: the caller keeps it in `processed_event` as `dlq_failed`, and
    /// the consumer goes on. Err: the DLQ did not answer (the batch is retried).
    async fn dead_letter_one(&self, p: &Poison, id: &str) -> anyhow::Result<DeadLettered> {
        let dlq_error = |e: KafkaError| {
            anyhow::anyhow!("cannot publish to the DLQ topic {}: {e}", self.dlq_topic)
        };
        if p.cut_from.is_none() {
            match self.send_to_dlq(p, id, None).await {
                Ok(()) => return Ok(DeadLettered::Published),
                Err(e) if poison::refused_for_good(&e) => {
                    self.stats.dlq_failures.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(dlq_error(e)),
            }
        }
        let fit = poison::excerpt_that_fits(&p.message, &p.reason, self.dlq_max_message_bytes);
        match self.send_to_dlq(p, id, Some(fit)).await {
            Ok(()) => Ok(DeadLettered::Published),
            Err(e) if poison::refused_for_good(&e) => {
                self.stats.dlq_failures.fetch_add(1, Ordering::Relaxed);
                self.unpublished(p, &e);
                Ok(DeadLettered::Refused)
            }
            Err(e) => Err(dlq_error(e)),
        }
    }

    /// A poison message the DLQ refused even as a record: said at ERROR with where it is, its
    /// size and why, and traced; `processed_event` keeps it as `dlq_failed`.
    fn unpublished(&self, p: &Poison, refused: &KafkaError) {
        let m = &p.message;
        let size = p.cut_from.unwrap_or_else(|| poison::size_of(m));
        self.stats.dlq_unpublished.fetch_add(1, Ordering::Relaxed);
        tracing::error!(topic = m.topic(), partition = m.partition(), offset = m.offset(), size,
            reason = %p.reason, refused = %refused,
            "poison message NOT in the DLQ: it refused even a record of it; kept in processed_event as dlq_failed, and the consumer goes on");
        self.tracer.emit(poison_event(
            m,
            format!(
                "NOT published to the DLQ ({refused}), kept in processed_event as dlq_failed: {} \
                 ({size} bytes, partition {} offset {})",
                p.reason,
                m.partition(),
                m.offset()
            ),
        ));
    }

    /// Publishes the poison message to the DLQ with the reason and where it came from — whole,
    /// or (`cut`: `Some(n)`) as a record of it: its payload's first `n` bytes, `dlq.size` and
    /// `dlq.cut` ([`poison::cut_headers`]) — and waits for the broker to acknowledge it: only
    /// then may its offset be committed.
    async fn send_to_dlq(&self, p: &Poison, id: &str, cut: Option<usize>) -> KafkaResult<()> {
        let m = &p.message;
        let partition = m.partition().to_string();
        let offset = m.offset().to_string();
        // A redriven message still poison says so: it is back once, and never redriven again.
        let returned = super::redrive::RedriveMark::of(m);
        let reason = p.reason.clone() + &returned.map_or(String::new(), |r| r.still_poison_note());
        let mut headers = OwnedHeaders::new();
        if let Some(orig) = m
            .headers()
            .filter(|_| cut.is_none() || poison::headers_fit_a_record(m))
        {
            for h in orig.iter() {
                headers = headers.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
        headers = headers
            .insert(Header {
                key: "dlq.id",
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: "dlq.reason",
                value: Some(reason.as_bytes()),
            })
            .insert(Header {
                key: "dlq.source.topic",
                value: Some(m.topic().as_bytes()),
            })
            .insert(Header {
                key: "dlq.source.partition",
                value: Some(partition.as_bytes()),
            })
            .insert(Header {
                key: "dlq.source.offset",
                value: Some(offset.as_bytes()),
            });
        let mut payload = m.payload().unwrap_or_default();
        if let Some(n) = cut {
            let size = p.cut_from.unwrap_or_else(|| poison::size_of(m));
            headers = poison::cut_headers(headers, size, n.min(payload.len()));
            payload = &payload[..n.min(payload.len())];
        }
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.dlq_topic)
            .payload(payload)
            .headers(headers);
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        self.dlq
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
        self.stats.dlq.fetch_add(1, Ordering::Relaxed);
        let cut_note = cut.map_or(String::new(), |n| format!("; published cut to {n} bytes"));
        self.tracer.emit(poison_event(
            m,
            format!("{reason} (partition {partition} offset {offset}){cut_note}"),
        ));
        Ok(())
    }

    /// Starts committing `offsets` (the next offset to read per partition) on a blocking thread.
    /// Called only once the batch's database commit is known; the answer is awaited right away
    /// (synchronous commit) or before the next batch writes anything (`async_offset_commit`).
    fn start_commit(&self, offsets: TopicPartitionList, lost_before: u64) -> PendingCommit {
        let consumer = self.consumer.clone();
        PendingCommit {
            answer: tokio::task::spawn_blocking(move || {
                consumer.commit(&offsets, CommitMode::Sync)
            }),
            consumer: self.consumer.clone(),
            lost_before,
        }
    }
}

/// `m` as the batch keeps it ([`poison::kept`]); a message kept cut is noted in `cut` with its
/// whole size.
fn keep(
    m: &rdkafka::message::BorrowedMessage<'_>,
    max: usize,
    cut: &mut HashMap<(i32, i64), usize>,
) -> OwnedMessage {
    let (kept, whole) = poison::kept(m, max);
    if let Some(size) = whole {
        cut.insert((m.partition(), m.offset()), size);
    }
    kept
}

/// A batch stops taking messages once it holds this many bytes (kept messages are at most
/// `consumer.max_message_bytes` each): the batch in memory stays bounded whatever arrives.
const BATCH_BYTES: usize = 16 * 1024 * 1024;

/// The trace event of a poison message, with the IDs its headers name.
fn poison_event(m: &OwnedMessage, detail: String) -> TraceEvent {
    let header = |name: &str| header_str(m, name);
    let mut ev = TraceEvent::new(Layer::Stream, Outcome::Dlq).detail(detail);
    if let Some(v) = header(headers::ORDER_NO) {
        ev = ev.order_no(v);
    }
    if let Some(v) = header(headers::REQUEST_ID) {
        ev = ev.request_id(v);
    }
    if let Some(v) = header(headers::EVENT_ID) {
        ev = ev.event_id(v);
    }
    ev
}

/// For each partition in the batch, the offset after its last message.
fn next_offsets(batch: &[OwnedMessage]) -> BTreeMap<(String, i32), i64> {
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for m in batch {
        let e = next
            .entry((m.topic().to_string(), m.partition()))
            .or_insert(0);
        *e = (*e).max(m.offset() + 1);
    }
    next
}

fn to_tpl(next: &BTreeMap<(String, i32), i64>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .expect("valid offset");
    }
    tpl
}

/// The dedup key of a dead-lettered message: its source position, which a redelivery keeps.
/// The topic is hashed (FNV-1a, stable across builds) to fit `processed_event.event_id`; it
/// cannot collide with a real eventId, which is a UUID.
fn dead_letter_id(m: &OwnedMessage) -> String {
    let topic = m.topic().bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("dlq:{topic:016x}:{}:{}", m.partition(), m.offset())
}

fn header_str(m: &OwnedMessage, name: &str) -> Option<String> {
    let hs = m.headers()?;
    hs.iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_string)
}

/// Why a payload is not a payment event, in words about the payload: serde_json's own text for a
/// syntax error ("key must be a string") reads like a complaint about the Kafka message key.
fn poison_reason(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            format!(
                "payload is not JSON (invalid at line {} column {} of the payload)",
                e.line(),
                e.column()
            )
        }
        Category::Data => format!("payload is JSON but not a payment event: {e}"),
    }
}

/// A payment event, or the reason it is poison.
pub fn parse(m: &OwnedMessage) -> Result<PaymentSucceeded, String> {
    let payload = m.payload().ok_or("empty message")?;
    let event: PaymentSucceeded = serde_json::from_slice(payload).map_err(|e| poison_reason(&e))?;
    if uuid::Uuid::try_parse(&event.event_id).is_err() {
        return Err(format!("event_id `{}` is not a UUID", event.event_id));
    }
    crate::contracts::OrderNo::parse(&event.order_no)?;
    if event.amount < 0 {
        return Err(format!("negative amount {}", event.amount));
    }
    for (name, value) in [
        (headers::EVENT_ID, &event.event_id),
        (headers::ORDER_NO, &event.order_no),
    ] {
        if let Some(h) = header_str(m, name) {
            if &h != value {
                return Err(format!(
                    "header {name} `{h}` disagrees with the body `{value}`"
                ));
            }
        }
    }
    Ok(event)
}

/// The lag, as the batches see it: a full batch (`got` reached `target`) means more messages
/// are waiting, so the next may take up to `max` at once — the whole lag up to that bound, not
/// a ramp that spends the first ~1,500 events of a backlog on small batches; a short one means
/// the consumer keeps up, so the next returns to `idle` and an event waits at most the 20 ms
/// fill window. A bigger target never delays an event: a batch takes only what arrives within
/// that window.
fn next_batch_target(got: usize, target: usize, idle: usize, max: usize) -> usize {
    if got >= target {
        max.max(idle)
    } else {
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::Timestamp;

    fn message(payload: &[u8]) -> OwnedMessage {
        OwnedMessage::new(
            Some(payload.to_vec()),
            Some(b"2026112914054212300000abcdef".to_vec()),
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            None,
        )
    }

    #[test]
    fn the_dlq_reason_of_a_non_json_payload_says_the_payload_is_not_json() {
        let reason = parse(&message(b"{not json at all")).unwrap_err();
        assert_eq!(
            reason,
            "payload is not JSON (invalid at line 1 column 2 of the payload)"
        );
        assert!(
            !reason.contains("key"),
            "an operator would read it as the Kafka key: {reason}"
        );
        let reason = parse(&message(b"{\"event_id\": 1}")).unwrap_err();
        assert!(
            reason.starts_with("payload is JSON but not a payment event: invalid type"),
            "{reason}"
        );
    }

    #[test]
    fn a_full_batch_takes_the_backlog_at_once_and_a_short_one_returns_to_the_idle_size() {
        // Keeping up: short batches stay at the idle size.
        assert_eq!(next_batch_target(37, 100, 100, 1000), 100);
        // Behind: the first full batch lets the next take up to the maximum.
        assert_eq!(next_batch_target(100, 100, 100, 1000), 1000);
        assert_eq!(next_batch_target(1000, 1000, 100, 1000), 1000);
        // Caught up: one short batch and the next is small again.
        assert_eq!(next_batch_target(640, 1000, 100, 1000), 100);
        // A maximum at or below the idle size means fixed batches.
        assert_eq!(next_batch_target(100, 100, 100, 100), 100);
        assert_eq!(next_batch_target(100, 100, 100, 50), 100);
    }
}
