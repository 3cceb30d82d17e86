//! Line of defense 3 against the real broker and both databases: duplicates delivered by Kafka
//! (re-produced events, rewound offsets, a crash between the database commit and the offset
//! commit, a rebalance) change nothing; poison goes to the DLQ without stalling the partition.

use crate::common;
use crate::common::first_contact;
use crate::support::java_kafka;

use std::time::{Duration, Instant};

use common::consumer::*;
use common::*;
use first_contact::{crc32_partition, murmur2_partition};
use idemguard::config::{Config, Dialect};
use idemguard::contracts::{new_event_id, OrderNo, PaymentSucceeded};
use idemguard::stream::lag::consumer_lag;
use idemguard::stream::ConsumeStats;
use java_kafka::{JavaPaymentProducer, Keying};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

async fn produce_raw(p: &FutureProducer, topic: &str, key: &str, body: &[u8]) {
    p.send(
        FutureRecord::to(topic).key(key).payload(body),
        Duration::from_secs(10),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
}

/// Waits (bounded) until `check` holds.
async fn eventually<F, Fut>(what: &str, secs: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn one_event_five_times(dialect: Dialect) {
    let s = consumer_setup(dialect).await;
    let (order_no, req) = create_order(&s.db, 7).await;
    let e = payment(&order_no, &req, 7);
    let p = producer(&s.config);
    for _ in 0..5 {
        produce(&p, &s.config.kafka.payment_topic, &e).await;
    }
    let run = s.start_member().await;
    let stats = run.stats.clone();
    eventually("5 messages handled", 60, || {
        let st = stats.clone();
        async move { ConsumeStats::get(&st.applied) + ConsumeStats::get(&st.dedup_hits) >= 5 }
    })
    .await;
    let stats = run.stop().await;
    assert_eq!(ConsumeStats::get(&stats.applied), 1, "{dialect}");
    assert_eq!(
        ConsumeStats::get(&stats.dedup_hits),
        4,
        "{dialect}: four copies stopped by the dedup state"
    );
    assert_eq!(count(&s.db, &format!("order_record WHERE order_no = '{order_no}' AND status = 'PAID' AND payment_event_id = '{}'", e.event_id)).await, 1);
    assert_eq!(count(&s.db, "points_ledger").await, 1, "{dialect}");
    assert_eq!(count(&s.db, "notification").await, 1, "{dialect}");
    assert_eq!(count(&s.db, "processed_event").await, 1, "{dialect}");
}

per_dialect!(one_event_five_times => one_event_produced_five_times_postgres, one_event_produced_five_times_mysql);

/// Moves the group's committed offsets back to the start of every partition (the group must
/// have no live member, as when an operator rewinds it).
fn rewind(config: &Config, group: &str) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&config.kafka.payment_topic, p, Offset::Offset(0))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync)
        .expect("rewind the group's offsets");
}

async fn committed_total(config: &Config, group: &str) -> i64 {
    let (kafka, topic, group) = (
        config.kafka.clone(),
        config.kafka.payment_topic.clone(),
        group.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        consumer_lag(&kafka, &group, &topic, Duration::from_secs(10)).unwrap()
    })
    .await
    .unwrap()
    .iter()
    .map(|p| p.committed.unwrap_or(0))
    .sum()
}

async fn rewound_offsets_change_nothing(dialect: Dialect) {
    let s = consumer_setup(dialect).await;
    let p = producer(&s.config);
    let mut orders = Vec::new();
    for i in 0..1000 {
        orders.push(create_order(&s.db, i).await);
    }
    let sends = orders.iter().enumerate().map(|(i, (o, r))| {
        let (p, topic, e) = (
            p.clone(),
            s.config.kafka.payment_topic.clone(),
            payment(o, r, i as i64),
        );
        async move { produce(&p, &topic, &e).await }
    });
    futures::future::join_all(sends).await;

    let run = s.start_member().await;
    let stats = run.stats.clone();
    eventually("1000 events applied", 120, || {
        let st = stats.clone();
        async move { ConsumeStats::get(&st.applied) >= 1000 }
    })
    .await;
    let first = run.stop().await;
    assert_eq!(ConsumeStats::get(&first.applied), 1000);
    assert_eq!(
        committed_total(&s.config, &s.group).await,
        1000,
        "every offset committed after its batch"
    );

    rewind(&s.config, &s.group);
    assert_eq!(committed_total(&s.config, &s.group).await, 0);
    let run = s.start_member().await;
    let stats = run.stats.clone();
    eventually("1000 redelivered events handled", 120, || {
        let st = stats.clone();
        async move { ConsumeStats::get(&st.received) >= 1000 }
    })
    .await;
    let second = run.stop().await;
    assert_eq!(
        ConsumeStats::get(&second.applied),
        0,
        "{dialect}: a rewound replay applied something"
    );
    assert_eq!(
        ConsumeStats::get(&second.dedup_hits),
        1000,
        "{dialect}: the persisted dedup state caught every replay after a restart"
    );
    for table in ["points_ledger", "notification", "processed_event"] {
        assert_eq!(count(&s.db, table).await, 1000, "{dialect}: {table}");
    }
    assert_eq!(
        count(&s.db, "order_record WHERE status = 'PAID'").await,
        1000
    );

    // The dedup state lost (memory gone with the consumer, processed_event emptied behind its
    // back): the next line of defense, each sink's unique key, still stops every replay.
    sqlx::query("DELETE FROM processed_event")
        .execute(&s.db.pool)
        .await
        .unwrap();
    rewind(&s.config, &s.group);
    let run = s.start_member().await;
    eventually("1000 replays handled by the sinks", 120, || {
        let db = s.db.clone();
        async move { count(&db, "processed_event").await >= 1000 }
    })
    .await;
    let third = run.stop().await;
    assert_eq!(
        ConsumeStats::get(&third.applied),
        0,
        "{dialect}: a sink applied a replay twice"
    );
    assert_eq!(ConsumeStats::get(&third.dedup_hits), 0);
    // order (already PAID by this event) + points + notification, for each of the 1000.
    assert_eq!(ConsumeStats::get(&third.sink_duplicates), 3000, "{dialect}");
    for table in ["points_ledger", "notification"] {
        assert_eq!(count(&s.db, table).await, 1000, "{dialect}: {table}");
    }
}

per_dialect!(rewound_offsets_change_nothing => rewound_offsets_change_nothing_postgres, rewound_offsets_change_nothing_mysql);

async fn crash_between_db_commit_and_offset_commit(dialect: Dialect) {
    let s = consumer_setup(dialect).await;
    let p = producer(&s.config);
    for i in 0..20 {
        let (o, r) = create_order(&s.db, i).await;
        produce(&p, &s.config.kafka.payment_topic, &payment(&o, &r, i)).await;
    }
    // The real binary, killed by its own fault injection right after the first batch's
    // database commit and before its offset commit.
    let out = s
        .consume_command(&["--crash-after-db-commit", "1"])
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the consumer crashed within 60s")
        .unwrap();
    assert!(
        !out.status.success(),
        "the consumer was meant to abort: {out:?}"
    );
    let applied_before = count(&s.db, "points_ledger").await;
    assert!(
        applied_before > 0,
        "{dialect}: the crashed batch had committed to the database"
    );
    assert_eq!(
        committed_total(&s.config, &s.group).await,
        0,
        "{dialect}: no offset was committed before the crash"
    );

    // Restarted: the whole batch is redelivered; it changes nothing, the rest is applied once.
    let run = s.start_member().await;
    let stats = run.stats.clone();
    eventually("all 20 handled after restart", 60, || {
        let st = stats.clone();
        async move { ConsumeStats::get(&st.received) >= 20 }
    })
    .await;
    let after = run.stop().await;
    assert_eq!(
        ConsumeStats::get(&after.dedup_hits) as i64,
        applied_before,
        "{dialect}: each redelivered event was a dedup hit"
    );
    assert_eq!(
        ConsumeStats::get(&after.applied) as i64,
        20 - applied_before
    );
    for table in ["points_ledger", "notification", "processed_event"] {
        assert_eq!(count(&s.db, table).await, 20, "{dialect}: {table}");
    }
}

per_dialect!(crash_between_db_commit_and_offset_commit => crash_between_db_and_offset_commit_postgres, crash_between_db_and_offset_commit_mysql);

#[tokio::test]
async fn two_consumers_one_stopped_mid_stream_apply_each_event_once() {
    let s = consumer_setup(Dialect::Postgres).await;
    let p = producer(&s.config);
    let mut orders = Vec::new();
    for i in 0..600 {
        orders.push((create_order(&s.db, i).await, i));
    }
    let topic = s.config.kafka.payment_topic.clone();
    for ((o, r), i) in &orders[..300] {
        produce(&p, &topic, &payment(o, r, *i)).await;
    }
    let a = s.start_member().await;
    let b = s.start_member().await;
    let (sa, sb) = (a.stats.clone(), b.stats.clone());
    eventually("consumption under way", 90, || {
        let (sa, sb) = (sa.clone(), sb.clone());
        async move { ConsumeStats::get(&sa.applied) + ConsumeStats::get(&sb.applied) >= 100 }
    })
    .await;
    let a_stats = a.stop().await; // mid-stream: its partitions move to b
    for ((o, r), i) in &orders[300..] {
        produce(&p, &topic, &payment(o, r, *i)).await;
    }
    eventually("all 600 applied across both", 120, || {
        let db = s.db.clone();
        async move { count(&db, "points_ledger").await >= 600 }
    })
    .await;
    let b_stats = b.stop().await;
    let applied = ConsumeStats::get(&a_stats.applied) + ConsumeStats::get(&b_stats.applied);
    assert_eq!(
        applied, 600,
        "each event applied exactly once across both consumers (a {:?}, b {:?})",
        a_stats, b_stats
    );
    for table in ["points_ledger", "notification", "processed_event"] {
        assert_eq!(count(&s.db, table).await, 600, "{table}");
    }
    assert_eq!(
        count(&s.db, "order_record WHERE status = 'PAID'").await,
        600
    );
}

#[tokio::test]
async fn malformed_message_goes_to_the_dlq_and_the_next_is_processed() {
    let s = consumer_setup(Dialect::Mysql).await;
    let p = producer(&s.config);
    let topic = s.config.kafka.payment_topic.clone();
    // All on one key → one partition, in order: poison first, then a good event.
    let (o, r) = create_order(&s.db, 1).await;
    produce_raw(&p, &topic, &o, b"{not json").await;
    produce_raw(&p, &topic, &o, br#"{"event_id":"x"}"#).await;
    let unknown = payment(&OrderNo::generate().to_string(), &r, 1);
    produce(
        &p,
        &topic,
        &PaymentSucceeded {
            order_no: o.clone(),
            ..unknown.clone()
        },
    )
    .await; // header/body agree, order exists: fine
    let ghost = PaymentSucceeded {
        order_no: "20260101000000000ffffffffffff".into(),
        event_id: new_event_id(),
        ..unknown
    };
    produce(&p, &topic, &ghost).await; // unknown order
    let run = s.start_member().await;
    let stats = run.stats.clone();
    eventually("3 to the DLQ and 1 applied", 60, || {
        let st = stats.clone();
        async move { ConsumeStats::get(&st.dlq) >= 3 && ConsumeStats::get(&st.applied) >= 1 }
    })
    .await;
    let stats = run.stop().await;
    assert_eq!(ConsumeStats::get(&stats.dlq), 3);
    assert_eq!(ConsumeStats::get(&stats.applied), 1);
    assert_eq!(
        count(
            &s.db,
            &format!("order_record WHERE order_no = '{o}' AND status = 'PAID'")
        )
        .await,
        1
    );
    assert_eq!(
        committed_total(&s.config, &s.group).await,
        4,
        "poison is committed too: it never stalls the partition"
    );

    // Read the DLQ back: the reasons and the original positions.
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &s.config.kafka.bootstrap_servers)
        .set("group.id", format!("dlq-reader-{}", unique_suffix()))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&[&s.config.kafka.dlq_topic]).unwrap();
    let mut reasons = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while reasons.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "DLQ messages not read back: {reasons:?}"
        );
        if let Some(Ok(m)) = c.poll(Duration::from_millis(300)) {
            let h = m.headers().unwrap();
            let get = |k: &str| {
                h.iter()
                    .find(|x| x.key == k)
                    .and_then(|x| x.value)
                    .map(|v| String::from_utf8_lossy(v).to_string())
            };
            assert_eq!(get("dlq.source.topic").as_deref(), Some(topic.as_str()));
            assert!(get("dlq.source.offset").is_some() && get("dlq.source.partition").is_some());
            reasons.push(get("dlq.reason").unwrap());
        }
    }
    reasons.sort();
    // The reasons speak of the payload: serde_json's "key must be a string" read like the Kafka key.
    assert!(
        reasons
            .iter()
            .any(|r| r == "payload is not JSON (invalid at line 1 column 2 of the payload)"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("unknown order 20260101000000000ffffffffffff")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("payload is JSON but not a payment event: missing field")),
        "{reasons:?}"
    );
}

/// idemguard's own producers put a key where `kafka.partitioner` says, so a trace that reads
/// only a key's partition finds what they wrote: forty orderNos under each partitioner, each
/// delivered to the partition the trace computes for it, on the real broker.
#[tokio::test]
async fn own_producers_put_each_key_where_the_configured_partitioner_says() {
    use idemguard::config::Partitioner;
    for partitioner in [Partitioner::ConsistentRandom, Partitioner::Murmur2Random] {
        let mut config = local_config();
        let topics = fresh_topics(&config, &["payment.succeeded"]).await;
        config.kafka.partitioner = partitioner;
        let producer: FutureProducer = idemguard::kafka_client::producer_config(&config.kafka)
            .create()
            .unwrap();
        for i in 0..40 {
            let key = format!("2026120714{i:02}00000000000000000000");
            let partition = producer
                .send(
                    FutureRecord::to(&topics[0]).key(&key).payload("{}"),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap()
                .partition;
            assert_eq!(
                Some(partition),
                partitioner.partition_of(key.as_bytes(), 3),
                "{} put {key} elsewhere",
                partitioner.name()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A team's payment service publishing with the Java client
// ---------------------------------------------------------------------------------------------

/// `idemguard trace` and `dlq` on the test's database and topics (no trace topic: a team's
/// system has none), configured for producers that partition as the Java client does.
fn murmur2_source(s: &ConsumerSetup) -> Vec<(String, String)> {
    let kafka = &s.config.kafka;
    [
        ("IDEMGUARD_DATABASE__URL", s.config.database.url.as_str()),
        ("IDEMGUARD_KAFKA__PAYMENT_TOPIC", &kafka.payment_topic),
        ("IDEMGUARD_KAFKA__DLQ_TOPIC", &kafka.dlq_topic),
        ("IDEMGUARD_KAFKA__TRACE_TOPIC", ""),
        ("IDEMGUARD_KAFKA__PARTITIONER", "murmur2_random"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec()
}

/// `idemguard ARGS --json` as [`murmur2_source`] configures it; the document.
fn idemguard_json(s: &ConsumerSetup, args: &[&str]) -> serde_json::Value {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let (_, out, err) = first_contact::run(Some(&config), &murmur2_source(s), &args);
    serde_json::Deserializer::from_str(&out)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON document from {args:?}: {out}{err}"))
}

fn json_lines(events: &[&PaymentSucceeded]) -> Vec<String> {
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

/// The payment topic's read of a trace: (partitions read, why every partition was read).
fn payment_read(trace: &serde_json::Value, topic: &str) -> (Vec<i64>, Option<String>) {
    let topics = trace["data"]["read_cost"]["topics"].as_array().unwrap();
    let read = topics
        .iter()
        .find(|t| t["topic"] == topic)
        .unwrap_or_else(|| panic!("the trace did not read {topic}: {trace:#}"));
    let partitions = read["partitions_read"].as_array().unwrap();
    (
        partitions.iter().map(|p| p.as_i64().unwrap()).collect(),
        read["partitions_widened"].as_str().map(str::to_string),
    )
}

/// Four orders (or more, see below) paid by the team's Java producer (key = orderNo, murmur2), each event twice in
/// one gzip batch, once in lz4 and once in zstd, and a poison event of the team's (a negative
/// amount) in the lz4 run: each event applied once, the poison dead-lettered, every batch on the
/// broker compressed as asked by an idempotent producer. The events.
async fn keyed_events_through_java(
    s: &ConsumerSetup,
    java: &JavaPaymentProducer,
) -> Vec<PaymentSucceeded> {
    let d = s.dialect;
    let (servers, topic) = (
        &s.config.kafka.bootstrap_servers,
        &s.config.kafka.payment_topic,
    );
    // At least one order that librdkafka's crc32 puts elsewhere: a consumer or a trace that
    // partitioned as librdkafka does would look in the wrong partition for it.
    let mut events = Vec::new();
    while events.len() < 4
        || events.iter().all(|e: &PaymentSucceeded| {
            crc32_partition(&e.order_no) == murmur2_partition(&e.order_no)
        })
    {
        let (o, r) = create_order(&s.db, events.len() as i64).await;
        events.push(payment(&o, &r, events.len() as i64));
    }
    let (poison_order, r) = create_order(&s.db, 99).await;
    let poison = PaymentSucceeded {
        amount: -1,
        ..payment(&poison_order, &r, 99)
    };
    let once: Vec<&PaymentSucceeded> = events.iter().collect();
    let runs = [
        ("gzip", [&once[..], &once[..]].concat()),
        ("lz4", [&once[..], &[&poison]].concat()),
        ("zstd", once.clone()),
    ];
    for (codec, sent) in &runs {
        let acked = java
            .send(servers, topic, codec, Keying::ByOrderNo, &json_lines(sent))
            .await;
        for (e, a) in sent.iter().zip(&acked) {
            assert_eq!(
                a.partition,
                murmur2_partition(&e.order_no),
                "{d}, {codec}: Java's partitioner put {} elsewhere than idemguard's murmur2 says",
                e.order_no
            );
        }
    }

    // Four orders, or more when the first four all fall where crc32 puts them too: each sent
    // four times, and the poison once.
    let n = events.len() as u64;
    let copies = 4 * n + 1;
    let member = s.start_member().await;
    member
        .until("every copy handled", 60, |st| {
            get(&st.applied) + get(&st.dedup_hits) + get(&st.dlq) >= copies
        })
        .await;
    let stats = member.stop().await;
    assert_eq!(get(&stats.applied), n, "{d}: {stats:?}");
    assert_eq!(
        get(&stats.dedup_hits),
        3 * n,
        "{d}: three copies of each stopped"
    );
    assert_eq!(get(&stats.dlq), 1, "{d}: {stats:?}");
    for e in &events {
        let paid = format!(
            "order_record WHERE order_no = '{}' AND status = 'PAID' AND payment_event_id = '{}'",
            e.order_no, e.event_id
        );
        assert_eq!(count(&s.db, &paid).await, 1, "{d}: {}", e.order_no);
    }
    for table in ["points_ledger", "notification"] {
        assert_eq!(count(&s.db, table).await, n as i64, "{d}: {table}");
    }
    let unpaid = format!("order_record WHERE order_no = '{poison_order}' AND status = 'CREATED'");
    assert_eq!(
        count(&s.db, &unpaid).await,
        1,
        "{d}: the poison paid nothing"
    );

    // The broker holds what Java wrote: every batch compressed as asked, by an idempotent
    // producer (a producer id), the gzip run's duplicates inside one batch per partition.
    let batches = java_kafka::batches_on_broker(topic);
    let codecs: std::collections::BTreeSet<&str> =
        batches.iter().map(|b| b.codec.as_str()).collect();
    assert_eq!(codecs, ["gzip", "lz4", "zstd"].into(), "{batches:?}");
    assert!(batches.iter().all(|b| b.producer_id >= 0), "{batches:?}");
    assert_eq!(
        batches.iter().map(|b| b.records).sum::<usize>() as u64,
        copies,
        "{batches:?}"
    );

    // The poison, in the DLQ as an operator lists it, with the IDs of Java's headers.
    let dlq = idemguard_json(s, &["dlq"]);
    let listed = dlq["data"]["messages"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{dlq:#}");
    assert_eq!(listed[0]["reason"], "negative amount -1", "{dlq:#}");
    assert_eq!(listed[0]["order_no"], poison_order.as_str(), "{dlq:#}");
    assert_eq!(listed[0]["event_id"], poison.event_id.as_str(), "{dlq:#}");
    assert_eq!(listed[0]["source"]["topic"], topic.as_str(), "{dlq:#}");
    assert_eq!(
        listed[0]["source"]["partition"],
        murmur2_partition(&poison_order),
        "{dlq:#}"
    );
    events
}

/// `trace ORDER` with `kafka.partitioner = "murmur2_random"` reads the one partition the Java
/// client chose for the order, and finds every copy there.
fn trace_reads_the_java_partition(s: &ConsumerSetup, e: &PaymentSucceeded, copies: usize) {
    let topic = &s.config.kafka.payment_topic;
    let t = idemguard_json(s, &["trace", &e.order_no]);
    let p = murmur2_partition(&e.order_no);
    assert_eq!(
        payment_read(&t, topic),
        (vec![i64::from(p)], None),
        "{}: the trace read other partitions than murmur2's p{p}: {t:#}",
        e.order_no
    );
    let sources: Vec<&str> = first_contact::entries(&t, "kafka")
        .iter()
        .filter_map(|k| k["source"].as_str())
        .filter(|src| src.starts_with(topic.as_str()))
        .collect();
    assert_eq!(sources.len(), copies, "{}: {t:#}", e.order_no);
    assert!(
        sources
            .iter()
            .all(|src| src.starts_with(&format!("{topic} p{p}@"))),
        "{sources:?}"
    );
    let effects = &t["data"]["events"];
    assert_eq!(effects[0]["event_id"], e.event_id.as_str(), "{t:#}");
    assert_eq!(effects[0]["kafka_copies"], copies, "{t:#}");
    assert_eq!(effects[0]["processed_rows"], 1, "{t:#}");
}

/// The same events sent again without a key (zstd), and an order paid only by unkeyed copies:
/// every copy of a known event is a dedup hit, the new event is applied once, and its trace
/// reads every partition because the copies it scanned have no key — and finds both.
async fn unkeyed_copies_through_java(
    s: &ConsumerSetup,
    java: &JavaPaymentProducer,
    events: &[PaymentSucceeded],
) {
    let d = s.dialect;
    let (servers, topic) = (
        &s.config.kafka.bootstrap_servers,
        &s.config.kafka.payment_topic,
    );
    let (o, r) = create_order(&s.db, 100).await;
    let unkeyed = payment(&o, &r, 100);
    let sent: Vec<&PaymentSucceeded> = [&unkeyed, &unkeyed].into_iter().chain(events).collect();
    java.send(servers, topic, "zstd", Keying::None, &json_lines(&sent))
        .await;
    let member = s.start_member().await;
    member
        .until("6 unkeyed copies handled", 60, |st| {
            get(&st.applied) + get(&st.dedup_hits) >= 6
        })
        .await;
    let stats = member.stop().await;
    assert_eq!(get(&stats.applied), 1, "{d}: {stats:?}");
    assert_eq!(get(&stats.dedup_hits), 5, "{d}: {stats:?}");
    for table in ["points_ledger", "notification"] {
        assert_eq!(count(&s.db, table).await, 5, "{d}: {table}");
    }
    let t = idemguard_json(s, &["trace", &o]);
    let (read, widened) = payment_read(&t, topic);
    assert_eq!(read, vec![0, 1, 2], "{t:#}");
    assert!(
        widened
            .as_deref()
            .is_some_and(|w| w.contains("have no key")),
        "{t:#}"
    );
    assert_eq!(t["data"]["events"][0]["kafka_copies"], 2, "{t:#}");
}

/// A team's own payment service publishes with the Java client (tests/peers/
/// java-payment-producer: kafka-clients, idempotent, murmur2 keys, gzip / lz4 / zstd batches,
/// and a run without keys): each event is applied once however many copies and codecs carried
/// it, its poison goes to the DLQ, and a trace configured with the Java client's partitioner
/// reads the partition Java chose and finds every copy.
async fn java_producer_events_apply_once_and_trace_by_murmur2(dialect: Dialect) {
    let java = JavaPaymentProducer::built();
    let s = consumer_setup(dialect).await;
    let events = keyed_events_through_java(&s, &java).await;
    for e in &events {
        trace_reads_the_java_partition(&s, e, 4);
    }
    unkeyed_copies_through_java(&s, &java, &events).await;
}

per_dialect!(java_producer_events_apply_once_and_trace_by_murmur2 => java_producer_events_apply_once_and_trace_by_murmur2_postgres, java_producer_events_apply_once_and_trace_by_murmur2_mysql);
