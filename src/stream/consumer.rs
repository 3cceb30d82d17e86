//! `idemguard consume`: a consumer-group member on `payment.succeeded` that makes at-least-once
//! delivery effectively once (seed §4, §6.3).
//!
//! The loop, per batch of `consumer.batch_size` messages when it keeps up, up to
//! `consumer.batch_size_max` when it is behind (a full batch lets the next take up to that):
//! 1. parse; a poison message (not JSON, missing fields, IDs that disagree with the headers,
//!    unknown order, larger than `consumer.max_message_bytes`) goes to the DLQ with its reason
//!    and original partition/offset, once per group and source position (`consumer/dead_letter.rs`): no
//!    message holds up the batch;
//! 2. drop events the dedup state has seen within the TTL — memory first, then
//!    `processed_event` — before any sink work (`dedup_hit`);
//! 3. run each sink in its own transaction (order → PAID; then points and notification,
//!    concurrently when `consumer.concurrent_sinks`; then `processed_event`); a sink's unique key
//!    saying "already there" is `sink_duplicate`;
//! 4. only then commit the offsets (`stream/commit.rs`), awaited at once or, with
//!    `consumer.async_offset_commit`, before the next batch writes anything. A refused commit
//!    ends `consume` either way, before another batch is applied — unless the broker was away
//!    and the process ran all along: then nothing was committed, the batch comes again and
//!    changes nothing, and `consume` goes on.
//!
//! A crash anywhere before step 4 redelivers the batch, and every step is idempotent, so the
//! redelivery changes nothing. A transient database error retries the whole batch with backoff
//! (never the DLQ): the partition waits rather than losing or doubling anything.

mod dead_letter;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use tokio_util::sync::CancellationToken;

use super::commit::{next_offsets, to_tpl, CommitRefused, MemberLog, PendingCommit};
use super::dedup::DedupState;
use super::poison::{self, parse};
use super::sinks::{self, Delivery, PaidDecision, SinkWrite};
use crate::config::Config;
use crate::contracts::{now_ms, Layer, Outcome, PaymentSucceeded, TraceEvent};
use crate::db::orders::Orders;
use crate::db::Database;
use crate::trace::Tracer;
use dead_letter::Poison;

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

pub struct PaymentConsumer {
    db: Database,
    orders: Orders,
    tracer: Tracer,
    consumer: Arc<StreamConsumer<MemberLog>>,
    dlq: FutureProducer,
    dlq_topic: String,
    group: String,
    /// Who this consumer is, in the `dlq.by.*` headers of what it dead-letters: the tracer's
    /// instance id (as in its trace events and lock values), this host and pid.
    instance: crate::contracts::Instance,
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
        let consumer: StreamConsumer<MemberLog> = crate::kafka_client::client_config(&config.kafka)
            .set("group.id", &group)
            .set(
                "client.id",
                format!("idemguard-consume-{}", tracer.instance_id()),
            )
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set(
                "session.timeout.ms",
                SESSION_TIMEOUT.as_millis().to_string(),
            )
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
            .create_with_context(MemberLog::new(SESSION_TIMEOUT))
            .map_err(|e| anyhow::anyhow!("kafka {servers}: cannot create the consumer: {e}"))?;
        consumer
            .subscribe(&[&config.kafka.payment_topic])
            .map_err(|e| {
                anyhow::anyhow!(
                    "kafka {servers}: cannot subscribe to {}: {e}",
                    config.kafka.payment_topic
                )
            })?;
        let dlq = dead_letter::dlq_producer(config, tracer.instance_id())?;
        let instance = crate::contracts::Instance {
            id: tracer.instance_id().to_string(),
            ..crate::contracts::Instance::current()
        };
        Ok(PaymentConsumer {
            orders: Orders::new(db.clone(), tracer.clone()),
            db,
            tracer,
            consumer: Arc::new(consumer),
            dlq,
            dlq_topic: config.kafka.dlq_topic.clone(),
            instance,
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
            let received = self.consumer.context().seen();
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
            let commit = PendingCommit::start(&self.consumer, to_tpl(&next), received);
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
    /// refusal that ends `consume` ends it at once, also when no message comes. `None` once shut down (a
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

/// The group session (`session.timeout.ms`): a member no broker hears from for this long is out
/// of its group. Its freezes are judged by it too (`stream/commit.rs`).
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A batch stops taking messages once it holds this many bytes (kept messages are at most
/// `consumer.max_message_bytes` each): the batch in memory stays bounded whatever arrives.
const BATCH_BYTES: usize = 16 * 1024 * 1024;

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
