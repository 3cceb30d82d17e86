//! The console's Kafka client: readers that read by assignment — the settings of every reader
//! of the console ([`reader_config`], [`window_reader`] for reads of windows), the context that
//! keeps their errors off stderr and counts a window reader's requests ([`round_trips`]), and
//! the partitions of a topic with their watermarks. Everything in `read/` that reads a topic
//! makes its reader here.
//!
//! The console never joins a consumer group and never commits: it assigns partitions itself, so
//! reading can never steal partitions from (or move the offsets of) the real consumer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientConfig, TopicPartitionList};

use crate::config::Config;
use crate::console::read::window::RoundTrips;

/// How long one metadata / watermark / offset request may take before the broker counts as down.
pub const KAFKA_TIMEOUT: Duration = Duration::from_secs(3);

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
        .set("fetch.max.bytes", "2097152");
    // librdkafka's own log lines never reach a terminal or a `--json` answer: what a read meets
    // comes back from the read (see [`ReaderContext`]). Set here, not as the `log_level`
    // property, which the client library overrides at creation with the `log` crate's level: a
    // reader closed while its coordinator connection was still authenticating over TLS had its
    // FAIL line printed after `idemguard trace --json`'s answer.
    c.set_log_level(RDKafkaLogLevel::Emerg);
    c
}

/// The client context of the console's readers. A reader that asks to learn where a partition
/// ends (`enable.partition.eof`) gets [`KafkaError::PartitionEOF`] from `poll` and uses it; the
/// client library reports the same event to the context's error callback too, whose default
/// logs it as an ERROR — a line on stderr on every `trace`. The other errors (brokers down, a
/// refused handshake) come back from the read that met them, which says them once, with the
/// refusal explained ([`crate::kafka_client::explain_read_failure`]); repeated here as ERRORs
/// they were a screen of `AllBrokersDown` before the answer, so they go to the debug log.
/// A [`window_reader`]'s context also counts the requests the reader sends ([`round_trips`]).
#[derive(Default)]
pub struct ReaderContext {
    requests: Option<RequestCount>,
}

impl rdkafka::ClientContext for ReaderContext {
    fn log(&self, _: RDKafkaLogLevel, fac: &str, line: &str) {
        match &self.requests {
            Some(count) if fac == "SEND" => count.sent(line),
            _ => {}
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

/// The requests a reader has sent, counted from librdkafka's protocol log, one line a request
/// sent (`…: Sent MetadataRequest (v12, …)`): the fetches go out on its own threads, and a
/// request on the bootstrap connection, retired once the brokers are known, is in no
/// statistics. The lines come through the reader's queue, so they are counted as it is polled.
#[derive(Default)]
struct RequestCount {
    total: AtomicU64,
    metadata: AtomicU64,
    list_offsets: AtomicU64,
    fetch: AtomicU64,
}

impl RequestCount {
    fn sent(&self, line: &str) {
        // "[thrd:…]: 127.0.0.1:9092/1: Sent FetchRequest (v11, …)"
        let Some((_, request)) = line.split_once(": Sent ") else {
            return;
        };
        let add = |n: &AtomicU64| n.fetch_add(1, Ordering::Relaxed);
        add(&self.total);
        match request.split(' ').next() {
            Some("MetadataRequest") => add(&self.metadata),
            Some("ListOffsetsRequest") => add(&self.list_offsets),
            Some("FetchRequest") => add(&self.fetch),
            _ => 0,
        };
    }
}

/// The requests `reader` (a [`window_reader`]) has sent its brokers, its read over: the lines
/// of the requests sent since it was last polled are drained first (a few ms, its messages
/// dropped). `None` for a reader that does not count them.
pub fn round_trips(reader: &Reader) -> Option<RoundTrips> {
    let count = reader.context().requests.as_ref()?;
    let drained = std::time::Instant::now() + Duration::from_millis(3);
    while let Some(left) = drained.checked_duration_since(std::time::Instant::now()) {
        let _ = reader.poll(left);
    }
    let of = |n: &AtomicU64| n.load(Ordering::Relaxed);
    Some(RoundTrips {
        total: of(&count.total),
        metadata: of(&count.metadata),
        list_offsets: of(&count.list_offsets),
        fetch: of(&count.fetch),
    })
}

impl ConsumerContext for ReaderContext {}

/// A reader of the console (see [`reader_config`]).
pub type Reader = BaseConsumer<ReaderContext>;

/// A [`Reader`] of `c`.
pub fn create_reader(c: &ClientConfig) -> rdkafka::error::KafkaResult<Reader> {
    c.create_with_context(ReaderContext::default())
}

/// Assigns `tpl` (partitions of `topic`) to `reader` once the reader knows who leads them. A
/// reader that meets a topic first in `assign` asks for its metadata in the background, and on
/// Apache Kafka, whose advertised listener is the bootstrap address, that request was seen lost
/// while the client retired its bootstrap connection: the partitions had no leader, nothing was
/// fetched, and one trace in three read no message of a window that held fourteen. Asked here,
/// the answer is in the client's cache before the assignment (one round trip, ~1 ms).
pub fn assign_known(
    reader: &Reader,
    servers: &str,
    topic: &str,
    tpl: &TopicPartitionList,
) -> anyhow::Result<()> {
    reader
        .fetch_metadata(Some(topic), KAFKA_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: metadata of {topic}: {e}"))?;
    reader
        .assign(tpl)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: assign {topic}: {e}"))
}

/// Assigns `tpl` (partitions of `topic`, each at the offset to read from) to `reader` — a
/// reader that knows the topic's metadata — every one of them fetched: a read sets aside the
/// partitions it is done with ([`set_aside`]), and librdkafka keeps an application's pause
/// through a new assignment. They are resumed before the assignment, whose start of fetching
/// wakes the reader's broker thread: a resume after it wakes nothing, and the partitions waited
/// out the thread's idle second before their first fetch.
pub fn assign_at(
    reader: &Reader,
    servers: &str,
    topic: &str,
    tpl: &TopicPartitionList,
) -> anyhow::Result<()> {
    reader
        .resume(tpl)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: resume {topic}: {e}"))?;
    reader
        .assign(tpl)
        .map_err(|e| anyhow::anyhow!("kafka {servers}: assign {topic}: {e}"))
}

/// Takes partition `p` of `topic` out of `reader`'s fetches until its next [`assign_at`]: the
/// read is done with it (a probe answered, its last stretch read). Left in, it starves the
/// partitions still read. A [`window_reader`] asks at most `fetch.message.max.bytes` (64 KB)
/// of each partition; a record batch larger than that (an lz4 batch of a producer's default
/// `batch.size` holds thousands of messages, 100–160 KB) is returned only to the first
/// partition of a fetch response that has data (KIP-74), and librdkafka puts the same partition
/// first in every fetch after its local queue filled. A probe round of two partitions had the
/// one answered first fetched on, batch after batch, until the other got a fetch of its own by
/// chance: 2 to 67 fetches and up to 166,000 messages decoded for nothing a round, on a topic
/// of 1 M events.
pub fn set_aside(reader: &Reader, topic: &str, p: i32) -> anyhow::Result<()> {
    let mut one = TopicPartitionList::new();
    one.add_partition(topic, p);
    reader
        .pause(&one)
        .map_err(|e| anyhow::anyhow!("kafka: pausing {topic}/{p}: {e}"))
}

/// Lets `reader` go without waiting for it: librdkafka's close of a consumer waits for its
/// threads, and one close in two took ~100 ms here (a timer's tick; measured on the stack's
/// broker) though a reader never joins its group and has nothing to commit. A trace lets its
/// readers go on a thread of their own, so its answer does not wait for them; a process that
/// exits meanwhile loses nothing. Without a thread to be had, the reader closes here.
pub fn let_go(reader: Reader) {
    CLOSING.fetch_add(1, Ordering::SeqCst);
    let closing = std::thread::Builder::new().name("reader-close".into());
    let spawned = closing.spawn(move || {
        drop(reader);
        CLOSING.fetch_sub(1, Ordering::SeqCst);
    });
    // Not spawned: the closure, and the reader with it, was dropped by `spawn`.
    if spawned.is_err() {
        CLOSING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Readers let go and not closed yet.
static CLOSING: AtomicUsize = AtomicUsize::new(0);

/// Waits, at most `within`, until every reader this process let go has closed; whether they
/// have. A librdkafka client still alive when a topic it read is deleted can crash in its
/// metadata cache: whoever deletes topics a trace just read waits here first.
pub fn readers_closed(within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while CLOSING.load(Ordering::SeqCst) > 0 {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
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
    let partitions = partitions(consumer, servers, topic)?;
    watermarks_of(consumer, servers, topic, &partitions)
}

/// The partitions of `topic`, in order (one metadata request).
pub fn partitions<C: ConsumerContext>(
    consumer: &impl Consumer<C>,
    servers: &str,
    topic: &str,
) -> anyhow::Result<Vec<i32>> {
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
    let mut out: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    out.sort_unstable();
    Ok(out)
}

/// `partitions` of `topic` with their (low, high) watermarks (two requests each).
pub fn watermarks_of<C: ConsumerContext>(
    consumer: &impl Consumer<C>,
    servers: &str,
    topic: &str,
    partitions: &[i32],
) -> anyhow::Result<Vec<(i32, i64, i64)>> {
    let mut out = Vec::new();
    for &p in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, KAFKA_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("kafka {servers}: watermarks of {topic}/{p}: {e}"))?;
        out.push((p, low, high));
    }
    Ok(out)
}

/// A reader of windows: it learns at once where a partition ends (a window that reaches the end
/// is read), fetches a little at a time and counts its requests ([`round_trips`]).
pub(super) fn window_reader(config: &Config) -> anyhow::Result<Reader> {
    let mut c = reader_config(config, "window");
    c.set("enable.partition.eof", "true")
        // A re-assignment's fetch waits for the one in flight, which at a partition's end
        // waits this long for data: a probe of the offsets, or the next window, waits no more.
        .set("fetch.wait.max.ms", "10")
        // The reader outpaces its caller: with no backoff its broker thread re-decides at once,
        // for as long as the local queue is full, that it cannot fetch — a core's worth of CPU
        // spun through every scan. 1 ms lets it sleep.
        .set("fetch.queue.backoff.ms", "1")
        .set("fetch.error.backoff.ms", "20")
        // A new client connects to its first broker on demand, and librdkafka suppresses that
        // connection for half of this (50 ms by default): the first metadata request of one
        // reader in two waited 50–57 ms where it takes 1–3 ms.
        .set("reconnect.backoff.ms", "20")
        .set("fetch.message.max.bytes", "65536")
        .set("queued.min.messages", "500")
        // The protocol's debug lines, one a request sent, are how the reader counts them; the
        // context keeps every line off the terminal ([`ReaderContext`]).
        .set("debug", "protocol");
    c.set_log_level(RDKafkaLogLevel::Debug);
    let context = ReaderContext {
        requests: Some(RequestCount::default()),
    };
    c.create_with_context(context).map_err(|e| {
        anyhow::anyhow!(
            "cannot create a Kafka reader for {}: {e}",
            config.kafka.bootstrap_servers
        )
    })
}
