//! The order service on a random port against the real stack, both dialects: the seed's 500
//! identical requests, every Idempotency-Key refusal, replays byte for byte (a business refusal
//! too, once the world has changed), in-flight 409s, a
//! dead owner's record reclaimed, payment callbacks booked once and published once.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use idemguard::api::server::{self, Server};
use idemguard::config::{Config, Dialect};
use idemguard::contracts::{now_ms, PaymentSucceeded};
use idemguard::db::orders::Orders;
use idemguard::db::Database;
use idemguard::trace::Tracer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};
use reqwest::StatusCode;

struct Service {
    config: Config,
    db: Database,
    server: Server,
    http: reqwest::Client,
    base: String,
}

async fn service(dialect: Dialect) -> Service {
    common::log::test_log();
    let (mut config, db) = migrated_database(dialect).await;
    let topics = fresh_topics(&config, &["payment.succeeded"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.trace.enabled = false;
    let server = server::start(config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    Service {
        config,
        db,
        server,
        http,
        base,
    }
}

impl Service {
    async fn stop(self) {
        self.server.shutdown.cancel();
        self.server.done.await.unwrap().unwrap();
    }
    fn orders(&self) -> Orders {
        Orders::new(
            self.db.clone(),
            Tracer::log_only(&idemguard::contracts::Instance::current()),
        )
    }
    async fn post(
        &self,
        path: &str,
        key: Option<&str>,
        body: &serde_json::Value,
    ) -> reqwest::Response {
        let mut req = self.http.post(format!("{}{path}", self.base)).json(body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req.send().await.unwrap()
    }
}

fn key() -> String {
    idemguard::contracts::RequestId::generate("APP", "ORDER").to_string()
}

fn order_body(sku: i64) -> serde_json::Value {
    serde_json::json!({"userId": 42, "skuId": sku, "quantity": 1, "amount": 1999})
}

async fn five_hundred_identical_requests(dialect: Dialect) {
    let s = service(dialect).await;
    s.orders().set_stock(7, 1000).await.unwrap();
    let k = key();
    let body = order_body(7);
    let sends = (0..500).map(|_| {
        let (http, url, k, body) = (
            s.http.clone(),
            format!("{}/orders", s.base),
            k.clone(),
            body.clone(),
        );
        async move {
            let r = http
                .post(url)
                .header("Idempotency-Key", k)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            let replayed = r.headers().get("idempotent-replayed").is_some();
            (status, replayed, r.text().await.unwrap())
        }
    });
    let results = futures::future::join_all(sends).await;
    let created: Vec<&String> = results
        .iter()
        .filter(|(st, _, _)| *st == StatusCode::CREATED)
        .map(|(_, _, b)| b)
        .collect();
    let conflicts = results
        .iter()
        .filter(|(st, _, _)| *st == StatusCode::CONFLICT)
        .count();
    assert_eq!(
        created.len() + conflicts,
        500,
        "{dialect}: every response is the 201 body or a 409: {:?}",
        results
            .iter()
            .map(|r| r.0)
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(!created.is_empty());
    assert!(
        created.iter().all(|b| *b == created[0]),
        "{dialect}: every 201 carries the same body"
    );
    assert_eq!(
        count(&s.db, "order_record").await,
        1,
        "{dialect}: one order"
    );
    assert_eq!(
        count(&s.db, "stock_movement").await,
        1,
        "{dialect}: one stock decrement"
    );
    assert_eq!(s.orders().stock_of(7).await.unwrap(), Some(999));
    // Afterwards every retry is a replay of the first response.
    for _ in 0..5 {
        let r = s.post("/orders", Some(&k), &body).await;
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers().get("idempotent-replayed").unwrap(), "true");
        assert_eq!(&r.text().await.unwrap(), created[0]);
    }
    s.stop().await;
}

per_dialect!(five_hundred_identical_requests => five_hundred_identical_requests_postgres, five_hundred_identical_requests_mysql);

#[tokio::test]
async fn malformed_keys_get_a_problem_that_names_the_format() {
    let s = service(Dialect::Postgres).await;
    let long = format!("APP:ORDER:20261129:{}", "a".repeat(120));
    let cases: Vec<(Option<&str>, &str)> = vec![
        (None, "missing"),
        (Some(""), "missing or empty"),
        (Some(&long), "at most 128"),
        (Some("APP:ORDER:20261129:abc\tdefgh"), "not printable"),
        (Some("123456789"), "bare number"),
        (Some("1732881942123"), "bare number"),
        (Some("APP:ORDER:0193a1c2"), "four are expected"),
    ];
    for (k, why) in cases {
        let r = s.post("/orders", k, &order_body(1)).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{k:?}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let p: serde_json::Value = r.json().await.unwrap();
        assert!(p["detail"].as_str().unwrap().contains(why), "{k:?}: {p}");
        assert_eq!(p["expectedFormat"], "{CHANNEL}:{BIZ}:{yyyymmdd}:{unique}");
        assert_eq!(p["status"], 400);
    }
    // Nothing was claimed or created by any of them.
    assert_eq!(count(&s.db, "idempotency_record").await, 0);
    let r = s
        .post(
            "/payments/callback",
            None,
            &serde_json::json!({"payNo": "P1", "orderNo": "x", "amount": 1}),
        )
        .await;
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "every POST needs the key"
    );
    s.stop().await;
}

async fn mismatch_replay_and_in_flight(dialect: Dialect) {
    let s = service(dialect).await;
    s.orders().set_stock(3, 10).await.unwrap();
    let k = key();
    let first = s.post("/orders", Some(&k), &order_body(3)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.bytes().await.unwrap();

    // Same key, different request → 422, nothing created.
    let other = serde_json::json!({"userId": 42, "skuId": 3, "quantity": 2, "amount": 1999});
    let r = s.post("/orders", Some(&k), &other).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let p: serde_json::Value = r.json().await.unwrap();
    assert!(
        p["type"]
            .as_str()
            .unwrap()
            .ends_with("idempotency-key-reused"),
        "{p}"
    );

    // Same request, keys in another order → replay, byte for byte (also from the database,
    // with the fast path's key removed).
    let reordered = serde_json::json!({"amount": 1999, "quantity": 1, "skuId": 3, "userId": 42});
    let r = s.post("/orders", Some(&k), &reordered).await;
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(r.bytes().await.unwrap(), first_body);
    let redis = redis::Client::open(s.config.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("idem:{k}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let r = s.post("/orders", Some(&k), &order_body(3)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(
        r.bytes().await.unwrap(),
        first_body,
        "the database replay is the same bytes"
    );
    assert_eq!(count(&s.db, "order_record").await, 1);
    tokio::time::sleep(Duration::from_millis(1500)).await; // replay counter flush
    let replays: i64 = sqlx::query_scalar(&format!(
        "SELECT replay_count FROM idempotency_record WHERE request_id = '{k}'"
    ))
    .fetch_one(&s.db.pool)
    .await
    .unwrap();
    assert_eq!(replays, 2);

    // In flight: a PROCESSING record owned by a live instance (this service) → 409 + Retry-After.
    let k2 = key();
    let ph = |n: usize| placeholders(dialect, n);
    let owner = {
        let h: serde_json::Value = s
            .http
            .get(format!("{}/healthz", s.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        h["instance"].as_str().unwrap().to_string()
    };
    let hash = idemguard::api::idempotency::request_hash("POST", "/orders", &order_body(3));
    let now = now_ms();
    sqlx::query(&format!("INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES ({})", ph(9)))
        .bind(&k2).bind("ORDER").bind(&hash).bind("PROCESSING").bind(&owner).bind(now + 60_000).bind(now).bind(now).bind(now + 86_400_000)
        .execute(&s.db.pool).await.unwrap();
    let r = s.post("/orders", Some(&k2), &order_body(3)).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        count(&s.db, "order_record").await,
        1,
        "nothing created while the first is in flight"
    );
    s.stop().await;
}

per_dialect!(mismatch_replay_and_in_flight => mismatch_replay_and_in_flight_postgres, mismatch_replay_and_in_flight_mysql);

/// Business refusals (out of stock, unknown SKU) are stored as FAILED, so a retry gets the same
/// answer — from the fast path, then from the database record alone — though the world changed.
async fn a_refusal_is_replayed(dialect: Dialect) {
    let s = service(dialect).await;
    let redis = redis::Client::open(s.config.redis.url.as_str()).unwrap();
    let mut fast_path = redis.get_multiplexed_async_connection().await.unwrap();
    let (sold_out, unknown) = (11, 12);
    s.orders().set_stock(sold_out, 0).await.unwrap();
    for (sku, problem) in [(sold_out, "out-of-stock"), (unknown, "unknown-sku")] {
        let k = key();
        let r = s.post("/orders", Some(&k), &order_body(sku)).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{dialect}");
        assert!(r.headers().get("idempotent-replayed").is_none());
        let first = r.bytes().await.unwrap();
        let p: serde_json::Value = serde_json::from_slice(&first).unwrap();
        assert!(
            p["type"].as_str().unwrap().ends_with(problem),
            "{dialect}: {p}"
        );
        // The world changes — stock arrives, the SKU is created — and the retry still gets the
        // first answer.
        s.orders().set_stock(sku, 10).await.unwrap();
        for from in ["fast path", "database"] {
            if from == "database" {
                let _: () = redis::cmd("DEL")
                    .arg(format!("idem:{k}"))
                    .query_async(&mut fast_path)
                    .await
                    .unwrap();
            }
            let r = s.post("/orders", Some(&k), &order_body(sku)).await;
            assert_eq!(
                (r.status(), r.headers().get("idempotent-replayed").cloned()),
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Some("true".parse().unwrap())
                ),
                "{dialect}, {problem} from the {from}"
            );
            let again = r.bytes().await.unwrap();
            assert_eq!(
                again, first,
                "{dialect}, {problem} from the {from}: the same bytes"
            );
        }
        let stored = count(
            &s.db,
            &format!("idempotency_record WHERE request_id = '{k}' AND status = 'FAILED'"),
        )
        .await;
        assert_eq!(stored, 1, "{dialect}: the refusal is stored as FAILED");
    }
    assert_eq!(
        count(&s.db, "order_record").await,
        0,
        "{dialect}: a retry of a refusal created an order"
    );
    s.stop().await;
}

per_dialect!(a_refusal_is_replayed => a_refusal_is_replayed_byte_for_byte_postgres, a_refusal_is_replayed_byte_for_byte_mysql);

async fn dead_owner_record_is_reclaimed(dialect: Dialect) {
    let s = service(dialect).await;
    s.orders().set_stock(5, 10).await.unwrap();
    let ph = |n: usize| placeholders(dialect, n);
    let insert_processing = |k: String, owner: &'static str| {
        let db = s.db.clone();
        let sql = format!("INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES ({})", ph(9));
        async move {
            let hash = idemguard::api::idempotency::request_hash("POST", "/orders", &order_body(5));
            let now = now_ms();
            sqlx::query(&sql)
                .bind(&k)
                .bind("ORDER")
                .bind(&hash)
                .bind("PROCESSING")
                .bind(owner)
                .bind(now - 1000)
                .bind(now - 60_000)
                .bind(now - 60_000)
                .bind(now + 86_400_000)
                .execute(&db.pool)
                .await
                .unwrap();
        }
    };
    // A process killed before it created the order: the retry creates exactly one.
    let k = key();
    insert_processing(k.clone(), "dead-host-1-000001").await;
    let r = s.post("/orders", Some(&k), &order_body(5)).await;
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().await.unwrap()
    );
    assert_eq!(
        count(&s.db, &format!("order_record WHERE req_id = '{k}'")).await,
        1
    );
    let status: String = sqlx::query_scalar(&format!(
        "SELECT status FROM idempotency_record WHERE request_id = '{k}'"
    ))
    .fetch_one(&s.db.pool)
    .await
    .unwrap();
    assert_eq!(status, "SUCCEEDED");

    // A process killed after its order committed, before it finalized: the retry gets that
    // same order back from the database layer, nothing new.
    let k = key();
    insert_processing(k.clone(), "dead-host-2-000002").await;
    let first = s
        .orders()
        .create(&idemguard::db::orders::NewOrder {
            request_id: idemguard::contracts::RequestId::parse(&k).unwrap(),
            order_no: idemguard::contracts::OrderNo::generate(),
            user_id: 42,
            sku_id: 5,
            quantity: 1,
            amount: 1999,
            fence: None,
        })
        .await
        .unwrap()
        .into_order();
    let r = s.post("/orders", Some(&k), &order_body(5)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["orderNo"], first.order_no.as_str());
    assert_eq!(
        count(&s.db, &format!("order_record WHERE req_id = '{k}'")).await,
        1
    );
    assert_eq!(
        count(&s.db, "stock_movement").await,
        2,
        "one decrement per order"
    );
    s.stop().await;
}

per_dialect!(dead_owner_record_is_reclaimed => dead_owner_record_is_reclaimed_postgres, dead_owner_record_is_reclaimed_mysql);

#[tokio::test]
async fn an_expired_record_is_answered_from_the_order_tables() {
    let s = service(Dialect::Mysql).await;
    s.orders().set_stock(9, 10).await.unwrap();
    let k = key();
    let r = s.post("/orders", Some(&k), &order_body(9)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: serde_json::Value = r.json().await.unwrap();
    // Past its retention: its stored response must not be trusted; the order's state is.
    sqlx::query(&format!(
        "UPDATE idempotency_record SET expire_at = 1 WHERE request_id = '{k}'"
    ))
    .execute(&s.db.pool)
    .await
    .unwrap();
    // The fast path's copy lives at most as long as the record (fast_path_ttl <= retention).
    let redis = redis::Client::open(s.config.redis.url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("idem:{k}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    sqlx::query(&format!(
        "UPDATE order_record SET status = 'CANCELLED' WHERE req_id = '{k}'"
    ))
    .execute(&s.db.pool)
    .await
    .unwrap();
    let r = s.post("/orders", Some(&k), &order_body(9)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let now: serde_json::Value = r.json().await.unwrap();
    assert_eq!(now["orderNo"], v["orderNo"]);
    assert_eq!(
        now["status"], "CANCELLED",
        "the current state, not the stored 201"
    );
    // A very old key whose record was purged: never creates anything.
    let old = format!("APP:ORDER:20240101:{}", uuid::Uuid::now_v7());
    let r = s.post("/orders", Some(&old), &order_body(9)).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let p: serde_json::Value = r.json().await.unwrap();
    assert!(
        p["type"]
            .as_str()
            .unwrap()
            .ends_with("idempotency-key-expired"),
        "{p}"
    );
    assert_eq!(count(&s.db, "order_record").await, 1);
    s.stop().await;
}

async fn fifty_identical_payment_callbacks(dialect: Dialect) {
    let s = service(dialect).await;
    s.orders().set_stock(11, 10).await.unwrap();
    let r = s.post("/orders", Some(&key()), &order_body(11)).await;
    let order: serde_json::Value = r.json().await.unwrap();
    let order_no = order["orderNo"].as_str().unwrap().to_string();
    let pay_key = idemguard::contracts::RequestId::generate("PSP", "PAY").to_string();
    let body = serde_json::json!({"payNo": format!("PAY-{order_no}"), "orderNo": order_no, "amount": 1999});
    let sends = (0..50).map(|_| {
        let (http, url, k, body) = (
            s.http.clone(),
            format!("{}/payments/callback", s.base),
            pay_key.clone(),
            body.clone(),
        );
        async move {
            http.post(url)
                .header("Idempotency-Key", k)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let statuses = futures::future::join_all(sends).await;
    assert!(
        statuses
            .iter()
            .all(|st| *st == StatusCode::CREATED || *st == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    // A provider retry with a NEW key but the same payNo: the pay_no unique key books it once.
    let r = s
        .post(
            "/payments/callback",
            Some(&idemguard::contracts::RequestId::generate("PSP", "PAY").to_string()),
            &body,
        )
        .await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "already booked: the first booking"
    );
    assert_eq!(count(&s.db, "payment_flow").await, 1);
    assert_eq!(count(&s.db, "outbox").await, 1);
    // Each record's business type is its key's own: the callbacks' are PAY, the order's ORDER.
    assert_eq!(
        count(&s.db, "idempotency_record WHERE biz_type = 'PAY'").await,
        2
    );
    assert_eq!(
        count(&s.db, "idempotency_record WHERE biz_type = 'ORDER'").await,
        1
    );

    // Exactly one event reaches the topic, with the IDs in its headers.
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&s.db, "outbox WHERE status = 'SENT'").await < 1 {
        assert!(
            Instant::now() < deadline,
            "the relay never published the outbox row"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &s.config.kafka.bootstrap_servers)
        .set("group.id", format!("api-test-{}", unique_suffix()))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    // Assigned, not subscribed: no group join to wait for.
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&s.config.kafka.payment_topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut events = Vec::new();
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(300)) {
            assert_eq!(m.key(), Some(order_no.as_bytes()));
            events.push(serde_json::from_slice::<PaymentSucceeded>(m.payload().unwrap()).unwrap());
        }
    }
    assert_eq!(events.len(), 1, "{dialect}: one event on the topic");
    assert_eq!(events[0].order_no, order_no);
    s.stop().await;
}

per_dialect!(fifty_identical_payment_callbacks => fifty_identical_payment_callbacks_postgres, fifty_identical_payment_callbacks_mysql);

/// A gateway that gives up after a few milliseconds drops the connection mid-request. The request
/// still runs to its end, so the retry gets the order — never an endless 409 from a record whose
/// owner is alive but whose handler was cancelled. A retry answered as a replay after the client
/// gave up proves the drop really landed mid-way: the handler had started and finished alone.
#[tokio::test]
async fn a_client_that_gives_up_mid_request_does_not_leave_the_key_blocked() {
    let s = service(Dialect::Postgres).await;
    s.orders().set_stock(13, 100).await.unwrap();
    let mut blocked = Vec::new();
    let mut finished_alone = 0;
    for i in 0..10 {
        let k = key();
        // 1, 2, 4, 8, 16 ms: on a fast or a loaded machine, some give up while the handler runs.
        let quick = s
            .http
            .post(format!("{}/orders", s.base))
            .header("Idempotency-Key", &k)
            .json(&order_body(13))
            .timeout(Duration::from_millis(1 << (i % 5)))
            .send()
            .await;
        let gave_up = quick.is_err(); // usually a timeout; sometimes the service was faster
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = s.post("/orders", Some(&k), &order_body(13)).await;
            if r.status() == StatusCode::CREATED {
                if gave_up && r.headers().get("idempotent-replayed").is_some() {
                    finished_alone += 1;
                }
                break;
            }
            assert_eq!(
                r.status(),
                StatusCode::CONFLICT,
                "{}",
                r.text().await.unwrap()
            );
            if Instant::now() > deadline {
                blocked.push(k.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        finished_alone >= 1,
        "no client gave up while its handler ran: the test proved nothing"
    );
    assert!(
        blocked.is_empty(),
        "keys still answered 409 after 10 s: {blocked:?}"
    );
    assert_eq!(
        count(&s.db, "order_record WHERE sku_id = 13").await,
        10,
        "one order per key"
    );
    assert_eq!(
        count(&s.db, "idempotency_record WHERE status = 'PROCESSING'").await,
        0
    );
    s.stop().await;
}
