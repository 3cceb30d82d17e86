//! The console over an incident produced by the real system, not written by hand: the order
//! service (`api::server`) takes a double-clicked order and a payment callback sent three times,
//! the outbox relay publishes the event, the broker redelivers it once more, and the real
//! consumer applies it. Then the console traces the order — the headless twin's data checked
//! field by field, and the Trace view drawn and snapshotted (volatile text redacted) — on both
//! dialects.

use crate::common;
use crate::console::fixture as console_fixture;

use std::time::{Duration, Instant};

use console_fixture::{
    age_after, assert_refresh_drawn, block, press, pump_until, redactions, screen, trace_read_done,
    type_str, world, World, SKU,
};
use crossterm::event::KeyCode;
use idemguard::api::server;
use idemguard::config::Dialect;
use idemguard::console::cli::headless;
use idemguard::console::tui::app::{App, Health};
use idemguard::console::tui::backend::Backends;
use idemguard::console::tui::keymap::View;
use idemguard::contracts::{Instance, RequestId, TraceTarget};
use idemguard::db::orders::Orders;
use idemguard::stream::{ConsumeOptions, ConsumeStats, PaymentConsumer};
use idemguard::trace::Tracer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

/// The incident, driven through the real service and consumer; returns (orderNo, requestId).
async fn incident(w: &World) -> (String, String) {
    let service = server::start(w.config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", service.addr);
    Orders::new(w.db.clone(), Tracer::log_only(&Instance::current()))
        .set_stock(SKU, 10)
        .await
        .unwrap();
    let http = reqwest::Client::new();

    // The customer clicks three times: one order, two replays.
    let key = RequestId::generate("APP", "ORDER").to_string();
    let body = serde_json::json!({"userId": 42, "skuId": SKU, "quantity": 1, "amount": 1999});
    let mut order_no = String::new();
    for click in 0..3 {
        let r = http
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers().contains_key("idempotent-replayed"), click > 0);
        let v: serde_json::Value = r.json().await.unwrap();
        order_no = v["orderNo"].as_str().unwrap().to_string();
    }
    // The provider notifies three times: twice with one key (a replay), once with a new key
    // (the payment_flow's pay_no unique key answers with the first booking).
    let pay = serde_json::json!({"payNo": format!("PAY-{order_no}"), "orderNo": order_no, "amount": 1999});
    let pay_key = RequestId::generate("PSP", "PAY").to_string();
    for k in [
        pay_key.clone(),
        pay_key,
        RequestId::generate("PSP", "PAY").to_string(),
    ] {
        let r = http
            .post(format!("{base}/payments/callback"))
            .header("Idempotency-Key", k)
            .json(&pay)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::count(&w.db, "outbox WHERE status = 'SENT'").await < 1 {
        assert!(
            Instant::now() < deadline,
            "the relay never published the payment event"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    service.shutdown.cancel();
    service.done.await.unwrap().unwrap();

    // The broker delivers the event once more (an MQ replay): read it back, produce it again.
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &w.config.kafka.bootstrap_servers)
        .set("group.id", format!("replayer-{}", common::unique_suffix()))
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&w.config.kafka.payment_topic, p, Offset::Beginning)
            .unwrap();
    }
    reader.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let original = loop {
        assert!(
            Instant::now() < deadline,
            "the published event was not read back"
        );
        if let Some(Ok(m)) = reader.poll(Duration::from_millis(300)) {
            break m.detach();
        }
    };
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &w.config.kafka.bootstrap_servers)
        .create()
        .unwrap();
    let mut copy = FutureRecord::to(&w.config.kafka.payment_topic)
        .key(original.key().unwrap())
        .payload(original.payload().unwrap());
    if let Some(h) = rdkafka::message::Message::headers(&original) {
        copy = copy.headers(h.clone());
    }
    producer
        .send(copy, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();

    // The real consumer: one event applied, the copy stopped by the dedup state.
    let tracer = Tracer::from_config(&w.config, &Instance::current()).unwrap();
    let consumer = PaymentConsumer::new(
        &w.config,
        w.db.clone(),
        tracer.clone(),
        ConsumeOptions::default(),
    )
    .unwrap();
    let stats = consumer.stats();
    let stop = CancellationToken::new();
    let run = tokio::spawn(consumer.run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while ConsumeStats::get(&stats.applied) + ConsumeStats::get(&stats.dedup_hits) < 2 {
        assert!(
            Instant::now() < deadline,
            "the consumer did not handle both copies: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    run.await.unwrap().unwrap();
    tracer.flush(Duration::from_secs(10));
    assert_eq!(
        (
            ConsumeStats::get(&stats.applied),
            ConsumeStats::get(&stats.dedup_hits)
        ),
        (1, 1)
    );
    (order_no, key)
}

/// The fixture's redactions plus what a real run varies: instance ids, request hashes.
fn live_redactions() -> Vec<(&'static str, &'static str)> {
    let mut r = redactions();
    r.insert(0, (r"\b[A-Za-z0-9.-]+-\d+-[0-9a-f]{6}\b", "[instance]"));
    r.insert(0, (r"\b[0-9a-f]{7}…", "[hash]"));
    r
}

async fn console_over_a_real_incident(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let started = idemguard::contracts::now_ms();
    let (order_no, request_id) = incident(&w).await;

    // The headless twin: which layer stopped each duplicate, and one effect per sink.
    let r = headless::trace(&w.config, &TraceTarget::classify(&order_no)).await;
    assert!(r.ok, "{dialect}: {}", r.failures());
    let t = serde_json::to_value(&r).unwrap()["data"].clone();
    assert_eq!(t["found"], true);
    assert_eq!(t["order_no"], order_no.as_str());
    assert_eq!(t["request_id"], request_id.as_str());
    let stopped: Vec<(String, String)> = t["interceptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["layer"].as_str().unwrap().to_string(),
                i["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let n = |layer: &str, outcome: &str| {
        stopped
            .iter()
            .filter(|(l, o)| l == layer && o == outcome)
            .count()
    };
    assert_eq!(
        n("api", "replayed"),
        2,
        "{dialect}: the two extra clicks: {stopped:?}"
    );
    assert_eq!(
        n("db", "unique_violation_replayed"),
        1,
        "{dialect}: the callback with a new key: {stopped:?}"
    );
    assert_eq!(
        n("stream", "dedup_hit"),
        1,
        "{dialect}: the redelivered event: {stopped:?}"
    );
    let events = t["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{dialect}: one payment event");
    let e = &events[0];
    assert_eq!(
        (
            &e["kafka_copies"],
            &e["processed_rows"],
            &e["dedup_hits"],
            &e["points_rows"],
            &e["notification_rows"]
        ),
        (&2.into(), &1.into(), &1.into(), &1.into(), &1.into()),
        "{dialect}: {e}"
    );

    // The Trace view, typed as an operator would.
    let backends = Backends::spawn(&w.config);
    let mut app = App::new(&w.config, Some(backends.focus.clone()));
    let mut b = backends;
    press(&mut app, KeyCode::Char(':'));
    type_str(&mut app, &format!("trace {request_id}"));
    press(&mut app, KeyCode::Enter);
    pump_until(
        &mut app,
        &mut b.updates,
        "the live dedup hit on the timeline",
        |a| {
            a.timeline().is_some_and(|t| {
                t.interceptions.iter().any(|i| i.outcome == "dedup_hit")
                    && t.events.first().is_some_and(|e| e.kafka_copies == 2)
            })
        },
    )
    .await;
    pump_until(&mut app, &mut b.updates, "every backend up", |a| {
        a.stores
            .backends
            .iter()
            .all(|(_, s)| s.health == Health::Up)
            && trace_read_done(a)
    })
    .await;
    let t = app.timeline().unwrap();
    assert_eq!(t.order_no.as_deref(), Some(order_no.as_str()));
    // What the timeline holds, as a multiset: events sharing a millisecond arrive from different
    // partitions in either order, so the order is checked (oldest first), not pinned.
    let mut sources: Vec<String> = t
        .entries
        .iter()
        .map(|e| format!("{} {}", e.layer, e.source))
        .collect();
    sources.sort();
    let count = |what: &str| sources.iter().filter(|s| s.as_str() == what).count();
    assert_eq!(
        count("api idempotency_record"),
        3,
        "{dialect}: the order's record and two payment records: {sources:#?}"
    );
    assert_eq!(count("db order_record"), 1);
    assert_eq!(count("db stock_movement"), 1);
    assert_eq!(count("db payment_flow"), 1);
    assert_eq!(count("sink points_ledger"), 1);
    assert_eq!(count("sink notification"), 1);
    assert_eq!(count("stream processed_event"), 1);
    assert_eq!(
        sources.iter().filter(|s| s.starts_with("kafka ")).count(),
        2,
        "{sources:#?}"
    );
    let times: Vec<i64> = t
        .entries
        .iter()
        .map(|e| e.at_ms.unwrap_or(i64::MAX))
        .collect();
    assert!(
        times.windows(2).all(|p| p[0] <= p[1]),
        "oldest first: {times:?}"
    );
    // The order's idempotency record selected (a claim, placed at its start, comes before it).
    let record = t
        .entries
        .iter()
        .position(|e| e.source == "idempotency_record")
        .expect("the record");
    app.ui.selected.insert(View::Trace, record);
    // The view's head — environment, backends, which layer stopped each duplicate, the event's
    // effects — is the same on every run once volatile text is redacted.
    let drawn = screen(&mut app, 170, 52);
    let head: String = drawn.lines().take(8).collect::<Vec<_>>().join("\n");
    insta::with_settings!({ filters => live_redactions(), prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(format!("live_trace_view_{}", dialect.dir()), head);
    });
    // What the snapshot redacts, on the drawn cells: the configured refresh; the
    // TIME cells oldest first, the Redis state ("now") last; the selected record's age no
    // more than the time since the incident began.
    assert_refresh_drawn(&drawn, w.config.console.refresh);
    let lines: Vec<&str> = drawn.lines().collect();
    let top = lines
        .iter()
        .position(|l| l.contains("Timeline, oldest first"))
        .unwrap();
    let times: Vec<&str> = lines[top + 2..]
        .iter()
        .take_while(|l| !l.starts_with('╰'))
        .filter_map(|l| l.trim_start_matches('│').split_whitespace().next())
        .filter(|t| *t != "│") // an empty row: its right border
        .collect();
    let clocks: Vec<&&str> = times.iter().take_while(|t| **t != "now").collect();
    assert!(
        clocks.len() >= 10 && clocks.windows(2).all(|p| p[0] <= p[1]),
        "{dialect}: TIME cells oldest first: {times:?}"
    );
    assert!(
        times[clocks.len()..].iter().all(|t| *t == "now"),
        "{dialect}: {times:?}"
    );
    let age = age_after(&block(&drawn, "Selected"), "· age ");
    let since_start = idemguard::contracts::now_ms() - started;
    assert!(
        (0..=since_start).contains(&age),
        "{dialect}: record age {age} ms, incident began {since_start} ms ago"
    );
    b.shutdown().await;
}

per_dialect!(console_over_a_real_incident => console_over_a_real_incident_postgres, console_over_a_real_incident_mysql);
