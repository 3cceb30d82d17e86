//! The console's read-through to Kafka: the payment messages of an order (partition, offset,
//! timestamp, how many copies) from `payment.succeeded`, the trace events of every layer from
//! `idemguard.trace`, and the consumer group's lag per partition.
//!
//! The console never joins a consumer group and never commits: it assigns partitions itself, so
//! reading can never steal partitions from (or move the offsets of) the real consumer.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, TopicIds};
use crate::console::read::seek::Seek;
use crate::console::read::time_index::{self, TimeIndex};
use crate::contracts::{PaymentSucceeded, TraceEvent};

/// How long one metadata / watermark / offset request may take before the broker counts as down.
pub const KAFKA_TIMEOUT: Duration = Duration::from_secs(3);

/// One message of the payment topic, as the trace view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaymentMessage {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Broker or producer timestamp, epoch ms.
    pub timestamp_ms: Option<i64>,
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    pub event_id: Option<String>,
    pub pay_no: Option<String>,
    /// False when the payload is not a `PaymentSucceeded` (a poison message the consumer sends to
    /// the DLQ).
    pub payload_ok: bool,
}

impl PaymentMessage {
    /// The IDs where `ids` (`kafka_ids.payment`) says they are: a header, a JSON pointer into
    /// the body, or the key, the first place that names one winning. A team's events carry them
    /// in the body only; idemguard's own in headers, body and key.
    pub fn from_kafka(m: &BorrowedMessage<'_>, ids: &TopicIds) -> PaymentMessage {
        let body: Option<serde_json::Value> =
            m.payload().and_then(|p| serde_json::from_slice(p).ok());
        let own = m
            .payload()
            .and_then(|p| serde_json::from_slice::<PaymentSucceeded>(p).ok());
        let at = |places: &[String]| id_at(m, body.as_ref(), places);
        let order_no = at(&ids.order_no);
        PaymentMessage {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            request_id: at(&ids.request_id),
            event_id: at(&ids.event_id),
            pay_no: own.as_ref().map(|p| p.pay_no.clone()).or_else(|| {
                let b = body.as_ref()?;
                text_of(b.pointer("/payNo").or_else(|| b.pointer("/pay_no"))?)
            }),
            // A poison message (the consumer's DLQ case): neither idemguard's payload nor a JSON
            // body that names its order where the configuration says.
            payload_ok: own.is_some() || (body.is_some() && order_no.is_some()),
            order_no,
        }
    }
}

/// The first of `places` (`header:NAME`, `json:/POINTER`, `key`) that names a non-empty value.
pub fn id_at(
    m: &impl Message,
    body: Option<&serde_json::Value>,
    places: &[String],
) -> Option<String> {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    places.iter().find_map(|place| {
        let found = if let Some(name) = place.strip_prefix("header:") {
            m.headers()
                .and_then(|h| h.iter().find(|x| x.key == name))
                .and_then(|x| x.value.map(lossy))
        } else if let Some(pointer) = place.strip_prefix("json:") {
            body.and_then(|b| b.pointer(pointer)).and_then(text_of)
        } else if place == "key" {
            m.key().map(lossy)
        } else {
            None
        };
        found.filter(|v| !v.is_empty())
    })
}

/// A JSON string or number as text.
fn text_of(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Decode a trace topic message; `None` for a payload that is not a trace event.
pub fn trace_event_of(m: &BorrowedMessage<'_>) -> Option<TraceEvent> {
    serde_json::from_slice(m.payload()?).ok()
}

/// Why a trace topic message is not a trace event: where it is, what it begins with (escaped,
/// cut), what the decoder said.
pub fn not_a_trace_event(m: &BorrowedMessage<'_>) -> String {
    let at = format!("p{}@{}", m.partition(), m.offset());
    let Some(p) = m.payload() else {
        return format!("{at}: no payload");
    };
    let why = match serde_json::from_slice::<TraceEvent>(p) {
        Err(e) => e.to_string(),
        Ok(_) => "decoded".into(),
    };
    format!(
        "{at} `{}`: {}",
        crate::untrusted::escape_cut(&excerpt(p, 60), 61),
        crate::untrusted::escape(&why)
    )
}

/// The first `n` characters of a payload, lossy.
pub fn excerpt(payload: &[u8], n: usize) -> String {
    let head = &payload[..payload.len().min(n * 4)];
    String::from_utf8_lossy(head).chars().take(n).collect()
}

/// The settings of a reader that reads by assignment only (no group membership, no commits).
pub fn reader_config(config: &Config, purpose: &str) -> ClientConfig {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let mut c = crate::kafka_client::client_config(&config.kafka);
    c
        // A group id is required by the client library; it is never joined or committed to.
        // Unique per reader, like the client id: readers of one process must never share
        // broker-side state (fetch sessions, coordinators) with each other.
        .set("group.id", format!("idemguard-console-{purpose}-{tag}"))
        .set("client.id", format!("idemguard-console-{purpose}-{tag}"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        // Should a start offset ever be refused, start over from the beginning rather than skip
        // to the end: the console must not miss the messages it exists to show.
        .set("auto.offset.reset", "earliest")
        // Bounded prefetch: the client library would otherwise queue up to 100,000 messages
        // (or 64 MB) per partition ahead of the reader; the console's own stores are the place
        // for what it keeps, and memory the library took while catching up is not given back.
        .set("queued.min.messages", "2000")
        .set("queued.max.messages.kbytes", "2048")
        .set("fetch.max.bytes", "2097152")
        .set("log_level", "0");
    c
}

/// The client context of the console's readers. A reader that asks to learn where a partition
/// ends (`enable.partition.eof`) gets [`KafkaError::PartitionEOF`] from `poll` and uses it; the
/// client library reports the same event to the context's error callback too, whose default
/// logs it as an ERROR — a line on stderr on every `trace`. The other errors (brokers down, a
/// refused handshake) come back from the read that met them, which says them once, with the
/// refusal explained ([`crate::kafka_client::explain_read_failure`]); repeated here as ERRORs
/// they were a screen of `AllBrokersDown` before the answer, so they go to the debug log.
pub struct ReaderContext;

impl rdkafka::ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for ReaderContext {}

/// A reader of the console (see [`reader_config`]).
pub type Reader = BaseConsumer<ReaderContext>;

/// A [`Reader`] of `c`.
pub fn create_reader(c: &ClientConfig) -> rdkafka::error::KafkaResult<Reader> {
    c.create_with_context(ReaderContext)
}

/// A blocking reader (see [`reader_config`]).
pub fn reader(config: &Config, purpose: &str) -> anyhow::Result<Reader> {
    create_reader(&reader_config(config, purpose)).map_err(|e| {
        anyhow::anyhow!(
            "cannot create a Kafka reader for {}: {e}",
            config.kafka.bootstrap_servers
        )
    })
}

/// The partitions of `topic` with their (low, high) watermarks.
pub fn watermarks<C: ConsumerContext>(
    consumer: &impl Consumer<C>,
    servers: &str,
    topic: &str,
) -> anyhow::Result<Vec<(i32, i64, i64)>> {
    let md = consumer
        .fetch_metadata(Some(topic), KAFKA_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: metadata of {topic}: {e} (is the broker running? `scripts/stack status`)"))?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| anyhow::anyhow!("kafka {servers}: topic {topic} not found"))?;
    if let Some(e) = t.error() {
        anyhow::bail!(
            "kafka {servers}: topic {topic}: {e:?} (`scripts/stack up` creates the topics)"
        );
    }
    let mut out = Vec::new();
    for p in t.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p.id(), KAFKA_TIMEOUT)
            .map_err(|e| {
                anyhow::anyhow!("kafka {servers}: watermarks of {topic}/{}: {e}", p.id())
            })?;
        out.push((p.id(), low, high));
    }
    out.sort();
    Ok(out)
}

/// Where a bounded read starts.
#[derive(Debug, Clone, Copy)]
pub enum StartAt {
    Beginning,
    /// The first message at or after this epoch-ms time (falls back to the beginning when the
    /// broker cannot look offsets up by time).
    Since(i64),
}

/// Where each partition of a read starts: its beginning, or for [`StartAt::Since`] the first
/// offset at or after the time (`Offset::End` when there is none; the beginning when the broker
/// cannot look offsets up by time).
fn start_offsets(
    consumer: &Reader,
    topic: &str,
    marks: &[(i32, i64, i64)],
    start: StartAt,
) -> anyhow::Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for (p, _, _) in marks {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)?;
    }
    if let StartAt::Since(ms) = start {
        let mut by_time = TopicPartitionList::new();
        for (p, _, _) in marks {
            by_time.add_partition_offset(topic, *p, Offset::Offset(ms))?;
        }
        if let Ok(found) = consumer.offsets_for_times(by_time, KAFKA_TIMEOUT) {
            for e in found.elements() {
                let off = match e.offset() {
                    Offset::Offset(o) => Offset::Offset(o),
                    Offset::End => Offset::End,
                    _ => continue,
                };
                tpl.set_partition_offset(topic, e.partition(), off)?;
            }
        }
    }
    Ok(tpl)
}

/// Reads `topic` from `start` up to the high watermarks seen when the read began (blocking: run
/// it on a blocking thread). `each` gets every message. Bounded by `deadline`, and ends within
/// one poll (≤ 300 ms) of `cancel`: a read of a large topic takes seconds, and the console must
/// not wait for one nobody wants any more (quit, a new trace).
pub fn read_to_end(
    config: &Config,
    topic: &str,
    start: StartAt,
    deadline: Duration,
    cancel: &CancellationToken,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<u64> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer = reader(config, "read")?;
    let marks = watermarks(&consumer, servers, topic)?;
    let tpl = start_offsets(&consumer, topic, &marks, start)?;
    consumer
        .assign(&tpl)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: assign {topic}: {e}"))?;
    let mut remaining: std::collections::BTreeMap<i32, i64> = marks
        .iter()
        .filter(|(_, low, high)| high > low)
        .map(|(p, _, high)| (*p, *high))
        .collect();
    // Partitions whose start (by time) is already at the end have nothing to read.
    if let StartAt::Since(_) = start {
        for e in tpl.elements() {
            if e.offset() == Offset::End {
                remaining.remove(&e.partition());
            }
        }
    }
    let started = Instant::now();
    let mut read = 0u64;
    // Done when every partition reached the mark seen at the start AND one poll came back empty:
    // some brokers (tansu) report a high watermark that counts record batches, not records, so
    // the mark alone can stop a read early; the idle poll says the reader has really caught up.
    let mut idle = false;
    while !(remaining.is_empty() && idle) {
        if cancel.is_cancelled() {
            anyhow::bail!("reading {topic} was cancelled ({read} messages read)");
        }
        if started.elapsed() > deadline {
            anyhow::bail!("kafka {servers}: reading {topic} took longer than {deadline:?} ({read} messages read)");
        }
        match consumer.poll(Duration::from_millis(if remaining.is_empty() {
            300
        } else {
            200
        })) {
            Some(Ok(m)) => {
                idle = false;
                read += 1;
                each(&m);
                if let Some(high) = remaining.get(&m.partition()) {
                    if m.offset() + 1 >= *high {
                        remaining.remove(&m.partition());
                    }
                }
            }
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            None => {
                idle = true;
                // Nothing for a while: a partition whose position already passed its mark is done.
                if let Ok(pos) = consumer.position() {
                    for e in pos.elements() {
                        if let Offset::Offset(o) = e.offset() {
                            if remaining.get(&e.partition()).is_some_and(|h| o >= *h) {
                                remaining.remove(&e.partition());
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(read)
}

/// How far the consumer group is behind on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    /// The group's committed offset; `None` when it has committed nothing there yet.
    pub committed: Option<i64>,
    /// `high_watermark - committed` (everything from the low watermark when nothing is committed).
    pub lag: i64,
}

/// The lag of `group` on `topic`, per partition. Reads the committed offsets without joining the
/// group (an OffsetFetch), so the real consumer is never disturbed.
pub fn consumer_lag(
    config: &Config,
    topic: &str,
    group: &str,
) -> anyhow::Result<Vec<PartitionLag>> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer: Reader = create_reader(
        crate::kafka_client::client_config(&config.kafka)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("log_level", "0"),
    )
    .map_err(|e| anyhow::anyhow!("cannot create a Kafka client for {servers}: {e}"))?;
    let marks = watermarks(&consumer, servers, topic)?;
    let mut tpl = TopicPartitionList::new();
    for (p, _, _) in &marks {
        tpl.add_partition(topic, *p);
    }
    let committed = consumer
        .committed_offsets(tpl, KAFKA_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: committed offsets of group {group}: {e}"))?;
    Ok(marks
        .iter()
        .map(|(p, low, high)| {
            let c = committed
                .find_partition(topic, *p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
            PartitionLag {
                topic: topic.to_string(),
                partition: *p,
                high_watermark: *high,
                committed: c,
                lag: (*high - c.unwrap_or(*low)).max(0),
            }
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// Windows: a trace reads what its times name, not the topic (see `window.rs`)
// ---------------------------------------------------------------------------------------------

/// How long one probe (the message at one offset) may take before the read fails.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a probe answered: the first message at or after its offset (offset, timestamp), or
/// none there.
type Probed = Option<(i64, i64)>;

/// Finds offsets by time in the partitions of one topic. The broker's `offsets_for_times` is
/// asked first and its answer checked against the messages on both sides of it; an answer that
/// does not hold (tansu 0.6.0 answers offset 0 whatever the time) makes the lookup search the
/// offsets instead ([`Seek`]: interpolation over the timestamps, bisection where they are
/// uneven), reading one message's timestamp per probe, on any broker. The partitions are probed
/// together: one fetch request carries one probe of each, so a round costs one round trip
/// whatever the number of partitions read.
struct OffsetLookup<'a> {
    consumer: &'a Reader,
    /// Held for a round: the reader may be shared with the lookups of other topics.
    turn: &'a Mutex<()>,
    topic: &'a str,
    /// `Some(false)` once the broker's answer failed a check: it is not asked again.
    broker_truthful: Option<bool>,
    probes: u64,
    /// Per partition, what every probe answered: a later search starts from what is known.
    seen: BTreeMap<i32, Vec<(i64, Probed)>>,
    cancel: CancellationToken,
    /// What earlier reads of the process learned (anchors for the searches, see
    /// [`time_index`](super::time_index)), and the brokers it is keyed by.
    index: &'static TimeIndex,
    servers: &'a str,
}

impl<'a> OffsetLookup<'a> {
    fn new(
        (consumer, turn): (&'a Reader, &'a Mutex<()>),
        servers: &'a str,
        topic: &'a str,
        cancel: &CancellationToken,
    ) -> Self {
        OffsetLookup {
            consumer,
            turn,
            topic,
            broker_truthful: None,
            probes: 0,
            seen: BTreeMap::new(),
            cancel: cancel.clone(),
            index: time_index::shared(),
            servers,
        }
    }

    fn key(&self, partition: i32) -> time_index::PartitionKey {
        (self.servers.to_string(), self.topic.to_string(), partition)
    }

    /// Messages a scan read (partition, offset, timestamp): as good as probes at their offsets.
    fn saw(&mut self, messages: Vec<(i32, i64, i64)>) {
        for (p, o, ts) in messages {
            self.seen.entry(p).or_default().push((o, Some((o, ts))));
        }
    }

    /// Hands what the probes read to the process's index, each partition with its `end`
    /// (partition, low, end).
    fn remember(&self, ends: &[(i32, i64, i64)]) {
        for &(p, _, end) in ends {
            let seen: Vec<(i64, i64)> = self
                .seen
                .get(&p)
                .into_iter()
                .flatten()
                .filter_map(|(_, got)| *got)
                .collect();
            self.index.learn(&self.key(p), end, &seen);
        }
    }

    /// One probe per partition, fetched together: for each (partition, offset), the offset and
    /// timestamp of the first message at or after the offset; `None` when there is none: the
    /// reader reports the partition's end, or the offset is out of range (the reader starts over
    /// below it). An offset below the partition's end always has a message, so a probe that gets
    /// nothing within [`PROBE_TIMEOUT`] is an error, never a guess.
    fn probe_round(&mut self, probes: &[(i32, i64)]) -> anyhow::Result<Vec<Probed>> {
        let mut tpl = TopicPartitionList::new();
        for &(p, at) in probes {
            tpl.add_partition_offset(self.topic, p, Offset::Offset(at))?;
        }
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        self.consumer.assign(&tpl)?;
        self.probes += probes.len() as u64;
        let mut out: Vec<Option<Probed>> = vec![None; probes.len()];
        let started = Instant::now();
        while out.iter().any(Option::is_none) {
            if started.elapsed() > PROBE_TIMEOUT {
                anyhow::bail!(
                    "kafka: no message at {}/{probes:?} within {PROBE_TIMEOUT:?}, below the \
                     partitions' ends",
                    self.topic
                )
            }
            let (p, got) = match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) if m.topic() != self.topic => continue,
                Some(Ok(m)) => {
                    let at = probes
                        .iter()
                        .find(|(p, _)| *p == m.partition())
                        .map(|x| x.1);
                    let ts = m.timestamp().to_millis().unwrap_or(0);
                    let got = at.and_then(|at| (m.offset() >= at).then_some((m.offset(), ts)));
                    (m.partition(), got)
                }
                Some(Err(KafkaError::PartitionEOF(p))) => (p, None),
                Some(Err(e)) => anyhow::bail!("reading {}/{probes:?}: {e}", self.topic),
                None => continue,
            };
            if let Some(i) = probes.iter().position(|(q, _)| *q == p) {
                if out[i].is_none() {
                    out[i] = Some(got);
                    self.seen.entry(p).or_default().push((probes[i].1, got));
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The offset after the last message of each partition of `marks` (partition, low, listed
    /// high) → (partition, low, end). The watermark a ListOffsets request answers is not
    /// enough: tansu 0.6.0's lags the last records (measured: 1 for 1,012 records, 4,388 for
    /// 4,638). The one a fetch response carries is exact on every broker measured, so each
    /// partition's first message is fetched (one round) and the client's cached watermark read.
    fn ends(&mut self, marks: &[(i32, i64, i64)]) -> anyhow::Result<Vec<(i32, i64, i64)>> {
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let probes: Vec<(i32, i64)> = marks.iter().map(|&(p, low, _)| (p, low)).collect();
        self.probe_round(&probes)?;
        Ok(marks
            .iter()
            .map(|&(p, low, listed)| {
                let fetched = fetched_high_watermark(self.consumer, self.topic, p);
                (p, low, fetched.map_or(listed, |h| h.max(listed)))
            })
            .collect())
    }

    /// For each (partition, low, high, ms), one partition each: `(lo, hi)` with the first
    /// offset in `[low, high]` whose message's timestamp is at or after `ms` (`high` when there
    /// is none) in `[lo, hi]`. With `window_ms` 0 the offset itself (`lo == hi`); else a bound of
    /// a window of that length that may be read a little past ([`Seek::scanning`]).
    fn first_at_or_after(
        &mut self,
        asks: &[(i32, i64, i64, i64)],
        window_ms: i64,
    ) -> anyhow::Result<Vec<(i64, i64)>> {
        if self.broker_truthful != Some(false) {
            let mut out = Vec::with_capacity(asks.len());
            for &(p, low, high, ms) in asks {
                match self.broker_answer(p, low, high, ms)? {
                    Some(o) => out.push((o, o)),
                    None => break,
                }
            }
            if out.len() == asks.len() {
                self.broker_truthful = Some(true);
                return Ok(out);
            }
            self.broker_truthful = Some(false);
        }
        let mut seeks: Vec<(i32, Seek)> = asks
            .iter()
            .map(|&(p, low, high, ms)| {
                let known = self.seen.get(&p).map_or(&[][..], Vec::as_slice);
                let anchors = self.index.points(&self.key(p), low, high);
                let seek = Seek::new(low, high, ms)
                    .scanning(window_ms)
                    .anchored(anchors);
                let seek = known.iter().fold(seek, |s, &(at, got)| s.knowing(at, got));
                (p, seek)
            })
            .collect();
        loop {
            if self.cancel.is_cancelled() {
                anyhow::bail!("reading {} was cancelled (finding its windows)", self.topic);
            }
            let round: Vec<(usize, i32, i64)> = seeks
                .iter_mut()
                .enumerate()
                .filter_map(|(i, (p, s))| s.next_probe().map(|at| (i, *p, at)))
                .collect();
            if round.is_empty() {
                break;
            }
            let probes: Vec<(i32, i64)> = round.iter().map(|&(_, p, at)| (p, at)).collect();
            let answers = self.probe_round(&probes)?;
            for (&(i, _, at), got) in round.iter().zip(answers) {
                seeks[i].1.answer(at, got);
            }
        }
        Ok(seeks.iter().filter_map(|(_, s)| s.bracket()).collect())
    }

    /// The broker's `offsets_for_times` answer when it checks out against the messages around
    /// it; `None` when it does not (or the broker cannot answer).
    fn broker_answer(
        &mut self,
        partition: i32,
        low: i64,
        high: i64,
        ms: i64,
    ) -> anyhow::Result<Option<i64>> {
        let mut q = TopicPartitionList::new();
        q.add_partition_offset(self.topic, partition, Offset::Offset(ms))?;
        let Ok(found) = self.consumer.offsets_for_times(q, KAFKA_TIMEOUT) else {
            return Ok(None);
        };
        let answer = match found.elements().first().map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o.clamp(low, high),
            Some(Offset::End) => high,
            _ => return Ok(None),
        };
        // The message answered must be at or after `ms`, the one before it before `ms`.
        if answer < high {
            match self.probe_round(&[(partition, answer)])?[0] {
                Some((_, ts)) if ts >= ms => {}
                _ => return Ok(None),
            }
        }
        if answer > low {
            match self.probe_round(&[(partition, answer - 1)])?[0] {
                Some((o, ts)) if o < answer && ts >= ms => return Ok(None),
                Some(_) => {}
                None => return Ok(None),
            }
        }
        Ok(Some(answer))
    }
}

/// The high watermark of `partition` that the last fetch response carried (librdkafka caches
/// it; the Rust client does not expose it); `None` before any fetch of it.
fn fetched_high_watermark(consumer: &Reader, topic: &str, partition: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; `topic` is a NUL-terminated
    // string that outlives the call; `low`/`high` are valid out-pointers. The call only reads
    // the client's cached partition state.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}

/// Reads `plan`'s windows of its topic, in the partitions of its keys (blocking: run it on a
/// blocking thread): `each` gets every message of every window. Bounded by `deadline` and ends
/// within one poll of `cancel`, like [`read_to_end`].
pub fn read_windows(
    config: &Config,
    plan: &crate::console::read::window::TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    each: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<crate::console::read::window::TopicCost> {
    read_windows_when(config, plan, deadline, cancel, || each)
}

/// [`read_windows`], its windows found first and `each` asked for only then: a read that can
/// find its offsets before it knows what to keep (the trace topic's, while the payment topic
/// is read) waits in `ready`. The wait is the cost's `wait_ms` and does not count against
/// `deadline`.
pub fn read_windows_when<F: FnMut(&BorrowedMessage<'_>)>(
    config: &Config,
    plan: &crate::console::read::window::TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    ready: impl FnOnce() -> F,
) -> anyhow::Result<crate::console::read::window::TopicCost> {
    let readers = WindowReaders::new(config)?;
    read_windows_with(&readers, config, plan, deadline, cancel, ready)
}

/// The reader of a trace's offset probes, shared by its topics and windows (one topic's round
/// at a time), so a trace opens one probing client's connections, not one per topic. Each topic's
/// scan keeps a reader of its own: a scanner handed from one topic to the next was measured to
/// read nothing of the second for its whole idle wait. Never kept past the read that made it: a
/// client that outlives a topic it read crashes librdkafka when the topic is deleted (its
/// metadata cache).
pub struct WindowReaders {
    probe: Reader,
    probing: Mutex<()>,
}

impl WindowReaders {
    pub fn new(config: &Config) -> anyhow::Result<WindowReaders> {
        Ok(WindowReaders {
            probe: probe_reader(config, Fetch::OneBatch)?,
            probing: Mutex::new(()),
        })
    }
}

/// [`read_windows_when`] with `readers` (a trace's, shared by its topics).
pub fn read_windows_with<F: FnMut(&BorrowedMessage<'_>)>(
    readers: &WindowReaders,
    config: &Config,
    plan: &crate::console::read::window::TopicPlan,
    deadline: Duration,
    cancel: &CancellationToken,
    ready: impl FnOnce() -> F,
) -> anyhow::Result<crate::console::read::window::TopicCost> {
    use crate::console::read::window::{ReadTimes, TopicCost};
    let servers = &config.kafka.bootstrap_servers;
    let topic = plan.topic.as_str();
    let started = Instant::now();
    let consumer = &readers.probe;
    // Created now, so that it is connected by the time the windows are found.
    let scanner = probe_reader(config, Fetch::Windows)?;
    let scan_turn = Mutex::new(());
    let marks = watermarks(consumer, servers, topic)?;
    let read_all: Vec<i32> = marks.iter().map(|(p, _, _)| *p).collect();
    let partitions = plan.partitions(marks.len() as i32).unwrap_or(read_all);
    let mut lookup = OffsetLookup::new((consumer, &readers.probing), servers, topic, cancel);
    let of_plan: Vec<_> = marks
        .iter()
        .filter(|(p, _, _)| partitions.contains(p))
        .copied()
        .collect();
    let ends = lookup.ends(&of_plan)?;
    let looking = Instant::now();
    let ranges = window_ranges(&mut lookup, &ends, &plan.windows, plan.selects_by_id())?;
    let mut times = ReadTimes {
        lookup_ms: looking.elapsed().as_millis() as u64,
        ..ReadTimes::default()
    };
    // Everything before the scan that was not a probe: reader, metadata, watermarks, ends.
    times.setup_ms = (started.elapsed().as_millis() as u64).saturating_sub(times.lookup_ms);
    let waiting = Instant::now();
    let mut each = ready();
    let waited = waiting.elapsed();
    times.wait_ms = waited.as_millis() as u64;
    let scanning = Instant::now();
    let left = deadline.saturating_sub(started.elapsed().saturating_sub(waited));
    let scan = Scan {
        scanner: (&scanner, &scan_turn),
        servers,
        topic,
        cancel,
    };
    let (scanned, partitions, widened) = scan.checked(
        &mut lookup,
        plan,
        &marks,
        partitions,
        &ranges,
        left,
        &mut each,
    )?;
    times.scan_ms = scanning.elapsed().as_millis() as u64;
    lookup.remember(&ends);
    Ok(TopicCost {
        topic: topic.to_string(),
        basis: plan.basis,
        windows: plan.windows.clone(),
        partitions_total: marks.len(),
        partitions_widened: widened,
        partitions_read: partitions,
        offset_lookup: if lookup.broker_truthful == Some(true) {
            "offsets_for_times"
        } else {
            "interpolation_search"
        },
        offset_probes: lookup.probes,
        messages_scanned: scanned,
        times,
    })
}

/// Where a trace's windows are read.
struct Scan<'a> {
    /// The reader and its turn (it may be shared with other topics' scans).
    scanner: (&'a Reader, &'a Mutex<()>),
    servers: &'a str,
    topic: &'a str,
    cancel: &'a CancellationToken,
}

impl Scan<'_> {
    /// Reads `ranges` of `partitions`, checking the shortcut on what it scans ([`ShortcutCheck`]);
    /// when it does not hold, the same windows in every other partition too. Returns the
    /// messages scanned, the partitions read and why they were widened.
    #[allow(clippy::too_many_arguments)]
    fn checked(
        &self,
        lookup: &mut OffsetLookup<'_>,
        plan: &crate::console::read::window::TopicPlan,
        marks: &[(i32, i64, i64)],
        partitions: Vec<i32>,
        ranges: &BTreeMap<i32, Vec<(i64, i64)>>,
        deadline: Duration,
        each: &mut impl FnMut(&BorrowedMessage<'_>),
    ) -> anyhow::Result<(u64, Vec<i32>, Option<String>)> {
        let started = Instant::now();
        let check = ShortcutCheck::default();
        let sampled = std::cell::RefCell::new(Vec::new());
        let mut checked = |m: &BorrowedMessage<'_>| {
            check.see(plan.partitioner, marks.len() as i32, m);
            // Every message scanned is what a probe at its offset would read: a few become
            // anchors for the next search of this time.
            if m.offset() % time_index::SCAN_SAMPLE == 0 {
                let ts = m.timestamp().to_millis().unwrap_or(0);
                sampled.borrow_mut().push((m.partition(), m.offset(), ts));
            }
            each(m)
        };
        let (scanner, servers, topic) = (self.scanner, self.servers, self.topic);
        let mut scanned = read_ranges(
            scanner,
            servers,
            topic,
            ranges,
            deadline,
            self.cancel,
            &mut checked,
        )?;
        lookup.saw(sampled.take());
        let widened = (partitions.len() < marks.len())
            .then(|| check.failed(plan.partitioner, &partitions))
            .flatten();
        if widened.is_none() {
            return Ok((scanned, partitions, None));
        }
        let others: Vec<_> = marks
            .iter()
            .filter(|(p, _, _)| !partitions.contains(p))
            .copied()
            .collect();
        let ends = lookup.ends(&others)?;
        let more = window_ranges(lookup, &ends, &plan.windows, plan.selects_by_id())?;
        let left = deadline.saturating_sub(started.elapsed());
        scanned += read_ranges(
            scanner,
            servers,
            topic,
            &more,
            left,
            self.cancel,
            &mut checked,
        )?;
        lookup.saw(sampled.take());
        Ok((scanned, marks.iter().map(|(p, _, _)| *p).collect(), widened))
    }
}

/// What the messages a trace scans say of the partition shortcut (the traced keys' partitions
/// only): a message without a key, or whose key the partitioner puts elsewhere, was not placed
/// the way the shortcut assumes — the trace's own copies may be in another partition.
#[derive(Default)]
struct ShortcutCheck {
    scanned: std::cell::Cell<u64>,
    unkeyed: std::cell::Cell<u64>,
    misplaced: std::cell::Cell<u64>,
}

impl ShortcutCheck {
    fn see(
        &self,
        partitioner: crate::stream::partitioner::Partitioner,
        partitions: i32,
        m: &BorrowedMessage<'_>,
    ) {
        self.scanned.set(self.scanned.get() + 1);
        match m.key().filter(|k| !k.is_empty()) {
            // idemguard's own trace event without an ID (keyed by none) belongs to no trace.
            None if trace_event_of(m).is_some_and(|e| e.key().is_none()) => {}
            None => self.unkeyed.set(self.unkeyed.get() + 1),
            Some(k) if partitioner.partition_of(k, partitions) != Some(m.partition()) => {
                self.misplaced.set(self.misplaced.get() + 1)
            }
            Some(_) => {}
        }
    }

    /// Why every partition must be read, if the messages scanned say so.
    fn failed(
        &self,
        partitioner: crate::stream::partitioner::Partitioner,
        read: &[i32],
    ) -> Option<String> {
        let (n, unkeyed, misplaced) =
            (self.scanned.get(), self.unkeyed.get(), self.misplaced.get());
        if unkeyed > 0 {
            Some(format!(
                "{unkeyed} of {n} message(s) scanned in partition(s) {read:?} have no key, so the producer did not choose their partition by key: this trace's messages may be in any partition"
            ))
        } else if misplaced > 0 {
            Some(format!(
                "{misplaced} of {n} message(s) scanned in partition(s) {read:?} have keys that {} (kafka.partitioner) puts in another partition: the producer partitions otherwise (`idemguard doctor` shows each topic's observed partitioning)",
                partitioner.name()
            ))
        } else {
            None
        }
    }
}

/// The offset ranges `[start, end)` of `windows` in each partition of `ends` (partition, low,
/// end), merged per partition: each window's start in every partition together, then its end.
/// With `past_edges` (a trace's windows) a bound is left unresolved within a few hundred
/// offsets ([`Seek::scanning`]) and the range widened to hold it: the read gets every message
/// of the window and a few of either side; without, the ranges are exact.
fn window_ranges(
    lookup: &mut OffsetLookup<'_>,
    ends: &[(i32, i64, i64)],
    windows: &[crate::console::read::window::TimeWindow],
    past_edges: bool,
) -> anyhow::Result<BTreeMap<i32, Vec<(i64, i64)>>> {
    use crate::console::read::window::merge_ranges;
    let mut of_p: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    for w in windows {
        let window_ms = if past_edges { w.to_ms - w.from_ms } else { 0 };
        let asks: Vec<_> = ends
            .iter()
            .map(|&(p, low, end)| (p, low, end, w.from_ms))
            .collect();
        let starts = lookup.first_at_or_after(&asks, window_ms)?;
        let asks: Vec<_> = ends
            .iter()
            .zip(&starts)
            .map(|(&(p, _, end), &(s, _))| (p, s, end, w.to_ms.saturating_add(1)))
            .collect();
        let stops = lookup.first_at_or_after(&asks, window_ms)?;
        for ((&(p, _, _), (s, _)), (_, e)) in ends.iter().zip(starts).zip(stops) {
            of_p.entry(p).or_default().push((s, e));
        }
    }
    Ok(of_p
        .into_iter()
        .map(|(p, r)| (p, merge_ranges(r)))
        .filter(|(_, r)| !r.is_empty())
        .collect())
}

/// What a [`probe_reader`] fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetch {
    /// One record batch a fetch (a probe wants one message's timestamp). tansu 0.6.0 answers a
    /// fetch with up to `fetch.max.bytes` of batches whatever the partition's limit: with the
    /// readers' 2 MB a probe cost ~60 ms on the bench's payment topic, with 1 KB ~4 ms (the
    /// payment topic's lookup 568 → 35 ms a trace, median of 20; BENCHMARKS.md). A broker
    /// always returns at least one whole batch (KIP-74), so no message is ever out of reach.
    OneBatch,
    /// Windows of thousands of messages: fetches of up to 64 KB a partition, 2 MB in all.
    Windows,
}

/// A reader for probes or windows: small fetches (a probe wants one message, not megabytes),
/// short fetch waits (a probe past the end must not wait half a second for data).
fn probe_reader(config: &Config, fetch: Fetch) -> anyhow::Result<Reader> {
    let mut c = reader_config(config, "window");
    // A probe or a window that reaches the end of a partition learns it at once.
    c.set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "50")
        // A probe re-assigns the partition at another offset; with the default queue backoff
        // (1 s after a fetch filled the local queue) one probe in three waited a second
        // (measured on tansu: 7-20 s for a trace of 66 probes; 10 ms a probe without it).
        .set("fetch.queue.backoff.ms", "0")
        .set("fetch.error.backoff.ms", "20")
        .set("fetch.message.max.bytes", "65536")
        .set("queued.min.messages", "500");
    if fetch == Fetch::OneBatch {
        // `fetch.max.bytes` may not be below `message.max.bytes` (a producer's limit, unused
        // by a reader; 1,000 is its least).
        c.set("message.max.bytes", "1000")
            .set("fetch.max.bytes", "1024")
            .set("fetch.message.max.bytes", "1024");
    }
    create_reader(&c).map_err(|e| {
        anyhow::anyhow!(
            "cannot create a Kafka reader for {}: {e}",
            config.kafka.bootstrap_servers
        )
    })
}

/// Reads the offset ranges `[start, end)` of each partition, every partition at once (one
/// fetch request serves them all), each partition's ranges in order; how many messages were
/// read. A partition whose ranges are read is paused: its reader must not fetch on.
fn read_ranges(
    (consumer, turn): (&Reader, &Mutex<()>),
    servers: &str,
    topic: &str,
    ranges: &BTreeMap<i32, Vec<(i64, i64)>>,
    deadline: Duration,
    cancel: &CancellationToken,
    each: &mut impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<u64> {
    // Per partition, the ranges left, the one being read first.
    let mut left: BTreeMap<i32, std::collections::VecDeque<(i64, i64)>> = ranges
        .iter()
        .map(|(p, r)| (*p, r.iter().copied().collect()))
        .collect();
    let mut tpl = TopicPartitionList::new();
    for (p, r) in &left {
        tpl.add_partition_offset(topic, *p, Offset::Offset(r[0].0))?;
    }
    let _turn = turn.lock().unwrap_or_else(|e| e.into_inner());
    consumer
        .assign(&tpl)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: assign {topic}: {e}"))?;
    let started = Instant::now();
    let mut read = 0u64;
    let mut idle_since: Option<Instant> = None;
    while !left.is_empty() {
        if cancel.is_cancelled() {
            anyhow::bail!("reading {topic} was cancelled ({read} messages read)");
        }
        if started.elapsed() > deadline {
            anyhow::bail!("kafka {servers}: reading the windows of {topic} took longer than {deadline:?} ({read} messages read)");
        }
        let finished = match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) if m.topic() != topic => None,
            Some(Ok(m)) => {
                idle_since = None;
                let Some(&(_, end)) = left.get(&m.partition()).and_then(|r| r.front()) else {
                    continue;
                };
                if m.offset() < end {
                    read += 1;
                    each(&m);
                }
                (m.offset() + 1 >= end).then_some(m.partition())
            }
            Some(Err(KafkaError::PartitionEOF(p))) => Some(p),
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            // Caught up before `end` (a window that reaches the end of the partition, or a
            // broker whose watermark overstates it): done after a quiet half second.
            None => {
                if idle_since.get_or_insert_with(Instant::now).elapsed()
                    > Duration::from_millis(500)
                {
                    return Ok(read);
                }
                None
            }
        };
        if let Some(p) = finished {
            next_range(consumer, topic, &mut left, p)?;
        }
    }
    Ok(read)
}

/// Partition `p` finished its range: on to its next one, or paused when it has none.
fn next_range(
    consumer: &Reader,
    topic: &str,
    left: &mut BTreeMap<i32, std::collections::VecDeque<(i64, i64)>>,
    p: i32,
) -> anyhow::Result<()> {
    let Some(r) = left.get_mut(&p) else {
        return Ok(());
    };
    r.pop_front();
    if let Some(&(start, _)) = r.front() {
        consumer.seek(topic, p, Offset::Offset(start), KAFKA_TIMEOUT)?;
    } else {
        left.remove(&p);
        let mut one = TopicPartitionList::new();
        one.add_partition(topic, p);
        consumer.pause(&one)?;
    }
    Ok(())
}

/// Where a live reader of one partition starts, and the end it has to reach to be caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveStart {
    pub partition: i32,
    /// The first offset whose message is at or after the time asked for.
    pub start: i64,
    /// Every message the partition holds is at or after that time.
    pub whole: bool,
    /// The partition's end when the start was looked up (exact, see [`OffsetLookup::ends`]).
    pub end: i64,
}

/// Per partition of `topic`, the first offset at or after `since_ms` and the current end, found
/// like [`read_windows`]' (the broker's `offsets_for_times` when it checks out, else a search
/// over offsets): a live reader starts there instead of at the topic's beginning, so it
/// catches up with the last hour in time proportional to the hour, not to the retention.
pub fn live_starts(config: &Config, topic: &str, since_ms: i64) -> anyhow::Result<Vec<LiveStart>> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer = probe_reader(config, Fetch::OneBatch)?;
    let marks = watermarks(&consumer, servers, topic)?;
    let turn = Mutex::new(());
    let never = CancellationToken::new();
    let mut lookup = OffsetLookup::new((&consumer, &turn), servers, topic, &never);
    let ends = lookup.ends(&marks)?;
    let asks: Vec<_> = ends
        .iter()
        .map(|&(p, low, end)| (p, low, end, since_ms))
        .collect();
    let starts = lookup.first_at_or_after(&asks, 0)?;
    lookup.remember(&ends);
    let out = ends
        .iter()
        .zip(starts)
        .map(|(&(partition, low, end), (start, _))| LiveStart {
            partition,
            start,
            whole: start <= low,
            end,
        })
        .collect();
    Ok(out)
}
