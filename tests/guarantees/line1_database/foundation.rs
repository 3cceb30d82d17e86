//! Foundation against the real services: migrations on both dialects, unique keys refused by
//! the database itself, doctor, the trace pipeline with the broker up and down.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use idemguard::config::Dialect;
use idemguard::contracts::{Instance, Layer, Outcome, TraceEvent};
use idemguard::db::{is_unique_violation, migrate, Database};
use idemguard::doctor;
use idemguard::trace::Tracer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};

async fn migrations_apply_twice_and_unique_keys_hold(dialect: Dialect) {
    let config = fresh_database_config(dialect).await;
    let db = Database::connect(&config).await.unwrap();
    let first = migrate::migrate(&db).await.unwrap();
    assert_eq!(
        (first.version_before, first.version_after),
        (0, migrate::SCHEMA_VERSION)
    );
    let second = migrate::migrate(&db).await.unwrap();
    assert_eq!(
        (second.version_before, second.version_after),
        (migrate::SCHEMA_VERSION, migrate::SCHEMA_VERSION)
    );

    // Each unique key of the design, tried with a duplicate row: the database must refuse it.
    let ph = |n: usize| -> String {
        (1..=n)
            .map(|i| {
                if dialect == Dialect::Postgres {
                    format!("${i}")
                } else {
                    "?".into()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("idempotency_record.request_id",
         format!("INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES ({}, 'ORDER', 'h', 'PROCESSING', 'o', 0, 0, 0, 0)", ph(1)),
         vec!["APP:ORDER:20261129:abcdefgh"]),
        ("order_record.req_id",
         format!("INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES ({}, 1, 1, 1, 1, 'CREATED', 0, 0)", ph(2)),
         vec!["R1", "O-same-req"]),
        ("stock_movement.order_no",
         format!("INSERT INTO stock_movement (order_no, req_id, sku_id, delta, created_at) VALUES ({}, 1, -1, 0)", ph(2)),
         vec!["O1", "R1"]),
        ("payment_flow.pay_no",
         format!("INSERT INTO payment_flow (pay_no, order_no, amount, status, event_id, created_at) VALUES ({}, 1, 'SUCCEEDED', {}, 0)", ph(2), if dialect == Dialect::Postgres { "md5(random()::text)" } else { "UUID()" }),
         vec!["P1", "O1"]),
        ("points_ledger.source_event_no",
         format!("INSERT INTO points_ledger (source_event_no, order_no, user_id, points, created_at) VALUES ({}, 1, 10, 0)", ph(2)),
         vec!["E1", "O1"]),
        ("notification.event_id",
         format!("INSERT INTO notification (event_id, order_no, user_id, channel, body, created_at) VALUES ({}, 1, 'sms', 'paid', 0)", ph(2)),
         vec!["E1", "O1"]),
        ("processed_event.(consumer_group, event_id)",
         format!("INSERT INTO processed_event (consumer_group, event_id, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at) VALUES ({}, 't', 0, 0, 'applied', 0, 0)", ph(2)),
         vec!["g1", "E1"]),
    ];
    for (what, sql, binds) in cases {
        let run = || {
            let mut q = sqlx::query(&sql);
            for b in &binds {
                q = q.bind(*b);
            }
            q
        };
        run()
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{dialect}: first insert into {what}: {e}"));
        let err = run()
            .execute(&db.pool)
            .await
            .expect_err(&format!("{dialect}: a duplicate {what} must be refused"));
        assert!(
            is_unique_violation(&err),
            "{dialect}: {what}: expected a unique violation, got {err}"
        );
    }
    // order_no is unique on its own, too.
    let sql = format!("INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES ({}, 1, 1, 1, 1, 'CREATED', 0, 0)", ph(2));
    let err = sqlx::query(&sql)
        .bind("R2")
        .bind("O-same-req")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        is_unique_violation(&err),
        "{dialect}: order_record.order_no: {err}"
    );
    // Stock can never go negative, whatever the code above it does.
    let sql = format!(
        "INSERT INTO inventory (sku_id, stock, updated_at) VALUES ({})",
        ph(3)
    );
    assert!(
        sqlx::query(&sql)
            .bind(1_i64)
            .bind(-1_i64)
            .bind(0_i64)
            .execute(&db.pool)
            .await
            .is_err(),
        "{dialect}: negative stock accepted"
    );
}

per_dialect!(migrations_apply_twice_and_unique_keys_hold => migrations_postgres, migrations_mysql);

async fn concurrent_migrations_are_harmless(dialect: Dialect) {
    let config = fresh_database_config(dialect).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        let c = config.clone();
        runs.push(tokio::spawn(async move {
            let db = Database::connect(&c).await.unwrap();
            migrate::migrate(&db).await
        }));
    }
    for r in runs {
        let report = r
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{dialect}: concurrent migrate failed: {e:#}"));
        assert_eq!(report.version_after, migrate::SCHEMA_VERSION);
    }
}

per_dialect!(concurrent_migrations_are_harmless => concurrent_migrations_postgres, concurrent_migrations_mysql);

async fn doctor_passes_on_the_stack(dialect: Dialect) {
    let (config, _db) = migrated_database(dialect).await;
    let rows = doctor::run(&config).await;
    let failed: Vec<_> = rows.iter().filter(|r| !r.ok).collect();
    assert!(
        failed.is_empty(),
        "{dialect}: doctor failed on the stack: {failed:#?}"
    );
    assert!(rows.iter().any(|r| r.service == "database"
        && r.detail.contains(&format!(
            "schema v{} applied",
            idemguard::db::migrate::SCHEMA_VERSION
        ))));
    assert_eq!(
        rows.iter()
            .filter(|r| r.service.starts_with("redlock node") && !r.service.ends_with("security"))
            .count(),
        5
    );
    // Each connection says how it is secured: the plaintext stack, outside production, no warning.
    let security: Vec<_> = rows
        .iter()
        .filter(|r| r.service.ends_with(" security"))
        .collect();
    assert_eq!(security.len(), 1 + 1 + 5 + 1, "{rows:#?}");
    // Outside production no warning: Redis and Kafka plaintext; the database plaintext (MariaDB,
    // TLS off) or TLS that sslmode=prefer (the default) does not verify (the stack's PostgreSQL
    // serves Debian's snakeoil certificate).
    assert!(security.iter().all(|r| !r.warning), "{security:#?}");
    for r in &security {
        let expected = match (r.service.as_str(), dialect) {
            ("database security", Dialect::Postgres) => "NOT VERIFIED (sslmode=prefer",
            _ => "plaintext",
        };
        assert!(r.detail.contains(expected), "{dialect}: {r:#?}");
    }
    assert!(
        rows.iter()
            .any(|r| r.service == "topic payment.succeeded" && r.detail == "3 partitions"),
        "{rows:#?}"
    );
}

per_dialect!(doctor_passes_on_the_stack => doctor_passes_on_the_stack_postgres, doctor_passes_on_the_stack_mysql);

#[tokio::test]
async fn doctor_names_a_closed_port() {
    let (mut config, _db) = migrated_database(Dialect::Postgres).await;
    config.redis.redlock_nodes[2] = "redis://127.0.0.1:6399".into();
    let rows = doctor::run(&config).await;
    let failed: Vec<_> = rows.iter().filter(|r| !r.ok).collect();
    assert_eq!(failed.len(), 1, "{rows:#?}");
    assert_eq!(failed[0].service, "redlock node 3");
    assert_eq!(failed[0].target, "127.0.0.1:6399");
    assert!(failed[0]
        .hint
        .as_deref()
        .unwrap()
        .contains("scripts/stack status"));

    let mut config = local_config();
    config.database.url = "mysql://root@127.0.0.1:3399/idemguard".into();
    let rows = doctor::run(&config).await;
    let db_row = rows.iter().find(|r| r.service == "database").unwrap();
    assert!(
        !db_row.ok && db_row.detail.contains("127.0.0.1:3399") && db_row.detail.contains("refused"),
        "{db_row:#?}"
    );
}

#[tokio::test]
async fn doctor_names_a_missing_schema() {
    let config = fresh_database_config(Dialect::Mysql).await;
    let rows = doctor::run(&config).await;
    let db_row = rows.iter().find(|r| r.service == "database").unwrap();
    assert!(!db_row.ok, "{db_row:#?}");
    assert!(
        db_row
            .hint
            .as_deref()
            .unwrap()
            .contains("idemguard migrate"),
        "{db_row:#?}"
    );
}

#[tokio::test]
async fn trace_event_is_read_back_from_the_topic_with_its_ids() {
    let mut config = local_config();
    let topics = fresh_topics(&config, &["idemguard.trace"]).await;
    config.kafka.trace_topic = topics[0].clone();
    let tracer = Tracer::from_config(&config, &Instance::current()).unwrap();
    let (order_no, request_id, event_id) = (
        format!("O{}", unique_suffix()),
        format!("APP:ORDER:20261129:{}", unique_suffix()),
        idemguard::contracts::new_event_id(),
    );
    tracer.emit(
        TraceEvent::new(Layer::Stream, Outcome::DedupHit)
            .order_no(&order_no)
            .request_id(&request_id)
            .event_id(&event_id)
            .detail("test"),
    );
    tracer.flush(Duration::from_secs(10));
    assert_eq!(tracer.stats().delivered, 1, "{:?}", tracer.stats());

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", format!("trace-test-{}", unique_suffix()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[&topics[0]]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        assert!(
            Instant::now() < deadline,
            "the trace event did not come back from {} within 30s",
            topics[0]
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
            let ev: TraceEvent = serde_json::from_slice(m.payload().unwrap()).unwrap();
            assert_eq!(m.key(), Some(order_no.as_bytes()), "the key is the orderNo");
            break ev;
        }
    };
    assert_eq!(found.order_no.as_deref(), Some(order_no.as_str()));
    assert_eq!(found.request_id.as_deref(), Some(request_id.as_str()));
    assert_eq!(found.event_id.as_deref(), Some(event_id.as_str()));
    assert_eq!(found.outcome, Outcome::DedupHit);
    assert_eq!(found.instance, tracer.instance_id());
}

#[tokio::test]
async fn trace_emission_with_the_broker_down_returns_at_once_and_counts_drops() {
    let mut config = local_config();
    config.kafka.bootstrap_servers = "127.0.0.1:9".into(); // nothing listens on the discard port
    config.trace.buffer = 10;
    config.trace.delivery_timeout = Duration::from_millis(1500);
    let tracer = Tracer::from_config(&config, &Instance::current()).unwrap();
    let started = Instant::now();
    for i in 0..50 {
        tracer.emit(TraceEvent::new(Layer::Api, Outcome::Claimed).request_id(format!("R{i}")));
    }
    let took = started.elapsed();
    // Generous bound: 50 emissions must not wait for a broker (one would take seconds).
    assert!(
        took < Duration::from_millis(500),
        "emission blocked for {took:?}"
    );
    let now = tracer.stats();
    assert_eq!(now.emitted, 50);
    assert!(
        now.dropped >= 40,
        "the buffer holds 10, so at least 40 are dropped at once: {now:?}"
    );
    // The 10 buffered ones time out and are counted too.
    let deadline = Instant::now() + Duration::from_secs(15);
    while tracer.stats().dropped < 50 {
        assert!(
            Instant::now() < deadline,
            "buffered events were never counted as dropped: {:?}",
            tracer.stats()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(tracer.stats().delivered, 0);
}
