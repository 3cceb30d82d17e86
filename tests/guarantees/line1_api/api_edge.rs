//! The HTTP edge attacked from outside, against the real service on both dialects:
//! internal errors never reach the client, identifiers are checked before anything is written,
//! slow and greedy clients are cut off, payment callbacks cannot book a payNo twice or an order
//! twice, and every error is problem+json — plus the standing bad-input suite, each row with
//! "nothing written". Raw TCP is used for what an HTTP client library refuses to send.

use crate::common;

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use idemguard::api::server::{self, Server};
use idemguard::config::{Config, Dialect};
use idemguard::db::Database;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// Everything the service logs, so a test can find an error id or a trace outcome in it.
fn log() -> &'static common::log::TestLog {
    common::log::test_log()
}

fn logged() -> String {
    log().text()
}

struct Service {
    db: Database,
    server: Server,
    addr: SocketAddr,
}

async fn service_with(dialect: Dialect, adjust: impl FnOnce(&mut Config)) -> Service {
    log();
    let (mut config, db) = migrated_database(dialect).await;
    let topics = fresh_topics(&config, &["payment.succeeded"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.trace.enabled = false;
    adjust(&mut config);
    let server = server::start(config, "127.0.0.1:0")
        .await
        .expect("service starts");
    Service {
        db,
        addr: server.addr,
        server,
    }
}

async fn service(dialect: Dialect) -> Service {
    service_with(dialect, |_| {}).await
}

impl Service {
    async fn stop(self) {
        self.server.shutdown.cancel();
        self.server.done.await.unwrap().unwrap();
    }

    /// Rows of every table a request can write.
    async fn written(&self) -> [i64; 4] {
        let mut n = [0; 4];
        for (i, t) in [
            "idempotency_record",
            "order_record",
            "payment_flow",
            "outbox",
        ]
        .iter()
        .enumerate()
        {
            n[i] = count(&self.db, t).await;
        }
        n
    }

    async fn send(&self, raw: &[u8]) -> Answer {
        exchange(self.addr, raw).await
    }

    async fn post(&self, path: &str, key: &str, body: &serde_json::Value) -> Answer {
        self.send(&request(
            "POST",
            path,
            &[("Idempotency-Key", key.as_bytes()), JSON],
            body.to_string().as_bytes(),
        ))
        .await
    }

    async fn new_order(&self, sku: i64) -> String {
        let a = self.post("/orders", &key(), &order_body(sku)).await;
        assert_eq!(a.status, 201, "{}", a.text());
        a.json()["orderNo"].as_str().unwrap().to_string()
    }
}

const JSON: (&str, &[u8]) = ("Content-Type", b"application/json");

fn key() -> String {
    idemguard::contracts::RequestId::generate("APP", "ORDER").to_string()
}

fn order_body(sku: i64) -> serde_json::Value {
    serde_json::json!({"userId": 42, "skuId": sku, "quantity": 1, "amount": 1999})
}

/// One HTTP/1.1 request, byte for byte; `Connection: close` so the answer ends with the stream.
fn request(method: &str, path: &str, headers: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    write!(
        r,
        "{method} {path} HTTP/1.1\r\nHost: idemguard\r\nConnection: close\r\n"
    )
    .unwrap();
    for (name, value) in headers {
        r.extend_from_slice(name.as_bytes());
        r.extend_from_slice(b": ");
        r.extend_from_slice(value);
        r.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || method == "POST" {
        write!(r, "Content-Length: {}\r\n", body.len()).unwrap();
    }
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(body);
    r
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    /// A problem+json answer with this status; returns the problem.
    fn problem(&self, status: u16) -> serde_json::Value {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "status {}: {}",
            self.status,
            self.text()
        );
        let p = self.json();
        assert_eq!(p["status"], status, "{p}");
        assert!(
            p["type"].is_string() && p["title"].is_string() && p["detail"].is_string(),
            "{p}"
        );
        p
    }
}

fn parse(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

/// Sends `raw` on a fresh connection and reads until the service closes it.
async fn exchange(addr: SocketAddr, raw: &[u8]) -> Answer {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(raw).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut buf))
        .await
        .expect("the service answers and closes")
        .unwrap();
    parse(&buf)
}

/// Reads until the peer closes; returns what was read and how long it took.
async fn read_until_closed(
    tcp: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut chunk = [0u8; 4096];
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the connection was still open after {limit:?}; read so far: {:?}",
        String::from_utf8_lossy(&buf)
    );
    (buf, started.elapsed())
}

async fn rename(db: &Database, from: &str, to: &str) {
    sqlx::query(&format!("ALTER TABLE {from} RENAME TO {to}"))
        .execute(&db.pool)
        .await
        .unwrap();
}

/// A 500 that says nothing of its cause: a generic problem with an error id, which is also in
/// the log next to the real error.
fn assert_opaque_500(a: &Answer, secret: &str) -> String {
    let p = a.problem(500);
    let text = a.text();
    for leak in [
        secret,
        "password",
        "postgres:",
        "mysql:",
        "127.0.0.1",
        "SELECT",
        "INSERT",
        "UPDATE",
        "order_record",
        "payment_flow",
        "relation",
        "exist",
        "database",
    ] {
        assert!(!text.contains(leak), "the answer carries `{leak}`: {text}");
    }
    let id = p["errorId"]
        .as_str()
        .unwrap_or_else(|| panic!("no errorId: {p}"))
        .to_string();
    assert!(p["detail"].as_str().unwrap().contains(&id), "{p}");
    assert!(
        logged()
            .lines()
            .any(|l| l.contains(&id) && l.contains("ERROR")),
        "error id {id} is not in the log"
    );
    id
}

/// A rule for every answer, its HTTP half: a database URL carrying a
/// password, internal errors forced on every endpoint (the table each one reads is renamed away
/// before the service first reads it), and no answer carries the secret, the URL or SQL. Once
/// the table is back, a retry with the same key succeeds: the failed request left a record a
/// retry can resolve.
async fn internal_errors_never_reach_the_client(dialect: Dialect) {
    let secret = format!("s3cret-{}", unique_suffix());
    let s = service_with(dialect, |c| {
        c.database.url = format!("{}?password={secret}", c.database.url)
    })
    .await;
    idemguard::db::inventory::set_stock(&s.db, 21, 10)
        .await
        .unwrap();

    rename(&s.db, "idempotency_record", "idempotency_record_away").await;
    assert_opaque_500(&s.post("/orders", &key(), &order_body(21)).await, &secret);
    rename(&s.db, "idempotency_record_away", "idempotency_record").await;

    rename(&s.db, "order_record", "order_record_away").await;
    let k = key();
    assert_opaque_500(&s.post("/orders", &k, &order_body(21)).await, &secret);
    assert_opaque_500(
        &s.send(&request(
            "GET",
            "/orders/20261129000000000abcdef012345",
            &[],
            b"",
        ))
        .await,
        &secret,
    );
    rename(&s.db, "order_record_away", "order_record").await;
    let retry = s.post("/orders", &k, &order_body(21)).await;
    assert_eq!(
        retry.status,
        201,
        "{dialect}: the retry after a 500 resolves the key: {}",
        retry.text()
    );
    let order_no = retry.json()["orderNo"].as_str().unwrap().to_string();

    rename(&s.db, "payment_flow", "payment_flow_away").await;
    let pk = idemguard::contracts::RequestId::generate("PSP", "PAY").to_string();
    let pay = serde_json::json!({"payNo": "PAY-21", "orderNo": order_no, "amount": 1999});
    assert_opaque_500(&s.post("/payments/callback", &pk, &pay).await, &secret);
    rename(&s.db, "payment_flow_away", "payment_flow").await;
    let retry = s.post("/payments/callback", &pk, &pay).await;
    assert_eq!(retry.status, 201, "{dialect}: {}", retry.text());
    assert_eq!(
        s.written().await[1..],
        [1, 1, 1],
        "{dialect}: one order, one payment, one outbox event"
    );
    assert_eq!(
        count(&s.db, "idempotency_record WHERE status = 'PROCESSING'").await,
        0
    );
    s.stop().await;
}

per_dialect!(internal_errors_never_reach_the_client => internal_errors_never_reach_the_client_postgres, internal_errors_never_reach_the_client_mysql);

fn pay_key() -> String {
    idemguard::contracts::RequestId::generate("PSP", "PAY").to_string()
}

fn callback(pay_no: &str, order_no: &str) -> serde_json::Value {
    serde_json::json!({"payNo": pay_no, "orderNo": order_no, "amount": 1999})
}

/// A payNo booked for order A sent for order B is refused and names A; the
/// second and later payNos for a paid order are refused as duplicate payments naming the first
/// payNo, traced `duplicate_payment`, never written to payment_flow or the outbox — also when
/// they all arrive at once. The same payNo for the same order still replays.
async fn payment_callbacks_book_one_payment_per_order(dialect: Dialect) {
    let s = service(dialect).await;
    idemguard::db::inventory::set_stock(&s.db, 31, 100)
        .await
        .unwrap();
    let (a, b) = (s.new_order(31).await, s.new_order(31).await);
    let p1 = format!("PAY-{}", unique_suffix());
    let k1 = pay_key();
    assert_eq!(
        s.post("/payments/callback", &k1, &callback(&p1, &a))
            .await
            .status,
        201
    );
    let booked = s.written().await;

    let conflict = s
        .post("/payments/callback", &pay_key(), &callback(&p1, &b))
        .await;
    let p = conflict.problem(422);
    assert!(
        p["type"].as_str().unwrap().ends_with("pay-no-conflict")
            && p["detail"].as_str().unwrap().contains(&a),
        "{p}"
    );

    for i in 2..=5 {
        let dup = s
            .post(
                "/payments/callback",
                &pay_key(),
                &callback(&format!("{p1}-{i}"), &a),
            )
            .await;
        let p = dup.problem(422);
        assert!(
            p["type"].as_str().unwrap().ends_with("duplicate-payment")
                && p["detail"].as_str().unwrap().contains(&p1),
            "{p}"
        );
    }
    assert_eq!(
        s.written().await[2..],
        booked[2..],
        "{dialect}: refused callbacks write no payment and no event"
    );
    assert!(
        logged()
            .lines()
            .any(|l| l.contains("duplicate_payment") && l.contains(&a)),
        "the duplicate is traced"
    );

    // Same payNo, same order: the first booking, as before (with a new key and the same key).
    let again = s
        .post("/payments/callback", &pay_key(), &callback(&p1, &a))
        .await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["payNo"], p1.as_str());
    let replay = s.post("/payments/callback", &k1, &callback(&p1, &a)).await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );

    // Twenty payNos for one order at once: one is booked, nineteen are duplicates.
    let c = s.new_order(31).await;
    let sends = (0..20).map(|i| {
        let (addr, body) = (
            s.addr,
            callback(&format!("PAY-C{i}-{}", unique_suffix()), &c),
        );
        async move {
            exchange(
                addr,
                &request(
                    "POST",
                    "/payments/callback",
                    &[("Idempotency-Key", pay_key().as_bytes()), JSON],
                    body.to_string().as_bytes(),
                ),
            )
            .await
            .status
        }
    });
    let statuses = futures::future::join_all(sends).await;
    assert_eq!(
        statuses.iter().filter(|st| **st == 201).count(),
        1,
        "{dialect}: {statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|st| **st == 422).count(),
        19,
        "{dialect}: {statuses:?}"
    );
    assert_eq!(
        count(&s.db, &format!("payment_flow WHERE order_no = '{c}'")).await,
        1
    );
    assert_eq!(
        count(&s.db, "outbox").await,
        2,
        "{dialect}: one event per paid order"
    );
    s.stop().await;
}

per_dialect!(payment_callbacks_book_one_payment_per_order => payment_callbacks_book_one_payment_per_order_postgres, payment_callbacks_book_one_payment_per_order_mysql);

/// Partial headers, headers a byte at a time, a body a byte at a time and an
/// idle keep-alive connection are all closed within their configured timeouts. (No database
/// decision is involved: one dialect.)
#[tokio::test]
async fn slow_and_idle_clients_are_cut_off() {
    let s = service_with(Dialect::Postgres, |c| {
        c.api.header_read_timeout = Duration::from_secs(1);
        c.api.body_read_timeout = Duration::from_secs(2);
        c.api.idle_timeout = Duration::from_secs(4);
    })
    .await;
    let limit = Duration::from_secs(8);

    // Partial headers, then silence: cut at the header timeout, not the (longer) idle one.
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    tcp.write_all(b"POST /orders HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, took) = read_until_closed(&mut tcp, limit).await;
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "cut by the header timeout, not the idle one: {took:?}"
    );

    // Headers trickling in, one byte every 300 ms: the timer counts from the head's start.
    let (mut reader, mut writer) = TcpStream::connect(s.addr).await.unwrap().into_split();
    let trickle = tokio::spawn(async move {
        for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n" {
            if writer.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let (got, took) = read_until_closed(&mut reader, limit).await;
    assert!(
        got.is_empty() && took < Duration::from_secs(3),
        "{took:?} {:?}",
        String::from_utf8_lossy(&got)
    );
    trickle.abort();

    // A body trickling in, one byte every 700 ms: 408 problem+json at the body timeout, closed.
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    let head = format!("POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", key());
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = tcp.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if writer.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
    });
    let started = Instant::now();
    let mut got = Vec::new();
    tokio::time::timeout(limit, reader.read_to_end(&mut got))
        .await
        .expect("the slow body is cut")
        .ok();
    let took = started.elapsed();
    trickle.abort();
    parse(&got).problem(408);
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(4),
        "{took:?}"
    );

    // An idle keep-alive connection is kept for the idle timeout after its answer, then closed;
    // one that never sends anything likewise.
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (got, took) = read_until_closed(&mut tcp, limit).await;
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        took >= Duration::from_millis(3800),
        "kept alive for the idle timeout: {took:?}"
    );
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    let (got, took) = read_until_closed(&mut tcp, limit).await;
    assert!(
        got.is_empty() && took >= Duration::from_millis(3800),
        "{took:?}"
    );
    assert_eq!(s.written().await, [0, 0, 0, 0]);
    s.stop().await;
}

/// 300 idle connections were all held. Connections beyond `max_connections`
/// are not served until one closes.
#[tokio::test]
async fn connections_beyond_the_limit_wait() {
    let s = service_with(Dialect::Postgres, |c| {
        c.api.idle_timeout = Duration::from_secs(30);
        c.api.max_connections = 3;
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(s.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fourth = TcpStream::connect(s.addr).await.unwrap();
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let early = tokio::time::timeout(Duration::from_secs(1), fourth.read_to_end(&mut got)).await;
    assert!(
        early.is_err() && got.is_empty(),
        "served beyond the limit: {:?}",
        String::from_utf8_lossy(&got)
    );
    drop(held.pop());
    let (got, _) = read_until_closed(&mut fourth, Duration::from_secs(3)).await;
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    drop(held);
    s.stop().await;
}

/// One row of the bad-input suite: a request, byte for byte, and the status it must get.
struct Row {
    name: String,
    request: Vec<u8>,
    status: u16,
}

fn row(name: impl Into<String>, request: Vec<u8>, status: u16) -> Row {
    Row {
        name: name.into(),
        request,
        status,
    }
}

/// Requests hyper refuses while parsing, before any code of ours runs. It answers them itself,
/// with an empty body, and hyper 1.x has no hook for that answer (see src/api/edge.rs): these
/// rows check the status and that nothing is written.
const ANSWERED_BY_HYPER: &[&str] = &[
    "NUL in the key",
    "bare CR in a header",
    "200 headers",
    "raw 0xff in the path",
];

fn post_order(key: Option<&[u8]>, content_type: Option<&[u8]>, body: &[u8]) -> Vec<u8> {
    let mut headers: Vec<(&str, &[u8])> = Vec::new();
    if let Some(k) = key {
        headers.push(("Idempotency-Key", k));
    }
    if let Some(ct) = content_type {
        headers.push(("Content-Type", ct));
    }
    request("POST", "/orders", &headers, body)
}

fn keyed_order(body: &str) -> Vec<u8> {
    post_order(
        Some(key().as_bytes()),
        Some(b"application/json"),
        body.as_bytes(),
    )
}

fn bad_keys() -> Vec<Row> {
    let body = order_body(41).to_string();
    let with_key = |k: &[u8]| post_order(Some(k), Some(b"application/json"), body.as_bytes());
    let far_future = format!("APP:ORDER:29991231:{}", uuid::Uuid::now_v7());
    let (k1, k2) = (key(), key());
    vec![
        row(
            "missing key",
            post_order(None, Some(b"application/json"), body.as_bytes()),
            400,
        ),
        row("empty key", with_key(b""), 400),
        row(
            "129-character key",
            with_key(format!("APP:ORDER:20261129:{}", "a".repeat(110)).as_bytes()),
            400,
        ),
        row(
            "10 KB key",
            with_key(format!("APP:ORDER:20261129:{}", "a".repeat(10_240)).as_bytes()),
            400,
        ),
        row(
            "unicode key",
            with_key("APP:ORDER:20261129:ключ-уникальный".as_bytes()),
            400,
        ),
        row(
            "0xff bytes in the key",
            with_key(b"APP:ORDER:20261129:\xff\xffabcdefgh"),
            400,
        ),
        row(
            "space in the key",
            with_key(b"APP:ORDER:20261129:abc defgh"),
            400,
        ),
        row(
            "tab in the key",
            with_key(b"APP:ORDER:20261129:abc\tdefgh"),
            400,
        ),
        row(
            "NUL in the key",
            with_key(b"APP:ORDER:20261129:abc\0defgh"),
            400,
        ),
        row("bare number key", with_key(b"1732881942123"), 400),
        row("far-future key", with_key(far_future.as_bytes()), 400),
        row(
            "two keys",
            request(
                "POST",
                "/orders",
                &[
                    ("Idempotency-Key", k1.as_bytes()),
                    ("Idempotency-Key", k2.as_bytes()),
                    JSON,
                ],
                body.as_bytes(),
            ),
            400,
        ),
    ]
}

fn bad_bodies() -> Vec<Row> {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let good = order_body(41).to_string();
    let keyed_as = |ct: Option<&[u8]>| post_order(Some(key().as_bytes()), ct, good.as_bytes());
    let mut declared_10mb = post_order(Some(key().as_bytes()), Some(b"application/json"), b"");
    let at = declared_10mb
        .windows(16)
        .position(|w| w == b"Content-Length: ")
        .unwrap();
    declared_10mb.splice(at..at + 17, b"Content-Length: 10485760".iter().copied());
    let many_headers: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("X-H{i}"), b"v".to_vec()))
        .collect();
    let many: Vec<(&str, &[u8])> = many_headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    vec![
        row("malformed JSON", keyed_order(r#"{"userId":"#), 400),
        row(
            "wrong types",
            keyed_order(r#"{"userId":"42","skuId":41,"quantity":1,"amount":1999}"#),
            400,
        ),
        row(
            "a 60 KB string",
            keyed_order(&format!(
                r#"{{"userId":"{}","skuId":41,"quantity":1,"amount":1999}}"#,
                "x".repeat(60_000)
            )),
            400,
        ),
        row(
            "float quantity",
            keyed_order(r#"{"userId":42,"skuId":41,"quantity":1.5,"amount":1999}"#),
            400,
        ),
        row(
            "overflowing amount",
            keyed_order(r#"{"userId":42,"skuId":41,"quantity":1,"amount":99999999999999999999}"#),
            400,
        ),
        row(
            "1e400",
            keyed_order(r#"{"userId":42,"skuId":41,"quantity":1,"amount":1e400}"#),
            400,
        ),
        row("deep nesting", keyed_order(&deep), 400),
        row(
            "extra field",
            keyed_order(r#"{"userId":42,"skuId":41,"quantity":1,"amount":1999,"admin":true}"#),
            400,
        ),
        row("JSON null", keyed_order("null"), 400),
        row(
            "negative userId",
            keyed_order(r#"{"userId":-1,"skuId":41,"quantity":1,"amount":1999}"#),
            400,
        ),
        row(
            "negative skuId",
            keyed_order(r#"{"userId":42,"skuId":-41,"quantity":1,"amount":1999}"#),
            400,
        ),
        row("no content type", keyed_as(None), 415),
        row("text/plain", keyed_as(Some(b"text/plain")), 415),
        row(
            "form",
            keyed_as(Some(b"application/x-www-form-urlencoded")),
            415,
        ),
        row("10 MB body declared", declared_10mb, 413),
        row("200 headers", request("GET", "/healthz", &many, b""), 431),
        row(
            "bare CR in a header",
            request("GET", "/healthz", &[("X-A", b"a\rb")], b""),
            400,
        ),
    ]
}

fn bad_routes() -> Vec<Row> {
    let get = |path: &str| request("GET", path, &[], b"");
    let mut raw_ff_path = get("/orders/X");
    raw_ff_path["GET /orders/".len()] = 0xff;
    vec![
        row("unknown route", get("/nope"), 404),
        row("path traversal", get("/orders/../healthz"), 404),
        row("encoded traversal", get("/orders/%2e%2e%2fhealthz"), 400),
        row("%00 in the path", get("/orders/%00"), 400),
        row("%ff in the path", get("/orders/%ff"), 400),
        row("raw 0xff in the path", raw_ff_path, 400),
        row(
            "trailing space in the orderNo",
            get("/orders/20261129000000000abcdef012345%20"),
            400,
        ),
        row(
            "DELETE /orders",
            request("DELETE", "/orders", &[], b""),
            405,
        ),
        row("GET /orders", get("/orders"), 405),
        row(
            "PUT /payments/callback",
            request("PUT", "/payments/callback", &[JSON], b"{}"),
            405,
        ),
        row(
            "POST /healthz",
            request("POST", "/healthz", &[JSON], b"{}"),
            405,
        ),
        row("BREW /orders", request("BREW", "/orders", &[], b""), 405),
    ]
}

fn bad_identifiers(order_no: &str) -> Vec<Row> {
    let cb = |pay_no: &str, order_no: &str| {
        let body = callback(pay_no, order_no).to_string();
        request(
            "POST",
            "/payments/callback",
            &[("Idempotency-Key", pay_key().as_bytes()), JSON],
            body.as_bytes(),
        )
    };
    let o = order_no;
    vec![
        row("NUL before the payNo", cb("\0PAY-1", o), 400),
        row("NUL after the payNo", cb("PAY-1\0", o), 400),
        row("trailing space in the payNo", cb("PAY-1 ", o), 400),
        row("leading space in the payNo", cb(" PAY-1", o), 400),
        row("tab in the payNo", cb("PAY\t1", o), 400),
        row("empty payNo", cb("", o), 400),
        row("65-character payNo", cb(&"P".repeat(65), o), 400),
        row("NUL after the orderNo", cb("PAY-1", &format!("{o}\0")), 400),
        row(
            "leading space in the orderNo",
            cb("PAY-1", &format!(" {o}")),
            400,
        ),
        row(
            "trailing space in the orderNo",
            cb("PAY-1", &format!("{o} ")),
            400,
        ),
        row("10 KB orderNo", cb("PAY-1", &"9".repeat(10_240)), 400),
        row("orderNo that is not one", cb("PAY-1", "not an order!"), 400),
    ]
}

/// The standing bad-input suite: every row gets its status as problem+json and
/// writes nothing to idempotency_record, order_record, payment_flow or outbox.
async fn bad_input_is_refused_and_writes_nothing(dialect: Dialect) {
    let s = service(dialect).await;
    idemguard::db::inventory::set_stock(&s.db, 41, 100)
        .await
        .unwrap();
    let order_no = s.new_order(41).await;
    let mut before = s.written().await;
    let rows: Vec<Row> = [
        bad_keys(),
        bad_bodies(),
        bad_routes(),
        bad_identifiers(&order_no),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut failures = Vec::new();
    for r in rows {
        let a = s.send(&r.request).await;
        let by_hyper = ANSWERED_BY_HYPER.contains(&r.name.as_str());
        let ok = a.status == r.status
            && (by_hyper && a.body.is_empty()
                || !by_hyper && std::panic::catch_unwind(|| a.problem(r.status)).is_ok());
        let ok = ok && a.body.len() < 1024;
        if !ok {
            failures.push(format!(
                "{}: {} {:?} {}",
                r.name,
                a.status,
                a.header("content-type"),
                a.text().chars().take(200).collect::<String>()
            ));
        }
        let after = s.written().await;
        if after != before {
            failures.push(format!("{}: wrote rows {before:?} -> {after:?}", r.name));
            before = after;
        }
    }
    assert!(failures.is_empty(), "{dialect}:\n{}", failures.join("\n"));
    s.stop().await;
}

per_dialect!(bad_input_is_refused_and_writes_nothing => bad_input_is_refused_and_writes_nothing_postgres, bad_input_is_refused_and_writes_nothing_mysql);

/// Makes the database refuse every finalize (an UPDATE that ends a record) until it is dropped.
async fn refuse_finalize(db: &Database, dialect: Dialect) {
    let statements: &[&str] = match dialect {
        Dialect::Postgres => &[
            "CREATE FUNCTION refuse_finalize() RETURNS trigger AS $$ BEGIN IF NEW.status <> 'PROCESSING' THEN RAISE EXCEPTION 'finalize refused by the test'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER refuse_finalize BEFORE UPDATE ON idempotency_record FOR EACH ROW EXECUTE FUNCTION refuse_finalize()",
        ],
        Dialect::Mysql => &["CREATE TRIGGER refuse_finalize BEFORE UPDATE ON idempotency_record FOR EACH ROW BEGIN IF NEW.status <> 'PROCESSING' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'finalize refused by the test'; END IF; END"],
    };
    for sql in statements {
        sqlx::Executor::execute(&db.pool, *sql).await.unwrap();
    }
}

async fn allow_finalize(db: &Database, dialect: Dialect) {
    let sql = if dialect == Dialect::Postgres {
        "DROP TRIGGER refuse_finalize ON idempotency_record"
    } else {
        "DROP TRIGGER refuse_finalize"
    };
    sqlx::Executor::execute(&db.pool, sql).await.unwrap();
}

/// The rule for every answer, for the write after the business effect: the order is created
/// but the database refuses to store the record's outcome. The record must not stay PROCESSING
/// under this live instance (every retry 409, for as long as it lives): the outcome is written
/// as soon as the database takes it, and the retry gets the order.
async fn a_refused_outcome_is_written_later(dialect: Dialect) {
    let s = service_with(dialect, |c| c.idempotency.fast_path = false).await;
    idemguard::db::inventory::set_stock(&s.db, 51, 10)
        .await
        .unwrap();
    refuse_finalize(&s.db, dialect).await;
    let k = key();
    let first = s.post("/orders", &k, &order_body(51)).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(
        s.post("/orders", &k, &order_body(51)).await.status,
        409,
        "in flight while its outcome is refused"
    );
    allow_finalize(&s.db, dialect).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let retry = loop {
        let r = s.post("/orders", &k, &order_body(51)).await;
        if r.status != 409 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        (retry.status, retry.header("idempotent-replayed")),
        (201, Some("true")),
        "{dialect}: {}",
        retry.text()
    );
    assert_eq!(
        retry.body, first.body,
        "{dialect}: the first answer, replayed"
    );
    assert_eq!(count(&s.db, "order_record").await, 1);
    s.stop().await;
}

per_dialect!(a_refused_outcome_is_written_later => a_refused_outcome_is_written_later_postgres, a_refused_outcome_is_written_later_mysql);
