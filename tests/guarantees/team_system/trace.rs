//! The trace of an order on the article's system as written (tests/common/article.rs),
//! through the example profile and the real binary, with no idemguard trace topic:
//! - its lock, found by the profile's lock patterns (`lock:order:{orderNo}`) and decoded: a
//!   Redisson RLock's client and thread, a §3.2 `setIfAbsent(lockKey, requestId, 30s)` token
//!   linked to its request and order; a pattern that names no ID is said, not guessed;
//! - `locks --json` links every plain token that is a known requestId (one batched query);
//! - the JSON-lines logs shipped to a Kafka topic, read in the trace's windows.
//!
//! Every test has its own database, order numbers, Redis keys and topics.

use crate::common;
use crate::common::article;

use std::time::Duration;

use article::{
    article_system, first_json, now_ms, redis_conn, redisson_lock, run_profiled, set_if_absent,
    ArticleSystem, RedisKeys,
};
use idemguard::config::Dialect;
use serde_json::Value as Json;

const MINUTE: i64 = 60_000;

/// Two orders of the article's system, each with its §5.3 record, and their locks as the
/// team's services hold them now: order A by `setIfAbsent(lock:order:A, requestId)` (§3.2),
/// order B by a Redisson RLock under another service's key shape, `order:lock:B` (§3.4), and a
/// user lock (§3.4) that names no order.
struct TwoLockedOrders {
    sys: ArticleSystem,
    order_a: String,
    request_a: String,
    order_b: String,
    redisson_client: String,
    _keys: RedisKeys,
}

async fn two_locked_orders(dialect: Dialect) -> TwoLockedOrders {
    let sys = article_system(dialect).await;
    let tag = common::unique_suffix();
    let (order_a, order_b) = (format!("ORDA{tag}"), format!("ORDB{tag}"));
    let request_a = uuid::Uuid::new_v4().to_string();
    let request_b = format!("APP:ORDER:20261201:{tag}");
    let now = now_ms();
    sys.record(&request_a, 0, now - 2 * MINUTE).await;
    sys.order(&request_a, &order_a, None, now - 2 * MINUTE)
        .await;
    sys.record(&request_b, 0, now - MINUTE).await;
    sys.order(&request_b, &order_b, None, now - MINUTE).await;

    let mut c = redis_conn().await;
    let (key_a, key_b) = (
        format!("lock:order:{order_a}"),
        format!("order:lock:{order_b}"),
    );
    let user_key = format!("lock:user:{tag}:createOrder");
    let keys = RedisKeys(vec![key_a.clone(), key_b.clone(), user_key.clone()]);
    set_if_absent(&mut c, &key_a, &request_a).await;
    let redisson_client = uuid::Uuid::new_v4().to_string();
    redisson_lock(&mut c, &key_b, &format!("{redisson_client}:57")).await;
    redisson_lock(&mut c, &user_key, &format!("{redisson_client}:58")).await;
    TwoLockedOrders {
        sys,
        order_a,
        request_a,
        order_b,
        redisson_client,
        _keys: keys,
    }
}

/// The example profile's lock patterns, and the other service's, as its team adds it.
const PATTERNS: &str = "lock:order:{orderNo},lock:req:{requestId},lock:user:*,order:lock:{orderNo}";

/// The environment of the binary: the example profile on the fixture (with the other
/// service's lock pattern), a payment topic of its own (the profile says there is no trace
/// topic).
async fn env_of(sys: &ArticleSystem) -> Vec<(String, String)> {
    let topics = common::fresh_topics(&sys.config, &["payment"]).await;
    let mut env = sys.binary_env();
    env.push(("IDEMGUARD_FOREIGN_LOCKS__PATTERNS".into(), PATTERNS.into()));
    env.push(("IDEMGUARD_KAFKA__PAYMENT_TOPIC".into(), topics[0].clone()));
    env.push(("IDEMGUARD_REDIS__REDLOCK_NODES".into(), String::new()));
    env
}

fn entries<'a>(trace: &'a Json, layer: &str) -> Vec<&'a Json> {
    trace["data"]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["layer"] == layer)
        .collect()
}

async fn the_trace_of_an_order_shows_its_lock_decoded(dialect: Dialect) {
    let f = two_locked_orders(dialect).await;
    let env = env_of(&f.sys).await;

    let (_, out) = run_profiled(&env, &["trace", &f.order_a, "--json"]);
    let trace = first_json(&out);
    assert_eq!(trace["data"]["request_id"], f.request_a.as_str(), "{out}");
    let locks = entries(&trace, "lock");
    let lock = locks
        .iter()
        .find(|e| {
            e["source"]
                .as_str()
                .unwrap_or("")
                .starts_with("lock:order:")
        })
        .unwrap_or_else(|| panic!("the order's lock is in its trace: {out}"));
    let format = &lock["fields"]["format"];
    assert_eq!(format["kind"], "token", "{lock}");
    assert_eq!(format["shape"], "uuid", "{lock}");
    assert_eq!(format["request_id"], f.request_a.as_str(), "{lock}");
    assert_eq!(format["order_no"], f.order_a.as_str(), "{lock}");
    let summary = lock["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!(
            "= requestId {} of order {}",
            f.request_a, f.order_a
        )),
        "{summary}"
    );
    // §3.4's user lock names no order: the trace says why it does not read it.
    assert!(
        locks.iter().any(|e| e["summary"]
            .as_str()
            .unwrap_or("")
            .contains("`lock:user:*` does not say where the orderNo or requestId is")),
        "{out}"
    );
    assert!(out.contains("no trace topic"), "{out}");

    let (_, out) = run_profiled(&env, &["trace", &f.order_b, "--json"]);
    let trace = first_json(&out);
    let lock = entries(&trace, "lock")
        .into_iter()
        .find(|e| e["fields"]["format"]["kind"] == "redisson")
        .unwrap_or_else(|| panic!("the Redisson lock is in the trace: {out}"));
    let source = lock["source"].as_str().unwrap();
    assert!(
        source.starts_with(&format!("order:lock:{} ", f.order_b)),
        "read through the team's pattern order:lock:{{orderNo}}: {source}"
    );
    assert_eq!(
        lock["fields"]["format"]["client_id"],
        f.redisson_client.as_str()
    );
    let summary = lock["summary"].as_str().unwrap();
    assert!(
        summary.contains("Redisson lock held by client") && summary.contains("thread 57 (count 1)"),
        "{summary}"
    );
    assert_eq!(trace["ok"], true, "{out}");
}

#[tokio::test]
async fn mysql_the_trace_of_an_order_shows_its_lock_decoded() {
    the_trace_of_an_order_shows_its_lock_decoded(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_the_trace_of_an_order_shows_its_lock_decoded() {
    the_trace_of_an_order_shows_its_lock_decoded(Dialect::Postgres).await
}

/// `locks --json` on the profile: the §3.2 token is linked to its request and order; the
/// Redisson locks are decoded; a token that is no known requestId stays raw.
async fn locks_json_links_a_token_to_its_request(dialect: Dialect) {
    let f = two_locked_orders(dialect).await;
    let env = env_of(&f.sys).await;
    let stranger = format!("lock:order:ORDX{}", common::unique_suffix());
    let _stranger = RedisKeys(vec![stranger.clone()]);
    let unknown = uuid::Uuid::new_v4().to_string();
    set_if_absent(&mut redis_conn().await, &stranger, &unknown).await;

    let (code, out) = run_profiled(&env, &["locks", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let doc = first_json(&out);
    let rows = doc["data"]["locks"].as_array().expect("locks");
    let row = |key: &str| {
        rows.iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("{key} listed: {out}"))
    };
    let a = row(&format!("lock:order:{}", f.order_a));
    assert_eq!(a["format"]["request_id"], f.request_a.as_str(), "{a}");
    assert_eq!(a["format"]["order_no"], f.order_a.as_str(), "{a}");
    let b = row(&format!("order:lock:{}", f.order_b));
    assert_eq!(b["format"]["kind"], "redisson", "{b}");
    let s = row(&stranger);
    assert_eq!(s["format"]["kind"], "token", "{s}");
    assert!(s["format"].get("request_id").is_none(), "{s}");
}

#[tokio::test]
async fn mysql_locks_json_links_a_token_to_its_request() {
    locks_json_links_a_token_to_its_request(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_locks_json_links_a_token_to_its_request() {
    locks_json_links_a_token_to_its_request(Dialect::Postgres).await
}

/// Produces one JSON log line per message to `topic`, as a log shipper does (no key, no
/// headers; the message's timestamp is the line's time, as a shipper that forwards within
/// seconds gives it).
async fn ship(sys: &ArticleSystem, topic: &str, lines: &[Json]) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &sys.config.kafka.bootstrap_servers)
        .create()
        .unwrap();
    for line in lines {
        let payload = line.to_string();
        let at = line["timestamp"].as_i64().expect("a line's time");
        producer
            .send(
                FutureRecord::<(), _>::to(topic)
                    .payload(&payload)
                    .timestamp(at),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("ship a log line to {topic}: {e}"));
    }
}

fn log_line(ms: i64, service: &str, level: &str, order_no: &str, message: &str) -> Json {
    serde_json::json!({
        "timestamp": ms, "service": service, "level": level, "orderNo": order_no,
        "requestId": "", "eventId": "", "message": message,
    })
}

/// Three services ship their JSON log lines to a topic; the example profile (no trace topic)
/// with `logs.topic` set shows the order's lines in its timeline — service, level, message, in
/// time order, the topic named as their source — and leaves out another order's line and a
/// line outside the trace's windows.
#[tokio::test]
async fn logs_shipped_to_a_topic_appear_in_the_timeline() {
    let sys = article_system(Dialect::Mysql).await;
    let tag = common::unique_suffix();
    let order = format!("ORDL{tag}");
    let request = format!("APP:ORDER:20261201:{tag}");
    let now = now_ms();
    sys.record(&request, 1, now - 5 * MINUTE).await;
    sys.order(&request, &order, None, now - 5 * MINUTE).await;
    let topics = common::fresh_topics(&sys.config, &["shipped-logs"]).await;
    ship(
        &sys,
        &topics[0],
        &[
            log_line(
                now - 5 * MINUTE,
                "order-api",
                "INFO",
                &order,
                "order created",
            ),
            log_line(
                now - 4 * MINUTE,
                "order-api",
                "INFO",
                "ORD-OTHER",
                "not this one",
            ),
            log_line(
                now - 3 * 86_400_000,
                "order-api",
                "WARN",
                &order,
                "three days old",
            ),
            log_line(
                now - 4 * MINUTE,
                "payment-svc",
                "WARN",
                &order,
                "callback retried",
            ),
            log_line(
                now - 3 * MINUTE,
                "points-svc",
                "INFO",
                &order,
                "points granted",
            ),
        ],
    )
    .await;
    let mut env = env_of(&sys).await;
    env.push(("IDEMGUARD_LOGS__TOPIC".into(), topics[0].clone()));

    let (_, out) = run_profiled(&env, &["trace", &order, "--json"]);
    let trace = first_json(&out);
    let logs: Vec<(String, String, String, String)> = entries(&trace, "log")
        .iter()
        .map(|e| {
            let f = &e["fields"];
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("service"), s("level"), s("message"), s("source"))
        })
        .collect();
    let texts: Vec<(&str, &str, &str)> = logs
        .iter()
        .map(|(s, l, m, _)| (s.as_str(), l.as_str(), m.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            ("order-api", "INFO", "order created"),
            ("payment-svc", "WARN", "callback retried"),
            ("points-svc", "INFO", "points granted"),
        ],
        "{out}"
    );
    assert!(
        logs.iter().all(|(.., source)| source.contains(&topics[0])),
        "each line names the topic it was read from: {logs:?}"
    );
    assert!(out.contains("no trace topic"), "{out}");
    assert_eq!(trace["ok"], true, "{out}");
}
