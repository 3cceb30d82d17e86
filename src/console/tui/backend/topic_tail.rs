//! The topic collectors: the trace topic and the payment topic, each read by a thread of its
//! own — the history of the focused trace's windows, then the live tail — sent in batches.

use super::*;
use crate::console::read::catch_up::CatchUp;
use crate::console::read::live::{live_starts, messages_to_read};
use crate::console::read::messages::{not_a_trace_event, trace_event_of};
use crate::stream::lag::consumer_lag;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TopicKind {
    Trace,
    Payments,
}

impl TopicKind {
    fn purpose(self) -> &'static str {
        match self {
            TopicKind::Trace => "trace",
            TopicKind::Payments => "payments",
        }
    }

    /// The configured topic of this kind (empty: none).
    fn topic(self, config: &Config) -> String {
        match self {
            TopicKind::Trace => config.kafka.trace_topic.clone(),
            TopicKind::Payments => config.kafka.payment_topic.clone(),
        }
    }
}

/// Follows one topic from the last hour on (every partition assigned, no group). A reader thread
/// polls the topic and sends what it reads in batches; this task probes the broker every refresh
/// with a client of its own (watermarks; for payments, the consumer group's lag), which is how a
/// dead broker shows up — the client library itself retries silently. The reader and the probe
/// never share a client, so a probe can never disturb the reader's fetches.
pub(super) async fn topic_task(
    config: Config,
    kind: TopicKind,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
    readers: Arc<AtomicUsize>,
) {
    let topic = kind.topic(&config);
    let mut reader: Option<std::thread::JoinHandle<()>> = None;
    let stop_reader = cancel.child_token();
    let mut history = HistoryRead::default();
    let live = Arc::new(LiveProgress::default());
    if kind == TopicKind::Trace && topic.is_empty() {
        // A team's system without idemguard's trace topic: nothing to follow or probe (the
        // header says so, `Stores::new`); the trace target's payment history is still read.
        loop {
            let f = focus.borrow_and_update().clone();
            history.follow(&f, &config, &tx, &cancel);
            if !next_round(&mut focus, f.refresh, &cancel).await {
                return;
            }
        }
    }
    loop {
        let f = focus.borrow_and_update().clone();
        if kind == TopicKind::Trace {
            history.follow(&f, &config, &tx, &cancel);
        }
        let probe = tokio::select! {
            p = probe_topic(&config, &topic, kind) => p,
            _ = cancel.cancelled() => break,
        };
        let u = match probe {
            Ok((mut progress, lag)) => {
                // A reader whose start could not be found has reported why: start another.
                if reader.as_ref().is_some_and(|h| h.is_finished()) {
                    reader = None;
                }
                progress.catch_up = live.snapshot();
                if reader.is_none() {
                    match start_reader(
                        &config,
                        kind,
                        tx.clone(),
                        focus.clone(),
                        stop_reader.clone(),
                        live.clone(),
                        Running::start(&readers),
                    ) {
                        Ok(h) => reader = Some(h),
                        Err(e) => {
                            if tx.send(topic_error(kind, e)).await.is_err() {
                                break;
                            }
                            if !next_round(&mut focus, f.refresh, &cancel).await {
                                break;
                            }
                            continue;
                        }
                    }
                }
                match kind {
                    TopicKind::Trace => Update::TraceTopic(Ok(progress)),
                    TopicKind::Payments => Update::PaymentTopic {
                        progress: Ok(progress),
                        lag,
                    },
                }
            }
            Err(e) => {
                let e = crate::kafka_client::explain_read_failure(&config.kafka, e).await;
                topic_error(kind, e)
            }
        };
        if tx.send(u).await.is_err() || !next_round(&mut focus, f.refresh, &cancel).await {
            break;
        }
    }
    stop_reader.cancel();
    if let Some(h) = reader {
        let _ = tokio::task::spawn_blocking(move || h.join()).await;
    }
}

/// The read of the trace target's history: the windows of both topics around the times of its
/// database rows (an ID the database does not know: the last 24 h), in the partitions of its
/// keys — an order older than the live readers' hour still has its Kafka side. At most one at
/// a time, on a task of its own so the probe keeps its pace; cancelled as soon as nobody wants
/// it (another trace, another view, quitting), so it never holds the console up. One that has
/// answered is kept: coming back to the same trace, or a refresh that reads the same rows, does
/// not read the topics again.
#[derive(Default)]
struct HistoryRead {
    /// The IDs and windows read (or being read) for.
    of: Option<(TraceIds, Vec<TimeWindow>)>,
    running: Option<(CancellationToken, JoinHandle<()>)>,
}

impl HistoryRead {
    fn follow(
        &mut self,
        f: &Focus,
        config: &Config,
        tx: &mpsc::Sender<Update>,
        cancel: &CancellationToken,
    ) {
        let wanted = f.tracing && f.target.is_some() && f.rows.is_some();
        let key = f.rows.as_ref().map(|rows| {
            let (_, windows) = bounded::trace_windows(config, Some(rows), TimeWindow::last_day(0));
            (f.ids.clone(), windows)
        });
        let in_flight = self.running.as_ref().is_some_and(|(_, h)| !h.is_finished());
        if self.of != key || (!wanted && in_flight) {
            if let Some((stop, _)) = self.running.take() {
                stop.cancel();
            }
            self.of = None;
        }
        let (Some(target), Some(rows)) = (f.target.clone(), f.rows.clone()) else {
            return;
        };
        if !wanted || self.of.is_some() {
            return;
        }
        self.of = key;
        let stop = cancel.child_token();
        let (config, tx, ids) = (config.clone(), tx.clone(), f.ids.clone());
        let cancelled = stop.clone();
        let task = tokio::spawn(async move {
            let progress = bounded::Scanned::default();
            let window = TimeWindow::last_day(crate::contracts::now_ms());
            let read = bounded::read_topics_counting(
                &config,
                &target,
                Some(&rows),
                window,
                &cancelled,
                &progress,
            );
            tokio::pin!(read);
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let (payments, events, cost) = loop {
                tokio::select! {
                    done = &mut read => break done,
                    _ = tick.tick() => {
                        let scanned = progress.load(std::sync::atomic::Ordering::Relaxed);
                        let reading = Update::TraceRead { ids: ids.clone(), cost: None, scanned };
                        if tx.send(reading).await.is_err() {
                            return;
                        }
                    }
                }
            };
            if cancelled.is_cancelled() {
                return;
            }
            send_history(&tx, ids, payments, events, cost).await;
        });
        self.running = Some((stop, task));
    }
}

/// The answers of a read of the trace target's history; the app keeps them only while the IDs
/// are still the ones it traces.
async fn send_history(
    tx: &mpsc::Sender<Update>,
    ids: TraceIds,
    payments: anyhow::Result<crate::console::read::store::PaymentIndex>,
    events: anyhow::Result<crate::console::read::store::TraceLog>,
    cost: ReadCost,
) {
    let result = events
        .map(|log| log.oldest_first())
        .map_err(|e| format!("{e:#}"));
    let history = Update::TraceHistory {
        ids: ids.clone(),
        result,
    };
    let result = payments
        .map(|index| index.messages())
        .map_err(|e| format!("{e:#}"));
    let read = Update::TraceRead {
        ids: ids.clone(),
        scanned: cost.messages_scanned(),
        cost: Some(cost),
    };
    for u in [history, Update::PaymentHistory { ids, result }, read] {
        if tx.send(u).await.is_err() {
            return;
        }
    }
}

fn topic_error(kind: TopicKind, e: String) -> Update {
    match kind {
        TopicKind::Trace => Update::TraceTopic(Err(e)),
        TopicKind::Payments => Update::PaymentTopic {
            progress: Err(e.clone()),
            lag: Err(e),
        },
    }
}

/// A thread that reads the topic from the last hour ([`LIVE_WINDOW_MS`]) on, then follows its
/// tail, and sends batches: full ones at once, others 100 ms after their first message — live
/// enough for the trace view, few enough updates for the UI. It waits (never drops) when the UI
/// is behind, and stops reading while paused. Reading from the beginning instead took minutes
/// on a topic of millions of events, and the Rates view said 0 meanwhile.
fn start_reader(
    config: &Config,
    kind: TopicKind,
    tx: mpsc::Sender<Update>,
    focus: watch::Receiver<Focus>,
    stop: CancellationToken,
    live: Arc<LiveProgress>,
    running: Running,
) -> Result<std::thread::JoinHandle<()>, String> {
    let servers = config.kafka.bootstrap_servers.clone();
    let consumer = topics::create_reader(&topics::reader_config(config, kind.purpose()))
        .map_err(|e| format!("cannot create a Kafka reader for {servers}: {e}"))?;
    let (config, topic) = (config.clone(), kind.topic(config));
    let failure = format!("cannot start the {topic} reader thread");
    std::thread::Builder::new()
        .name(format!("console-{}", kind.purpose()))
        .spawn(move || {
            let _running = running;
            let since = now_ms() - LIVE_WINDOW_MS;
            let (starts, catch_up) = match live_starts(&config, &topic, since).and_then(|s| {
                CatchUp::assign_live(&consumer, &topic, &s).map(|catch_up| (s, catch_up))
            }) {
                Ok(started) => started,
                Err(e) => {
                    let _ = tx.blocking_send(topic_error(kind, format!("{e:#}")));
                    return;
                }
            };
            live.to_read
                .store(messages_to_read(&starts), Ordering::Relaxed);
            live.started.store(true, Ordering::Release);
            let r = Reader {
                consumer,
                kind,
                servers: &servers,
                topic: &topic,
                live: &live,
                ids: &config.kafka_ids.payment,
            };
            r.read_batches(catch_up, &tx, &focus, &stop)
        })
        .map_err(|e| format!("{failure}: {e}"))
}

/// A reader thread, counted in [`Backends`]' readers from before it starts until it ends.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(readers: &Arc<AtomicUsize>) -> Running {
        readers.fetch_add(1, Ordering::AcqRel);
        Running(readers.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The reader thread's state (see [`start_reader`]).
struct Reader<'a> {
    consumer: topics::Reader,
    kind: TopicKind,
    servers: &'a str,
    topic: &'a str,
    live: &'a LiveProgress,
    /// Where a payment message carries its IDs (`kafka_ids.payment`).
    ids: &'a crate::config::TopicIds,
}

impl Reader<'_> {
    /// The reader thread's loop; ends on `stop` or when the UI is gone. The catch-up is done
    /// when every partition reached the end it had at the start and a poll came back empty
    /// ([`CatchUp`], as in [`read_to_end`](crate::console::read::catch_up::read_to_end)).
    fn read_batches(
        &self,
        mut catch_up: CatchUp,
        tx: &mpsc::Sender<Update>,
        focus: &watch::Receiver<Focus>,
        stop: &CancellationToken,
    ) {
        let flush_after = Duration::from_millis(100);
        let mut pending = Pending::default();
        while !stop.is_cancelled() {
            let mut caught_up = false;
            if focus.borrow().paused {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => {
                    self.live.scanned.fetch_add(1, Ordering::Relaxed);
                    catch_up.read(&m);
                    pending.add(self.kind, &m, self.ids);
                }
                Some(Err(e)) => {
                    let e = format!("kafka {}: reading {}: {e}", self.servers, self.topic);
                    if tx.blocking_send(topic_error(self.kind, e)).is_err() {
                        return;
                    }
                }
                None => caught_up = catch_up.idle(&self.consumer),
            }
            // Caught up: what is in hand goes now, and only then is the catch-up said done — the
            // Rates view counts from what was sent, and must not say "done" short of it.
            if pending.due(caught_up, flush_after) && !pending.send(self.topic, tx) {
                return;
            }
            if caught_up {
                self.live.done.store(true, Ordering::Release);
            }
        }
    }
}

/// What the reader thread has read and not sent yet: one batch.
#[derive(Default)]
struct Pending {
    events: Vec<TraceEvent>,
    /// Trace-topic messages that were not trace events: how many, and why the first was not.
    undecodable: (u64, Option<String>),
    payments: Vec<PaymentMessage>,
    /// When the batch's first message was read.
    first: Option<std::time::Instant>,
}

impl Pending {
    fn add(
        &mut self,
        kind: TopicKind,
        m: &rdkafka::message::BorrowedMessage<'_>,
        ids: &crate::config::TopicIds,
    ) {
        match kind {
            TopicKind::Trace => match trace_event_of(m) {
                Some(e) => self.events.push(e),
                None => {
                    self.undecodable.0 += 1;
                    self.undecodable
                        .1
                        .get_or_insert_with(|| not_a_trace_event(m));
                }
            },
            TopicKind::Payments => self.payments.push(PaymentMessage::from_kafka(m, ids)),
        }
        self.first.get_or_insert_with(std::time::Instant::now);
    }

    /// Full, caught up, or its first message waited `flush_after`.
    fn due(&self, caught_up: bool, flush_after: Duration) -> bool {
        self.events.len() >= BATCH
            || self.payments.len() >= BATCH
            || self
                .first
                .is_some_and(|t| caught_up || t.elapsed() >= flush_after)
    }

    /// Sends the batch (trace events, the undecodable count, payment messages); false when the
    /// UI is gone.
    fn send(&mut self, topic: &str, tx: &mpsc::Sender<Update>) -> bool {
        self.first = None;
        if !self.events.is_empty()
            && tx
                .blocking_send(Update::TraceEvents(std::mem::take(&mut self.events)))
                .is_err()
        {
            return false;
        }
        if let (count @ 1.., Some(first)) = std::mem::take(&mut self.undecodable) {
            let topic = topic.to_string();
            let update = Update::UndecodableTraceMessages {
                topic,
                count,
                first,
            };
            if tx.blocking_send(update).is_err() {
                return false;
            }
        }
        if !self.payments.is_empty()
            && tx
                .blocking_send(Update::PaymentMessages(std::mem::take(&mut self.payments)))
                .is_err()
        {
            return false;
        }
        true
    }
}

type Probe = (TopicProgress, Result<Vec<PartitionLag>, String>);

/// The topic's partitions and watermarks (the broker's health); for payments also the consumer
/// group's lag. A client of its own each time: probing is rare and must not share state with the
/// reader.
async fn probe_topic(config: &Config, topic: &str, kind: TopicKind) -> Result<Probe, String> {
    let config = config.clone();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let servers = config.kafka.bootstrap_servers.clone();
        let prober = topics::reader(&config, "probe").map_err(|e| format!("{e:#}"))?;
        let marks = topics::watermarks(&prober, &servers, &topic).map_err(|e| format!("{e:#}"))?;
        let progress = TopicProgress {
            topic: topic.clone(),
            partitions: marks.len(),
            end_offsets: marks.iter().map(|(_, _, h)| h).sum(),
            catch_up: None,
        };
        let lag = match kind {
            TopicKind::Payments => consumer_lag(
                &config.kafka,
                &config.kafka.consumer_group,
                &topic,
                topics::KAFKA_TIMEOUT,
            )
            .map_err(|e| e.to_string()),
            TopicKind::Trace => Ok(Vec::new()),
        };
        Ok((progress, lag))
    })
    .await
    .map_err(|e| format!("kafka probe failed: {e}"))?
}
