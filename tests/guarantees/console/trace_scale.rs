//! Production scale: a trace reads windows of the topics around what the database
//! knows, in the partitions its keys hash to, and says what that cost; the database side stays
//! index-only. Real broker and databases, the test's own topics and databases; topics of tens of
//! thousands of messages with Kafka timestamps spread over seven days, so the assertions are on
//! what was read (the trace's own `read_cost`), not on how long it took.

use crate::common;

use std::time::Duration;

use idemguard::config::{Config, Dialect};
use idemguard::console::cli::headless;
use idemguard::console::read::window::{TimeWindow, WindowBasis};
use idemguard::contracts::{
    format_ms, headers, now_ms, Layer, Outcome, PaymentSucceeded, TraceEvent, TraceTarget,
};
use idemguard::db::Database;
use idemguard::stream::partitioner::Partitioner;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const DAY_MS: i64 = 24 * 3600 * 1000;

/// One message to produce: topic (payment or trace), key, payload, Kafka timestamp, headers.
struct Out {
    ts: i64,
    payment: bool,
    key: String,
    payload: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

/// A payment message of `order_no` at `ts`.
fn payment_message(order_no: &str, request_id: &str, event_id: &str, ts: i64) -> Out {
    let p = PaymentSucceeded {
        event_id: event_id.into(),
        order_no: order_no.into(),
        request_id: request_id.into(),
        pay_no: format!("P{}", &event_id[..8]),
        user_id: 7,
        amount: 1999,
        paid_at: ts,
    };
    Out {
        ts,
        payment: true,
        key: order_no.into(),
        payload: serde_json::to_vec(&p).unwrap(),
        headers: vec![
            (headers::EVENT_ID, event_id.into()),
            (headers::ORDER_NO, order_no.into()),
            (headers::REQUEST_ID, request_id.into()),
        ],
    }
}

/// A trace event at `ts`, keyed as the tracer keys it (orderNo, else requestId, else eventId).
fn trace_event(e: TraceEvent, ts: i64) -> Out {
    let mut e = e;
    e.ts = format_ms(ts);
    e.instance = "api-1".into();
    Out {
        ts,
        payment: false,
        key: e.key().unwrap().to_string(),
        payload: serde_json::to_vec(&e).unwrap(),
        headers: vec![],
    }
}

/// `trace_n` trace events and `payment_n` payment messages of other orders, spread evenly over
/// the seven days before now.
fn filler(trace_n: usize, payment_n: usize, now: i64) -> Vec<Out> {
    let start = now - 7 * DAY_MS;
    let mut out = Vec::with_capacity(trace_n + payment_n);
    for i in 0..trace_n {
        let ts = start + (7 * DAY_MS) * i as i64 / trace_n as i64;
        let e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .order_no(format!("F{i:019}"))
            .request_id(format!("APP:ORDER:20261129:filler-{i}"));
        out.push(trace_event(e, ts));
    }
    for i in 0..payment_n {
        let ts = start + (7 * DAY_MS) * i as i64 / payment_n as i64;
        let order = format!("G{i:019}");
        let event = uuid::Uuid::new_v4().to_string();
        out.push(payment_message(&order, "APP:ORDER:20261129:g", &event, ts));
    }
    out
}

/// Produces `messages` in time order (so each partition's timestamps only grow, as a live
/// producer's do) with librdkafka's `partitioner`.
fn produce(config: &Config, partitioner: &str, mut messages: Vec<Out>) {
    messages.sort_by_key(|m| m.ts);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("partitioner", partitioner)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "200000")
        .set("max.in.flight.requests.per.connection", "1")
        .create()
        .unwrap();
    for m in &messages {
        let topic = if m.payment {
            &config.kafka.payment_topic
        } else {
            &config.kafka.trace_topic
        };
        let mut h = OwnedHeaders::new();
        for (k, v) in &m.headers {
            h = h.insert(Header {
                key: k,
                value: Some(v.as_str()),
            });
        }
        let mut record = BaseRecord::<str, [u8]>::to(topic)
            .key(m.key.as_str())
            .payload(m.payload.as_slice())
            .timestamp(m.ts)
            .headers(h);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) => {
                    assert!(
                        matches!(
                            e.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "producing: {e}"
                    );
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// An order of the test: its IDs, and its database rows written at `t` (the record and the
/// order, finished two seconds later).
struct TracedOrder {
    order_no: String,
    request_id: String,
    event_id: String,
}

impl TracedOrder {
    fn new(order_no: String) -> TracedOrder {
        TracedOrder {
            request_id: format!("APP:ORDER:20261129:{}", uuid::Uuid::new_v4().simple()),
            event_id: uuid::Uuid::new_v4().to_string(),
            order_no,
        }
    }

    async fn write_rows(&self, db: &Database, t: i64) {
        let sql = format!(
            "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, order_no, \
             owner, lease_until, created_at, updated_at, expire_at) VALUES ('{r}', 'ORDER', \
             'h', 'SUCCEEDED', '{o}', 'api-1', {t}, {t}, {f}, {e})",
            r = self.request_id,
            o = self.order_no,
            f = t + 2_000,
            e = t + DAY_MS
        );
        sqlx::query(&sql).execute(&db.pool).await.unwrap();
        let sql = format!(
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, \
             status, payment_event_id, created_at, updated_at) VALUES ('{r}', '{o}', 7, 7, 1, \
             1999, 'PAID', '{ev}', {t}, {f})",
            r = self.request_id,
            o = self.order_no,
            ev = self.event_id,
            f = t + 2_000
        );
        sqlx::query(&sql).execute(&db.pool).await.unwrap();
    }

    /// Its Kafka side at `t`: the claim (keyed by requestId), the payment message and the
    /// consumer's two decisions (keyed by orderNo).
    fn messages(&self, t: i64) -> Vec<Out> {
        let (o, r, e) = (&self.order_no, &self.request_id, &self.event_id);
        vec![
            trace_event(
                TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(r),
                t,
            ),
            payment_message(o, r, e, t + 1_500),
            trace_event(
                TraceEvent::new(Layer::Stream, Outcome::SinkApplied)
                    .order_no(o)
                    .event_id(e),
                t + 1_800,
            ),
            trace_event(
                TraceEvent::new(Layer::Stream, Outcome::DedupHit)
                    .order_no(o)
                    .event_id(e),
                t + 1_900,
            ),
        ]
    }
}

/// A database and two fresh topics (3 partitions each) of the test's own.
async fn world(partitioner: Partitioner) -> (Config, Database) {
    let (mut config, db) = common::migrated_database(Dialect::Postgres).await;
    let topics = common::fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.kafka.partitioner = partitioner;
    (config, db)
}

fn kafka_entries(t: &serde_json::Value) -> usize {
    let entries = t["entries"].as_array().unwrap();
    entries.iter().filter(|e| e["layer"] == "kafka").count()
}

/// An order in the middle of seven days of 30,000 trace events and 6,000 payment messages: the
/// trace finds all of its Kafka side, reading one window per topic in the order's partitions —
/// a few dozen messages, found in O(log n) probes — and says so in its JSON and its table.
#[tokio::test]
async fn a_trace_of_an_order_in_the_middle_reads_only_its_windows() {
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let t = now - 7 * DAY_MS / 2;
    let order = TracedOrder::new("20261126000000000mid".into());
    order.write_rows(&db, t).await;
    let mut out = filler(30_000, 6_000, now);
    out.extend(order.messages(t));
    produce(&config, "consistent_random", out);

    let r = headless::trace(&config, &TraceTarget::classify(&order.order_no)).await;
    assert!(r.ok, "{}", r.failures());
    let j = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(kafka_entries(&j), 1, "the payment message is found");
    assert_eq!(j["interceptions"].as_array().unwrap().len(), 1, "{j:#}");
    let cost = r.data.read_cost.clone().expect("a read trace has a cost");
    assert_eq!(cost.unknown_id_window, None);
    assert_eq!(cost.topics.len(), 2);
    for c in &cost.topics {
        assert_eq!(c.basis, WindowBasis::DatabaseTimes);
        assert_eq!(c.windows.len(), 1, "{c:?}");
        let margin = config.console.trace_margin.as_millis() as i64;
        assert_eq!(c.windows[0].from_ms, t - margin);
        // 20 minutes of 30,000 events in 7 days are ~60 events over 3 partitions.
        assert!(c.messages_scanned <= 100, "{c:?}");
        assert!(c.messages_scanned >= 2, "{c:?}");
        // Two bounds searched over ≤ 10,000 offsets, plus the partition's end and the broker's
        // answer checked once: a binary search takes 2 × 14 probes per partition, the
        // interpolation over these evenly spread timestamps fewer (the bound is the binary
        // search's, so it holds on any broker's timing).
        assert!(
            c.offset_probes <= 40 * c.partitions_read.len() as u64,
            "{c:?}"
        );
        assert!(c.partitions_read.len() < c.partitions_total, "{c:?}");
    }
    assert_eq!(cost.topics[0].partitions_read.len(), 1, "payment: orderNo");
    assert_eq!(
        j["read_cost"]["topics"][0]["topic"],
        config.kafka.payment_topic.as_str()
    );
    let table = headless::trace_table(&r);
    assert!(
        table.contains(&format!("read {}: ", config.kafka.trace_topic)),
        "{table}"
    );
    assert!(
        table.contains("message(s) scanned in 1 window(s)"),
        "{table}"
    );
}

/// An order never paid, on a database that shows the consumer's decisions: no `processed_event`
/// row names it, so no payment of it was consumed, late or not — its topics are read around its
/// rows only, not searched `console.forward_search` forward (224,000 messages a trace on a week
/// of 20 M, BENCHMARKS.md).
#[tokio::test]
async fn an_unpaid_order_is_not_searched_forward_where_the_consumer_decisions_show() {
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let t = now - 7 * DAY_MS / 2;
    let order = TracedOrder::new("20261126000000unpaid".into());
    let rows = [
        format!(
            "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, \
             order_no, owner, lease_until, created_at, updated_at, expire_at) VALUES ('{r}', \
             'ORDER', 'h', 'SUCCEEDED', '{o}', 'api-1', {t}, {t}, {f}, {e})",
            r = order.request_id,
            o = order.order_no,
            f = t + 200,
            e = t + DAY_MS
        ),
        format!(
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, \
             status, created_at, updated_at) VALUES ('{r}', '{o}', 7, 7, 1, 1999, 'CREATED', \
             {t}, {t})",
            r = order.request_id,
            o = order.order_no,
        ),
    ];
    for sql in rows {
        sqlx::query(&sql).execute(&db.pool).await.unwrap();
    }
    let mut out = filler(30_000, 6_000, now);
    let claim = TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(&order.request_id);
    out.push(trace_event(claim, t));
    produce(&config, "consistent_random", out);

    let r = headless::trace(&config, &TraceTarget::classify(&order.order_no)).await;
    assert!(r.ok && r.data.found, "{}", r.failures());
    let cost = r.data.read_cost.clone().expect("a read trace has a cost");
    assert_eq!(cost.forward_search, None, "{cost:?}");
    let margin = config.console.trace_margin.as_millis() as i64;
    for c in &cost.topics {
        assert_eq!(c.windows.len(), 1, "{c:?}");
        assert_eq!(
            (c.windows[0].from_ms, c.windows[0].to_ms),
            (t - margin, t + 200 + margin),
            "around the rows' times only: {c:?}"
        );
    }
}

/// The rows name the order and the request, so the trace topic is read beside the payment topic
/// (`read_cost.concurrent`) — and still keeps what only the payment topic names: a copy of the
/// payment re-published with an eventId the database never saw, whose dedup hit names that
/// eventId alone (keyed by it, in a partition the order's keys also read), is in the trace.
#[tokio::test]
async fn the_topics_read_together_keep_what_the_payment_messages_name() {
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let t = now - 2 * DAY_MS;
    let order = TracedOrder::new("20261126000000000par".into());
    let partitions = |k: &str| Partitioner::ConsistentRandom.partition_of(k.as_bytes(), 3);
    let read = [partitions(&order.order_no), partitions(&order.request_id)];
    let copy = (0..)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .find(|e| read.contains(&partitions(e)))
        .unwrap();
    order.write_rows(&db, t).await;
    let mut out = filler(20_000, 4_000, now);
    out.extend(order.messages(t));
    let (o, r) = (&order.order_no, &order.request_id);
    out.push(payment_message(o, r, &copy, t + 60_000));
    let hit = TraceEvent::new(Layer::Stream, Outcome::DedupHit).event_id(&copy);
    out.push(trace_event(hit, t + 60_100));
    produce(&config, "consistent_random", out);

    let r = headless::trace(&config, &TraceTarget::classify(&order.order_no)).await;
    assert!(r.ok, "{}", r.failures());
    let cost = r.data.read_cost.clone().unwrap();
    assert!(cost.concurrent, "{cost:?}");
    assert_eq!(cost.topics.len(), 2, "{cost:?}");
    assert_eq!(cost.topics[0].topic, config.kafka.payment_topic);
    assert_eq!(cost.topics[1].topic, config.kafka.trace_topic);
    assert_eq!(
        cost.topics[0].times.wait_ms, 0,
        "the payment topic never waits"
    );
    let j = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(kafka_entries(&j), 2, "both copies of the payment: {j:#}");
    let of_copy: Vec<_> = j["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["layer"] == "stream" && e.to_string().contains(&copy))
        .collect();
    assert_eq!(of_copy.len(), 1, "the copy's dedup hit: {j:#}");
    let table = headless::trace_table(&r);
    assert!(table.contains("read at the same time"), "{table}");
}

/// An order paid three hours after it was made — two windows a topic, the trace topic read in
/// two partitions (its request's and its order's), so each partition is read in two stretches
/// with a seek between them — on topics written in large record batches (a producer's default
/// `batch.size`: ~1,500 messages, several hundred KB, more than the window reader asks of a
/// partition per fetch). What a read fetches follows its windows, not the topic: two rounds of
/// probes (a fetch for each partition and one in flight) and a few fetches a stretch. A
/// partition left in the fetches once done with — a probe answered — was fetched on, batch
/// after batch, while the other waited for a fetch response of its own (2–67 fetches a round
/// at 1 M events, thousands at 20 M).
#[tokio::test]
async fn a_read_in_two_partitions_of_large_batches_fetches_what_its_windows_hold() {
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let t = now - 6 * DAY_MS;
    let paid = t + 3 * 3600 * 1000;
    let partition = |k: &str| Partitioner::ConsistentRandom.partition_of(k.as_bytes(), 3);
    let order_no = "20261126000000000two".to_string();
    let order = (0..)
        .map(|_| TracedOrder::new(order_no.clone()))
        .find(|o| partition(&o.request_id) != partition(&o.order_no))
        .unwrap();
    order.write_rows(&db, t).await;
    let sql = format!(
        "UPDATE order_record SET updated_at = {paid} WHERE order_no = '{}'",
        order.order_no
    );
    sqlx::query(&sql).execute(&db.pool).await.unwrap();
    let (o, r, e) = (&order.order_no, &order.request_id, &order.event_id);
    let mut out = filler(150_000, 30_000, now);
    out.extend([
        trace_event(
            TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(r),
            t,
        ),
        payment_message(o, r, e, paid),
        trace_event(
            TraceEvent::new(Layer::Stream, Outcome::SinkApplied)
                .order_no(o)
                .event_id(e),
            paid + 300,
        ),
    ]);
    produce(&config, "consistent_random", out);

    // Three traces: how long a starved partition waits is a race between the reader's broker
    // thread and its poller, so one read can be lucky.
    for _ in 0..3 {
        let r = headless::trace(&config, &TraceTarget::classify(&order.order_no)).await;
        assert!(r.ok && r.data.found, "{}", r.failures());
        let j = serde_json::to_value(&r).unwrap()["data"].clone();
        assert_eq!(kafka_entries(&j), 1, "the payment message: {j:#}");
        let cost = r.data.read_cost.clone().unwrap();
        assert_eq!(cost.topics[1].topic, config.kafka.trace_topic);
        assert_eq!(cost.topics[1].partitions_read.len(), 2, "{cost:?}");
        for c in &cost.topics {
            assert_eq!(c.windows.len(), 2, "{c:?}");
            let partitions = c.partitions_read.len() as u64;
            let stretches = partitions * c.windows.len() as u64;
            let bound = 3 * (partitions + 1) + 3 * stretches;
            assert!(
                c.round_trips.fetch <= bound,
                "{} fetches (at most {bound} for {stretches} stretches in {partitions} \
                 partition(s)): {c:?}",
                c.round_trips.fetch
            );
        }
    }
}

/// A payment message produced by a Java-compatible producer (librdkafka's `murmur2_random`, the
/// Java client's default) is found in the one partition Kafka's murmur2 gives its key — chosen
/// so that librdkafka's default partitioner would point elsewhere.
#[tokio::test]
async fn a_java_partitioned_key_is_found_in_one_partition() {
    let (config, db) = world(Partitioner::Murmur2Random).await;
    let order_no = (0..)
        .map(|i| format!("20261126{i:012}java"))
        .find(|o| {
            Partitioner::Murmur2Random.partition_of(o.as_bytes(), 3)
                != Partitioner::ConsistentRandom.partition_of(o.as_bytes(), 3)
        })
        .unwrap();
    let java = Partitioner::Murmur2Random
        .partition_of(order_no.as_bytes(), 3)
        .unwrap();
    let now = now_ms();
    let t = now - DAY_MS;
    let order = TracedOrder::new(order_no);
    order.write_rows(&db, t).await;
    let mut out = filler(3_000, 3_000, now);
    out.extend(order.messages(t));
    produce(&config, "murmur2_random", out);

    let r = headless::trace(&config, &TraceTarget::classify(&order.order_no)).await;
    assert!(r.ok, "{}", r.failures());
    let j = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(kafka_entries(&j), 1, "{j:#}");
    let cost = r.data.read_cost.clone().unwrap();
    let payment = &cost.topics[0];
    assert_eq!(payment.topic, config.kafka.payment_topic);
    assert_eq!(payment.partitions_read, [java]);
    let source = j["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["layer"] == "kafka")
        .unwrap()["source"]
        .clone();
    assert!(
        source.as_str().unwrap().contains(&format!(" p{java}@")),
        "{source}"
    );
}

/// An eventId the database does not know is searched in the last 24 hours only, and the answer
/// says so: a message naming it three days ago is not found (nor read), and is found once
/// `--since/--until` cover it.
#[tokio::test]
async fn an_unknown_id_reads_only_the_default_window_and_says_so() {
    let (config, _db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let t = now - 3 * DAY_MS;
    // Rows never written: only Kafka knows this order.
    let order = TracedOrder::new("20261127000000000old".into());
    let mut out = filler(14_000, 7_000, now);
    out.extend(order.messages(t));
    produce(&config, "consistent_random", out);

    let target = TraceTarget::classify(&order.event_id);
    let r = headless::trace(&config, &target).await;
    assert!(
        !r.data.found,
        "three days ago is outside the default window"
    );
    let cost = r.data.read_cost.clone().unwrap();
    let w = cost
        .unknown_id_window
        .expect("the answer names the window searched");
    assert!(
        (w.to_ms - now).abs() < 60_000 && w.to_ms - w.from_ms == DAY_MS,
        "{w:?}"
    );
    for c in &cost.topics {
        assert_eq!(
            (c.basis, c.windows.as_slice()),
            (WindowBasis::UnknownIdWindow, &[w][..])
        );
        // One day of seven: ~2,000 trace events, ~1,000 payment messages.
        assert!(c.messages_scanned <= 2_200, "{c:?}");
        assert!(c.messages_scanned >= 900, "{c:?}");
    }
    let table = headless::trace_table(&r);
    assert!(
        table.contains("the database has no row of this ID"),
        "{table}"
    );
    assert!(table.contains(&format_ms(w.from_ms)), "{table}");

    let around = TimeWindow {
        from_ms: t - 3_600_000,
        to_ms: t + 3_600_000,
    };
    let r = headless::trace_in(&config, &target, Some(around)).await;
    let j = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(kafka_entries(&j), 1, "{j:#}");
    assert_eq!(j["order_no"], order.order_no.as_str());
    // Two hours of seven days' filler, over every partition (an ID only Kafka knows has no
    // computed partition): about 250 messages of the 21,000, plus the window's edges; once,
    // under load, more than 200 — the bound says "a window, not the topic".
    let scanned = r.data.read_cost.unwrap().messages_scanned();
    assert!(
        scanned <= 1_000,
        "{scanned} messages scanned for a two-hour window"
    );
}

// ---------------------------------------------------------------------------------------------
// The process's index of offsets by time (earlier traces' probes and scans) only narrows a search
// ---------------------------------------------------------------------------------------------

/// The timeline entries of a trace at `ms` (its JSON).
fn entries_at(
    r: &headless::Document<idemguard::console::read::timeline::Timeline>,
    ms: i64,
) -> usize {
    let j = serde_json::to_value(r).unwrap()["data"].clone();
    let entries = j["entries"].as_array().unwrap().clone();
    entries.iter().filter(|e| e["at_ms"] == ms).count()
}

/// Trace events of the order on both edges of its window, `[t − margin, t + 2 s + margin]`
/// (its rows' times are `t` and `t + 2 s`).
fn edge_events(order: &TracedOrder, t: i64, margin: i64) -> Vec<Out> {
    [t - margin, t + 2_000 + margin]
        .into_iter()
        .map(|ms| {
            let e = TraceEvent::new(Layer::Api, Outcome::Replayed).order_no(&order.order_no);
            trace_event(e, ms)
        })
        .collect()
}

/// A neighbour's trace leaves the index points right at the next order's window start (its
/// window ends where the other begins), and a second trace of the order meets the points its
/// first trace left: each still finds the events on both edges of the window. On Apache Kafka
/// every window comes from the broker's time index (`offsets_for_times`, checked), so what the
/// process remembers never costs a trace a probe more.
#[tokio::test]
async fn an_index_narrowed_by_earlier_traces_still_finds_the_windows_edges() {
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let margin = config.console.trace_margin.as_millis() as i64;
    let now = now_ms();
    let t = now - 3 * DAY_MS;
    let order = TracedOrder::new("20261127000000000edg".into());
    // The neighbour's window, [tn − margin, tn + 2 s + margin], ends at the order's start.
    let tn = t - 2 * margin - 2_000;
    let neighbour = TracedOrder::new("20261127000000000nbr".into());
    order.write_rows(&db, t).await;
    neighbour.write_rows(&db, tn).await;
    let mut out = filler(30_000, 6_000, now);
    out.extend(order.messages(t));
    out.extend(edge_events(&order, t, margin));
    out.extend(neighbour.messages(tn));
    produce(&config, "consistent_random", out);

    let r = headless::trace(&config, &TraceTarget::classify(&neighbour.order_no)).await;
    assert!(r.ok, "{}", r.failures());
    let mut probes = Vec::new();
    for _ in 0..2 {
        let r = headless::trace(&config, &TraceTarget::classify(&order.order_no)).await;
        assert!(r.ok, "{}", r.failures());
        assert_eq!(entries_at(&r, t - margin), 1, "the window's first ms");
        assert_eq!(
            entries_at(&r, t + 2_000 + margin),
            1,
            "the window's last ms"
        );
        let cost = r.data.read_cost.unwrap();
        for c in &cost.topics {
            assert_eq!(c.offset_lookup, "offsets_for_times", "{}", c.topic);
        }
        probes.push(cost.topics.iter().map(|c| c.offset_probes).sum::<u64>());
    }
    assert!(
        probes[1] <= probes[0],
        "probes of the two traces: {probes:?}"
    );
}

/// Deletes `names` and creates them again, empty (3 partitions): the same names, other topics.
async fn recreate_topics(config: &Config, names: &[String]) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(idemguard::console::read::topics::readers_closed(
        Duration::from_secs(10)
    ));
    for r in admin.delete_topics(&refs, &opts).await.unwrap() {
        r.unwrap_or_else(|(t, e)| panic!("cannot delete topic {t}: {e}"));
    }
    let topics: Vec<NewTopic> = names
        .iter()
        .map(|n| NewTopic::new(n, 3, TopicReplication::Fixed(1)))
        .collect();
    for _ in 0..50 {
        let created = admin.create_topics(&topics, &opts).await.unwrap();
        if created.iter().all(Result::is_ok) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("cannot create {names:?} again");
}

/// A topic deleted and created again under the same name, its offsets at other times: the index
/// the first topic's traces left points the search the wrong way, and the trace still reads
/// the right window (the order's messages, and its window's edges, are found).
#[tokio::test]
async fn a_topic_created_again_with_other_times_gives_the_right_window() {
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let margin = config.console.trace_margin.as_millis() as i64;
    let now = now_ms();
    let first = TracedOrder::new("20261127000000000fst".into());
    let t1 = now - 5 * DAY_MS;
    first.write_rows(&db, t1).await;
    let mut out = filler(20_000, 4_000, now);
    out.extend(first.messages(t1));
    produce(&config, "consistent_random", out);
    let r = headless::trace(&config, &TraceTarget::classify(&first.order_no)).await;
    assert!(r.ok, "{}", r.failures());
    assert_eq!(kafka_entries(&serde_json::to_value(&r).unwrap()["data"]), 1);

    let names = [
        config.kafka.payment_topic.clone(),
        config.kafka.trace_topic.clone(),
    ];
    recreate_topics(&config, &names).await;
    // The same seven days, the messages a tenth as many and crowded into its last day: every
    // offset the index knows now holds a message of another time.
    let second = TracedOrder::new("20261127000000000snd".into());
    let t2 = now - DAY_MS / 2;
    second.write_rows(&db, t2).await;
    let mut out: Vec<Out> = filler(20_000, 4_000, now)
        .into_iter()
        .step_by(10)
        .map(|mut m| {
            m.ts = now - DAY_MS + (m.ts - (now - 7 * DAY_MS)) / 7;
            m
        })
        .collect();
    out.extend(second.messages(t2));
    out.extend(edge_events(&second, t2, margin));
    produce(&config, "consistent_random", out);

    let r = headless::trace(&config, &TraceTarget::classify(&second.order_no)).await;
    assert!(r.ok, "{}", r.failures());
    let j = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(kafka_entries(&j), 1, "the payment message: {j:#}");
    assert_eq!(entries_at(&r, t2 - margin), 1, "the window's first ms");
    assert_eq!(
        entries_at(&r, t2 + 2_000 + margin),
        1,
        "the window's last ms"
    );
    // The first order's trace, on the new topics: nothing of it is there any more.
    let r = headless::trace(&config, &TraceTarget::classify(&first.order_no)).await;
    let j = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(kafka_entries(&j), 0, "{j:#}");
}

// ---------------------------------------------------------------------------------------------
// The database side stays index-only at scale
// ---------------------------------------------------------------------------------------------

/// Rows per order-sized table: enough that a planner with statistics prefers an index wherever
/// one serves, few enough to insert in a second or two.
const ROWS: i64 = 40_000;

/// Tables that grow with the orders (everything but the stock of a few SKUs and the schema
/// version): a full scan of one is a trace that slows down as the business grows.
const ORDER_SIZED: &[&str] = &[
    "idempotency_record",
    "order_record",
    "stock_movement",
    "payment_flow",
    "outbox",
    "points_ledger",
    "notification",
    "processed_event",
    "ops_audit",
];

/// `INSERT … SELECT` of [`ROWS`] rows per table, row `g` of every table belonging to order `g`
/// (`O{g}`, request `R{g}`, event `E{g}`), created one second apart.
fn bulk_inserts(dialect: Dialect) -> Vec<String> {
    let series = match dialect {
        Dialect::Postgres => format!("generate_series(1, {ROWS}) AS s(g)"),
        Dialect::Mysql => format!("(SELECT seq AS g FROM seq_1_to_{ROWS}) s"),
    };
    let t = "1700000000000 + g * 1000";
    let rows = [
        ("idempotency_record (request_id, biz_type, request_hash, status, order_no, owner, lease_until, created_at, updated_at, expire_at)",
         format!("CONCAT('R', g), 'ORDER', 'h', CASE WHEN g % 100 = 0 THEN 'PROCESSING' ELSE 'SUCCEEDED' END, CONCAT('O', g), 'api-1', {t}, {t}, {t}, {t} + 86400000")),
        ("order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, payment_event_id, created_at, updated_at)",
         format!("CONCAT('R', g), CONCAT('O', g), g, g % 50, 1, 1999, 'PAID', CONCAT('E', g), {t}, {t}")),
        ("stock_movement (order_no, req_id, sku_id, delta, created_at)",
         format!("CONCAT('O', g), CONCAT('R', g), g % 50, -1, {t}")),
        ("payment_flow (pay_no, order_no, amount, status, event_id, created_at)",
         format!("CONCAT('P', g), CONCAT('O', g), 1999, 'SUCCEEDED', CONCAT('E', g), {t}")),
        ("outbox (event_id, topic, msg_key, headers, payload, status, created_at, sent_at)",
         format!("CONCAT('E', g), 'payment.succeeded', CONCAT('O', g), '{{}}', '{{}}', 'SENT', {t}, {t}")),
        ("points_ledger (source_event_no, order_no, user_id, points, created_at)",
         format!("CONCAT('E', g), CONCAT('O', g), g, 19, {t}")),
        ("notification (event_id, order_no, user_id, channel, body, created_at)",
         format!("CONCAT('E', g), CONCAT('O', g), g, 'sms', 'paid', {t}")),
        ("processed_event (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at)",
         format!("'idemguard-payments', CONCAT('E', g), CONCAT('O', g), 'payment.succeeded', g % 3, g, 'applied', {t}, {t} + 86400000")),
        ("ops_audit (operator, environment, action, target, outcome, created_at)",
         format!("'ops', 'local', 'release_lock', CONCAT('lock:order:O', g), 'done', {t}")),
    ];
    rows.iter()
        .map(|(table, values)| format!("INSERT INTO {table} SELECT {values} FROM {series}"))
        .collect()
}

/// A value bound to a query under EXPLAIN.
#[derive(Clone, Copy)]
enum Bind {
    Text(&'static str),
    Int(i64),
}

/// The binds of each console and trace query, as the code binds them (IDs of row 20,000, times
/// inside the data). A query not listed here (the report's) binds integers only: times and a
/// limit, as many as its SQL names.
fn binds_of(name: &str) -> Option<Vec<Bind>> {
    use Bind::*;
    let (o, r, e) = (Text("O20000"), Text("R20000"), Text("E20000"));
    let t = Int(1_700_000_000_000 + 20_000_000);
    Some(match name {
        "console_trace_idempotency" | "console_trace_stock" => match name {
            "console_trace_stock" => vec![o, r],
            _ => vec![r, o],
        },
        "console_trace_order" => vec![r, o, e],
        "console_trace_payment"
        | "console_trace_outbox"
        | "console_trace_processed"
        | "console_trace_points"
        | "console_trace_notification" => vec![o, e],
        "console_stuck" => vec![Int(1_700_000_000_000 + 1_000_000), Int(1000)],
        "console_audit_list" => vec![t, Int(1_700_000_000_000 + 20_060_000), Int(200)],
        // Redrives since a time (the DLQ view's window); those of one DLQ message.
        "console_audit_redrives" => vec![t, Int(500)],
        "console_audit_live_redrives" => vec![Text("payment.succeeded.dlq@0:20000"), Int(0)],
        "console_finalize_lock_record"
        | "console_finalize_foreign_get"
        | "console_finalize_foreign_order" => vec![r],
        // The last is the version seen (the team's version column, when it keeps one).
        "console_finalize_foreign_succeeded" | "console_finalize_foreign_failed" => {
            vec![Int(422), Text("{}"), r, t, Int(0)]
        }
        "console_finalize" => vec![
            Text("FAILED"),
            Int(422),
            Text("{}"),
            Text("O20000"),
            t,
            t,
            Text("R20000"),
            Int(0),
        ],
        "console_lock_token_requests" => vec![Text(r#"["R20000", "R20001"]"#)],
        "console_audit_outcome" => vec![Text("{}"), Text("done"), Text(""), Int(20_000)],
        _ => return None,
    })
}

/// How many parameters a statement takes: `$n` (PostgreSQL) or `?` (MySQL).
fn parameter_count(sql: &str, dialect: Dialect) -> usize {
    match dialect {
        Dialect::Postgres => (1..=40)
            .take_while(|n| sql.contains(&format!("${n}")))
            .count(),
        Dialect::Mysql => sql.matches('?').count(),
    }
}

/// The plan's full scans of order-sized tables, one line each.
async fn full_scans(db: &Database, dialect: Dialect, sql: &str, binds: Vec<Bind>) -> Vec<String> {
    use sqlx::Row;
    let explain = format!("EXPLAIN {sql}");
    let mut q = sqlx::query(&explain);
    for b in binds {
        q = match b {
            Bind::Text(s) => q.bind(s),
            Bind::Int(i) => q.bind(i),
        };
    }
    let rows = q
        .fetch_all(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    let mut scans = Vec::new();
    for row in rows {
        match dialect {
            Dialect::Postgres => {
                let line: String = row.try_get(0).unwrap();
                let seq = line.contains("Seq Scan on ");
                if seq
                    && ORDER_SIZED
                        .iter()
                        .any(|t| line.contains(&format!("Seq Scan on {t}")))
                {
                    scans.push(line.trim().to_string());
                }
            }
            Dialect::Mysql => {
                let table: Option<String> = row.try_get("table").unwrap();
                let access: Option<String> = row.try_get("type").unwrap();
                let table = table.unwrap_or_default();
                let extra: Option<String> = row.try_get("Extra").ok().flatten();
                // `ALL` reads every row, `index` every index entry: both grow with the table.
                // Derived and union results (`<union1,2>`) are not tables, nor is a JSON_TABLE
                // of the bound values (its rows are the statement's own parameters).
                let full = matches!(access.as_deref(), Some("ALL") | Some("index"));
                let bound = extra.is_some_and(|e| e.contains("Table function"));
                if full && !table.starts_with('<') && !bound {
                    let rows: Option<i64> = row.try_get("rows").ok().flatten();
                    scans.push(format!("{table}: type {access:?}, rows {rows:?}"));
                }
            }
        }
    }
    scans
}

/// EXPLAIN of every console, trace and report query over [`ROWS`] rows per table: none reads
/// an order-sized table whole.
async fn console_queries_are_index_only(dialect: Dialect) {
    let (_config, db) = common::migrated_database(dialect).await;
    let started = std::time::Instant::now();
    for sql in bulk_inserts(dialect) {
        sqlx::query(&sql)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for t in ORDER_SIZED {
        let analyze = match dialect {
            Dialect::Postgres => format!("ANALYZE {t}"),
            Dialect::Mysql => format!("ANALYZE TABLE {t}"),
        };
        sqlx::query(&analyze).execute(&db.pool).await.unwrap();
    }
    eprintln!(
        "{dialect}: {ROWS} rows × {} tables in {:?}",
        ORDER_SIZED.len(),
        started.elapsed()
    );
    let names = idemguard::db::queries::BUILTIN
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|n| n.starts_with("console_") || n.starts_with("report_"))
        // A session setting and an INSERT: nothing to scan.
        .filter(|n| {
            *n != "console_finalize_lock_wait"
                && *n != "console_audit_attempt"
                && *n != "console_audit_table"
        });
    let mut failures = Vec::new();
    let mut explained = 0;
    for name in names {
        let sql = db.sql(name).to_string();
        let binds = binds_of(name).unwrap_or_else(|| {
            let n = parameter_count(&sql, dialect);
            (0..n)
                .map(|i| Bind::Int(1_700_000_000_000 + 20_000_000 + i as i64))
                .collect()
        });
        explained += 1;
        for scan in full_scans(&db, dialect, &sql, binds).await {
            failures.push(format!("{name}: {scan}"));
        }
    }
    assert!(explained >= 14, "{explained} queries explained");
    assert!(
        failures.is_empty(),
        "{dialect}: full scans of order-sized tables:\n{}",
        failures.join("\n")
    );
}

per_dialect!(console_queries_are_index_only => console_queries_are_index_only_postgres, console_queries_are_index_only_mysql);

/// The Rates view drawn as text.
fn rates_screen(app: &mut idemguard::console::tui::app::App) -> String {
    use ratatui::{backend::TestBackend, Terminal};
    app.ui.view = idemguard::console::tui::keymap::View::Rates;
    app.ui.size = (170, 40);
    app.refresh_views();
    let mut t = Terminal::new(TestBackend::new(170, 40)).unwrap();
    t.draw(|f| idemguard::console::tui::ui::draw(f, app))
        .unwrap();
    let buf = t.backend().buffer().clone();
    (0..buf.area.height)
        .map(|y| {
            let line: String = (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            line.trim_end().to_string() + "\n"
        })
        .collect()
}

/// The console's live readers start at the last hour of each topic: with seven days
/// of older events on the topics, they read only the hour's — the count each reader scanned —
/// and the rates are the hour's. Until the hour is read, the Rates view and the Overview say it
/// is being read, never a 0 that looks like "nothing happened".
#[tokio::test]
async fn the_live_readers_read_only_the_last_hour_and_say_so_until_they_have() {
    use idemguard::console::tui::app::App;
    use idemguard::console::tui::backend::{Backends, CatchUp, TopicProgress, Update};
    let (config, _db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let (old_events, hour_events, old_payments, hour_payments) = (2_000, 400, 600, 150);
    // Seven days before the last two hours, then the last hour (10 to 50 minutes ago).
    let mut out = filler(old_events, old_payments, now - 2 * 3_600_000);
    for i in 0..hour_events {
        let ts = now - 50 * 60_000 + (40 * 60_000) * i as i64 / hour_events as i64;
        let e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .order_no(format!("H{i:019}"))
            .request_id(format!("APP:ORDER:20261201:hour-{i}"));
        out.push(trace_event(e, ts));
    }
    for i in 0..hour_payments {
        let ts = now - 50 * 60_000 + (40 * 60_000) * i as i64 / hour_payments as i64;
        let event = uuid::Uuid::new_v4().to_string();
        out.push(payment_message(
            &format!("J{i:019}"),
            "APP:ORDER:20261201:j",
            &event,
            ts,
        ));
    }
    produce(&config, "consistent_random", out);

    let backends = Backends::spawn(&config);
    let mut app = App::new(&config, Some(backends.focus.clone()));
    let mut b = backends;
    // Nothing read yet: the view says it is reading, with no count.
    let s = rates_screen(&mut app);
    assert!(
        s.contains("reading the last 60 minutes of the trace topic"),
        "{s}"
    );
    assert!(
        !s.contains("interceptions in the last 60 minutes: 0"),
        "{s}"
    );
    let overview: Vec<String> = app.findings().into_iter().map(|f| f.text).collect();
    assert!(
        overview
            .iter()
            .any(|l| l.contains("reading the last 60 minutes")),
        "{overview:#?}"
    );
    assert!(
        !overview
            .iter()
            .any(|l| l.contains("no duplicate intercepted")),
        "{overview:#?}"
    );

    // Read to the tail of the hour on both topics.
    let done = |p: &Option<TopicProgress>| p.as_ref().and_then(|p| p.catch_up).filter(|c| c.done);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done(&app.stores.trace_topic).is_none() || done(&app.stores.payment_topic).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the live readers did not catch up: {:?} {:?}",
            app.stores.trace_topic,
            app.stores.payment_topic
        );
        if let Ok(Some(u)) =
            tokio::time::timeout(Duration::from_millis(200), b.updates.recv()).await
        {
            app.apply(u);
        }
    }
    // What the readers sent before they said they were done has been applied.
    while let Ok(u) = b.updates.try_recv() {
        app.apply(u);
    }
    let trace = done(&app.stores.trace_topic).unwrap();
    let payments = done(&app.stores.payment_topic).unwrap();
    assert_eq!(
        trace.scanned, hour_events as u64,
        "trace messages scanned: {trace:?}"
    );
    assert_eq!(trace.to_read, hour_events as u64);
    assert_eq!(
        payments.scanned, hour_payments as u64,
        "payment messages scanned: {payments:?}"
    );
    let rates = app.stores.trace_log.rates(now_ms());
    let replays: u64 = rates.series.iter().map(|s| s.total).sum();
    assert_eq!(replays, hour_events as u64);
    let s = rates_screen(&mut app);
    assert!(
        s.contains(&format!("{hour_events} trace events read"))
            && s.contains(&format!(
                "interceptions in the last 60 minutes: {hour_events}"
            )),
        "{s}"
    );
    assert!(!s.contains("reading the last 60 minutes"), "{s}");

    // A catch-up under way (as on a topic of millions): the progress, and no count.
    let mut progress = app.stores.trace_topic.clone().unwrap();
    progress.catch_up = Some(CatchUp {
        scanned: 10,
        to_read: 400,
        done: false,
    });
    app.apply(Update::TraceTopic(Ok(progress)));
    let s = rates_screen(&mut app);
    assert!(s.contains("10 of 400 messages (2%)"), "{s}");
    assert!(!s.contains("interceptions in the last 60 minutes:"), "{s}");
    b.shutdown().await;
}

/// The trace view drawn as text (the trace's status line is the summary's bottom border).
fn trace_screen(app: &mut idemguard::console::tui::app::App) -> String {
    use ratatui::{backend::TestBackend, Terminal};
    app.ui.size = (170, 40);
    app.refresh_views();
    let mut t = Terminal::new(TestBackend::new(170, 40)).unwrap();
    t.draw(|f| idemguard::console::tui::ui::draw(f, app))
        .unwrap();
    let buf = t.backend().buffer().clone();
    (0..buf.area.height)
        .map(|y| {
            let line: String = (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            line.trim_end().to_string() + "\n"
        })
        .collect()
}

/// The TUI's `:trace` of an order three and a half days old (older than the live readers'
/// hour) reads the windows its database rows name, not the topics: it finds the order's Kafka
/// side, scans a few dozen of the 36,000 messages, and its status line says what it read.
#[tokio::test]
async fn the_tuis_trace_of_an_old_order_reads_only_its_windows_and_says_so() {
    use idemguard::console::tui::app::App;
    use idemguard::console::tui::backend::Backends;
    let (config, db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let t = now - 7 * DAY_MS / 2;
    let order = TracedOrder::new("20261126000000000tui".into());
    order.write_rows(&db, t).await;
    let mut out = filler(30_000, 6_000, now);
    out.extend(order.messages(t));
    produce(&config, "consistent_random", out);

    let mut b = Backends::spawn(&config);
    let mut app = App::new(&config, Some(b.focus.clone()));
    app.trace(&order.order_no);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let cost = loop {
        if let Some((_, Some(cost))) = &app.stores.trace_read {
            break cost.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the trace's windows were not read: {:?}",
            app.stores.trace_read
        );
        if let Ok(Some(u)) =
            tokio::time::timeout(Duration::from_millis(200), b.updates.recv()).await
        {
            app.apply(u);
        }
    };
    while let Ok(u) = b.updates.try_recv() {
        app.apply(u);
    }
    assert_eq!(cost.topics.len(), 2, "{cost:?}");
    // The progress the status line showed while reading ends at what the read scanned.
    assert_eq!(app.stores.trace_read_scanned, cost.messages_scanned());
    for c in &cost.topics {
        assert_eq!(c.basis, WindowBasis::DatabaseTimes, "{c:?}");
        // 20 minutes of 30,000 events in 7 days are ~60 events over 3 partitions.
        assert!(c.messages_scanned <= 100, "{c:?}");
        assert!(c.partitions_read.len() < c.partitions_total, "{c:?}");
    }
    let timeline = app.timeline().expect("a timeline");
    let kafka = timeline
        .entries
        .iter()
        .filter(|e| e.layer == "kafka")
        .count();
    assert_eq!(kafka, 1, "the payment message of 3.5 days ago is found");
    let s = trace_screen(&mut app);
    let line = s
        .lines()
        .find(|l| l.contains(" read: "))
        .unwrap_or_else(|| panic!("no status line of the read:\n{s}"));
    let trace = &cost.topics[1];
    assert!(
        line.contains(&format!(
            "trace {} msgs in 1 window, {}/3 partitions",
            trace.messages_scanned,
            trace.partitions_read.len()
        )),
        "{line}"
    );
    assert!(line.contains("payments "), "{line}");
    b.shutdown().await;
}

/// `idemguard rates` reads the trace topic's last hour once, found by time — not the seven days
/// before it — and says what it scanned.
#[tokio::test]
async fn rates_read_only_the_last_hour() {
    let (config, _db) = world(Partitioner::ConsistentRandom).await;
    let now = now_ms();
    let hour_events = 300;
    // Seven days ending two hours ago, then the last hour (10 to 50 minutes ago).
    let mut out = filler(14_000, 0, now - 2 * 3_600_000);
    for i in 0..hour_events {
        let ts = now - 50 * 60_000 + (40 * 60_000) * i as i64 / hour_events as i64;
        let e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .order_no(format!("H{i:019}"))
            .request_id(format!("APP:ORDER:20261201:hour-{i}"));
        out.push(trace_event(e, ts));
    }
    produce(&config, "consistent_random", out);

    let r = headless::rates(&config).await;
    assert!(r.ok, "{}", r.failures());
    assert_eq!(r.data.rates.events_seen, hour_events as u64);
    let cost = r
        .data
        .read_cost
        .clone()
        .expect("the rates say what they read");
    assert_eq!(cost.basis, WindowBasis::ExplicitWindow);
    assert_eq!(cost.messages_scanned, hour_events as u64, "{cost:?}");
    let table = headless::rates_table(&r);
    assert!(
        table.contains(&format!(
            "{hour_events} message(s) scanned, its last hour only"
        )),
        "{table}"
    );
}
