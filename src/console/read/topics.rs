//! The console's Kafka client: readers that read by assignment — the settings of every reader
//! of the console ([`reader_config`], [`probe_reader`] for offset probes and window scans), the
//! context that keeps their errors off stderr, and the partitions of a topic with their
//! watermarks. Everything in `read/` that reads a topic makes its reader here.
//!
//! The console never joins a consumer group and never commits: it assigns partitions itself, so
//! reading can never steal partitions from (or move the offsets of) the real consumer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientConfig, TopicPartitionList};

use crate::config::Config;

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
/// metadata cache (seen against tansu): whoever deletes topics a trace just read waits here
/// first.
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

/// What a [`probe_reader`] fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fetch {
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
pub(super) fn probe_reader(config: &Config, fetch: Fetch) -> anyhow::Result<Reader> {
    let mut c = reader_config(config, "window");
    // A probe or a window that reaches the end of a partition learns it at once.
    c.set("enable.partition.eof", "true")
        // A re-assignment's fetch waits for the one in flight, which at a partition's end
        // waits this long for data: 50 ms cost a trace on a small topic one such wait per
        // round (p50 ~260 ms → ~50 ms with the readers let go, BENCHMARKS.md).
        .set("fetch.wait.max.ms", "10")
        // A probe re-assigns the partition at another offset; with the default queue backoff
        // (1 s after a fetch filled the local queue) one probe in three waited a second
        // (measured on tansu: 7-20 s for a trace of 66 probes; 10 ms a probe without it).
        .set("fetch.queue.backoff.ms", "0")
        .set("fetch.error.backoff.ms", "20")
        // A new client connects to its first broker on demand, and librdkafka suppresses that
        // connection for half of this (50 ms by default: `sparse_connect_intvl`): the first
        // metadata request of one reader in two waited 50–57 ms where it takes 1–3 ms (44 of
        // 80 readers on the bench's small topics; 0 of 80 with this, each waiting ≤ 11 ms).
        .set("reconnect.backoff.ms", "20")
        .set("fetch.message.max.bytes", "65536")
        .set("queued.min.messages", "500");
    if fetch == Fetch::Windows {
        // A window's reader outpaces its caller: with no backoff its broker thread re-decides
        // at once, for as long as the local queue is full, that it cannot fetch — it spun a
        // core's worth of CPU through every scan (perf: 85 % of an `idemguard trace` in
        // `rdk:broker` threads, in poll and clock_gettime). 1 ms lets it sleep. The probe
        // readers keep 0: with 1–5 ms on them, four traces in seven of one order on the bench's
        // 20,000,000 events took 2–9 s, their lookup 1.6–2.7 s against 0.1–0.3 (measured, the
        // cause not traced); they give their partitions up once their windows are found
        // instead (`OffsetLookup::rest`).
        c.set("fetch.queue.backoff.ms", "1");
    }
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
