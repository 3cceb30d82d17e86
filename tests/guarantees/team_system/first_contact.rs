//! First contact with a team's system, as a new user makes it: `profile suggest` on systems
//! idemguard never saw (set up here, not by idemguard), `doctor` clean on the file, `trace`
//! finding the records, locks, every Kafka copy and the log lines — and, with each assumption
//! deliberately broken, a trace that says what is wrong instead of "not found".
//!
//! Two systems:
//! - the article's (tests/common/article.rs) on both dialects: DATETIME columns written at
//!   +08:00 on a UTC server, integer status codes, IDs only in message bodies, messages keyed
//!   by orderNo through librdkafka's partitioner, zap-style JSON logs (`ts`, `msg`), a §3.2
//!   `setIfAbsent` token and a Redisson lock; one order whose payment exists only in Kafka,
//!   twenty and fifty minutes after it;
//! - a PostgreSQL team's own: TIMESTAMPTZ, text status ('INIT', 'DONE'), its own table and
//!   column names, payment events keyed by orderNumber through Java's murmur2 and events
//!   without a key, logback JSON logs (`@timestamp`, `message`, MDC fields), Redisson locks
//!   under the team's prefix.
//!
//! Every test has its own database, topics, key prefix and log directory.

use crate::common;
use crate::common::article;
use crate::common::first_contact;

use std::path::Path;

use article::{
    article_system, now_ms, redis_conn, redisson_lock, set_if_absent, ArticleSystem, RedisKeys,
};
use first_contact::{
    crc32_partition, entries, failing, kafka_copies, letters, murmur2_partition, produce,
    profile_notes, source_profile_rows, suggest, suggest_database, trace, value, warnings,
    Produced,
};
use idemguard::config::Dialect;
use serde_json::json;

const MINUTE: i64 = 60_000;

/// The article's shop mid-incident: order U created an hour ago, its payment callback booked
/// nowhere (its events only in Kafka, at +20 and +50 minutes: a provider repeating it), its
/// §3.2 lock still held; a recent order (the newest row); other orders' payment events.
struct ArticleIncident {
    sys: ArticleSystem,
    order: String,
    request: String,
    prefix: String,
    payment_topic: String,
    /// A team's own topic of other JSON messages (audit records): not trace events.
    audit_topic: String,
    logs: tempfile::TempDir,
    _keys: RedisKeys,
}

impl ArticleIncident {
    /// What a new user sets: the database, the topics and the log files; nothing else.
    fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "IDEMGUARD_DATABASE__URL".into(),
                self.sys.config.database.url.clone(),
            ),
            (
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC".into(),
                self.payment_topic.clone(),
            ),
            (
                "IDEMGUARD_KAFKA__TRACE_TOPIC".into(),
                self.audit_topic.clone(),
            ),
            (
                "IDEMGUARD_LOGS__FILES".into(),
                format!("{}/*.log", self.logs.path().display()),
            ),
        ]
    }
}

/// Other orders' numbers: nine of any partition, and three that librdkafka puts in the
/// partition murmur2 gives `order` while murmur2 puts them elsewhere — what a trace reading by
/// the wrong partitioner scans there, and must see through.
fn other_orders(order: &str, tag: &str) -> Vec<String> {
    let wrong = murmur2_partition(order);
    let candidates = (0..).map(|n| format!("2027{n:03}{tag}"));
    let mut out: Vec<String> = candidates.clone().take(9).collect();
    out.extend(
        candidates
            .skip(9)
            .filter(|o| crc32_partition(o) == wrong && murmur2_partition(o) != wrong)
            .take(3),
    );
    out
}

/// An order number whose partition under murmur2 differs from librdkafka's (so a wrong
/// partitioner reads the wrong partition).
fn order_number(tag: &str) -> String {
    (0..)
        .map(|n| format!("2026{n:02}{tag}"))
        .find(|o| murmur2_partition(o) != crc32_partition(o))
        .unwrap()
}

async fn article_incident(dialect: Dialect) -> ArticleIncident {
    let sys = article_system(dialect).await;
    let tag = common::unique_suffix();
    let (order, request) = (order_number(&tag), uuid::Uuid::new_v4().to_string());
    let t0 = now_ms() - 60 * MINUTE;
    sys.record(&request, 0, t0).await;
    sys.order(&request, &order, None, t0).await;
    let recent = format!("9{tag}");
    let recent_request = uuid::Uuid::new_v4().to_string();
    sys.record(&recent_request, 1, now_ms() - 30_000).await;
    sys.order(&recent_request, &recent, None, now_ms() - 30_000)
        .await;

    let topics = common::fresh_topics(&sys.config, &["shop-pay", "shop-audit"]).await;
    let body =
        |o: &str, e: &str| json!({"orderNo": o, "eventId": e, "amount": 9900, "status": "SUCCESS"});
    let mut messages = vec![
        Produced {
            key: Some(order.clone()),
            partition: None,
            body: body(&order, &format!("E1{tag}")),
            at_ms: t0 + 20 * MINUTE,
        },
        Produced {
            key: Some(order.clone()),
            partition: None,
            body: body(&order, &format!("E2{tag}")),
            at_ms: t0 + 50 * MINUTE,
        },
    ];
    // Other orders' events, in every partition (a partition read by the wrong partitioner has
    // keys it would put elsewhere).
    for other in other_orders(&order, &tag) {
        let n = messages.len();
        messages.push(Produced {
            key: Some(other.clone()),
            partition: None,
            body: body(&other, &format!("X{n}{tag}")),
            at_ms: t0 + 20 * MINUTE,
        });
    }
    let servers = sys.config.kafka.bootstrap_servers.clone();
    produce(&servers, &topics[0], &messages).await;
    let audit = Produced {
        key: Some(order.clone()),
        partition: None,
        body: json!({"audit": "order.viewed", "orderNo": order}),
        at_ms: t0 + MINUTE,
    };
    produce(&servers, &topics[1], &[audit]).await;

    let prefix = letters(&tag);
    let (token_key, redisson_key) = (
        format!("{prefix}:lock:order:{order}"),
        format!("{prefix}:lock:pay:{recent}"),
    );
    let mut c = redis_conn().await;
    set_if_absent(&mut c, &token_key, &request).await;
    redisson_lock(
        &mut c,
        &redisson_key,
        &format!("{}:57", uuid::Uuid::new_v4()),
    )
    .await;

    let logs = tempfile::tempdir().unwrap();
    let zap = |ms: i64, svc: &str, msg: &str, event: &str| {
        json!({"ts": ms as f64 / 1000.0, "level": "info", "msg": msg, "service": svc, "orderNo": order, "requestId": request, "eventId": event}).to_string()
    };
    let lines = [
        zap(t0, "order-svc", "order created", ""),
        zap(
            t0 + 20 * MINUTE,
            "pay-svc",
            "payment callback",
            &format!("E1{tag}"),
        ),
        zap(
            t0 + 50 * MINUTE,
            "pay-svc",
            "payment callback repeated",
            &format!("E2{tag}"),
        ),
    ];
    std::fs::write(logs.path().join("shop.log"), lines.join("\n") + "\n").unwrap();
    ArticleIncident {
        sys,
        order,
        request,
        prefix,
        payment_topic: topics[0].clone(),
        audit_topic: topics[1].clone(),
        logs,
        _keys: RedisKeys(vec![token_key, redisson_key]),
    }
}

/// The suggestion names what the article's system is, each with what it was based on.
fn the_article_is_recognised(profile: &str, f: &ArticleIncident) {
    use article::{IDEM, MESSAGES, ORDERS, PAYMENTS, POINTS};
    for (logical, table) in [
        ("idempotency_record", IDEM),
        ("order_record", ORDERS),
        ("payment_flow", PAYMENTS),
        ("points_ledger", POINTS),
        ("notification", MESSAGES),
    ] {
        assert_eq!(
            value(profile, &format!("source.{logical}"), "table").as_str(),
            Some(table),
            "{profile}"
        );
    }
    assert_eq!(
        value(profile, "source.stock_movement", "table").as_str(),
        Some("absent")
    );
    assert_eq!(
        value(profile, "source.order_record", "time").as_str(),
        Some("datetime")
    );
    assert_eq!(
        value(profile, "source", "time_zone").as_str(),
        Some("+08:00"),
        "{profile}"
    );
    assert!(
        profile.contains("ahead of the server's clock"),
        "the zone says what it is based on: {profile}"
    );
    assert_eq!(
        value(profile, "source.idempotency_record", "status.SUCCEEDED").as_str(),
        Some("1")
    );
    assert!(
        profile.contains("GUESS from the article's convention"),
        "{profile}"
    );
    assert_eq!(
        value(profile, "source.order_record", "columns.sku_id").as_str(),
        Some("")
    );
    assert_eq!(
        value(profile, "kafka", "partitioner").as_str(),
        Some("consistent_random"),
        "{profile}"
    );
    assert_eq!(
        value(profile, "kafka", "trace_topic").as_str(),
        Some(""),
        "{profile}"
    );
    assert_eq!(
        value(profile, "kafka_ids.payment", "order_no")
            .as_array()
            .unwrap()[0]
            .as_str(),
        Some("json:/orderNo")
    );
    assert_eq!(
        value(profile, "kafka_ids.payment", "event_id")
            .as_array()
            .unwrap()[0]
            .as_str(),
        Some("json:/eventId")
    );
    let patterns = value(profile, "foreign_locks", "patterns");
    let patterns: Vec<&str> = patterns
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        patterns.contains(&format!("{}:lock:order:{{orderNo}}", f.prefix).as_str()),
        "{profile}"
    );
    assert_eq!(value(profile, "logs", "time_field").as_str(), Some("ts"));
    assert_eq!(
        value(profile, "logs", "message_field").as_str(),
        Some("msg")
    );
}

/// `profile suggest` → `doctor` clean → `trace` finds the rows, the lock, both Kafka copies
/// (searched forward: no row carries the payment's time) and the log lines, with no warning.
async fn the_article_from_suggest_to_trace(dialect: Dialect) {
    let f = article_incident(dialect).await;
    let env = f.env();
    let (config, profile) = suggest(f.logs.path(), &env, &format!("{}:*", f.prefix));
    the_article_is_recognised(&profile, &f);
    first_contact::doctor_is_clean(&config, &[], &profile);

    let t = trace(&config, &[], &f.order);
    assert_eq!(t["data"]["request_id"], f.request.as_str(), "{t:#}");
    assert!(
        warnings(&t).is_empty(),
        "a clean trace: {:#?}",
        warnings(&t)
    );
    assert!(
        entries(&t, "db").len() >= 2,
        "the record and the order: {t:#}"
    );
    assert_eq!(
        kafka_copies(&t, &f.payment_topic),
        2,
        "both copies, found forward: {t:#}"
    );
    assert!(
        t["data"]["read_cost"]["forward_search"].is_object(),
        "{t:#}"
    );
    let logs: Vec<&str> = entries(&t, "log")
        .iter()
        .filter_map(|e| e["fields"]["message"].as_str())
        .collect();
    assert_eq!(
        logs,
        [
            "order created",
            "payment callback",
            "payment callback repeated"
        ],
        "{t:#}"
    );
    let lock = entries(&t, "lock")
        .into_iter()
        .find(|e| e["fields"]["format"]["kind"] == "token")
        .unwrap_or_else(|| panic!("the §3.2 lock: {t:#}"));
    assert_eq!(lock["fields"]["format"]["request_id"], f.request.as_str());
    broken_article_assumptions(&f, &config);
}

/// Each assumption broken on top of the suggested file: the trace says what, naming the key.
fn broken_article_assumptions(f: &ArticleIncident, config: &Path) {
    let with = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
    let said = |env: Vec<(String, String)>, needle: &str| {
        let t = trace(config, &env, &f.order);
        let w = warnings(&t);
        assert!(
            w.iter().any(|x| x.contains(needle)),
            "{env:?}: the trace says {needle:?}: {w:#?}"
        );
        t
    };
    // The example profile's zone on rows read as UTC: 8 hours off, said with the fix; the log
    // lines outside the (shifted) windows are counted.
    let t = said(
        with("IDEMGUARD_SOURCE__TIME_ZONE", "+00:00"),
        "set source.time_zone = \"+08:00\"",
    );
    assert!(
        warnings(&t)
            .iter()
            .any(|w| w.contains("log line(s) name this trace's IDs but are not shown")),
        "{:#?}",
        warnings(&t)
    );
    // The Java client's partitioner where the producer used librdkafka's: the shortcut is
    // caught on what it scans, every partition read, both copies found.
    let t = said(
        with("IDEMGUARD_KAFKA__PARTITIONER", "murmur2_random"),
        "the partition shortcut did not hold",
    );
    assert_eq!(kafka_copies(&t, &f.payment_topic), 2, "{t:#}");
    // No forward search: said, not silent.
    said(
        with("IDEMGUARD_CONSOLE__FORWARD_SEARCH", "0s"),
        "console.forward_search is 0s",
    );
    // The defaults' field names on zap's lines: read anyway.
    let env = vec![
        (
            "IDEMGUARD_LOGS__TIME_FIELD".to_string(),
            "timestamp".to_string(),
        ),
        (
            "IDEMGUARD_LOGS__MESSAGE_FIELD".to_string(),
            "message".to_string(),
        ),
    ];
    let t = trace(config, &env, &f.order);
    assert_eq!(
        entries(&t, "log").len(),
        3,
        "zap's ts/msg read without configuration: {t:#}"
    );
    // A mapped column the table lacks: the order still shows, the column said unknown.
    let t = trace(
        config,
        &with("IDEMGUARD_SOURCE__ORDER_RECORD__COLUMNS__SKU_ID", "sku_id"),
        &f.order,
    );
    let notes = profile_notes(&t);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("sku_id shown as unknown") && n.contains("does not exist")),
        "{notes:#?}"
    );
    assert!(
        entries(&t, "db")
            .iter()
            .any(|e| e["source"] == "order_record"),
        "the order row still shows: {t:#}"
    );
    // A topic of other messages as the trace topic: counted and said.
    said(
        with("IDEMGUARD_KAFKA__TRACE_TOPIC", &f.audit_topic),
        "could not be read as trace events",
    );
    let (_, out, err) = first_contact::run(
        Some(config),
        &with("IDEMGUARD_KAFKA__TRACE_TOPIC", &f.audit_topic),
        &["rates", "--json"],
    );
    assert!(
        out.contains("could not be read as trace events"),
        "rates: {out}{err}"
    );
}

per_dialect!(the_article_from_suggest_to_trace => postgres_the_article_from_suggest_to_trace, mysql_the_article_from_suggest_to_trace);

/// A team's own checkout system on PostgreSQL: instants (TIMESTAMPTZ), text states, its own
/// names for every table and column.
const ACME: &str = "
CREATE TABLE acme_checkout_request (
  id BIGSERIAL PRIMARY KEY,
  idempotency_key VARCHAR(80) NOT NULL UNIQUE,
  payload_hash VARCHAR(64) NOT NULL,
  state VARCHAR(16) NOT NULL,
  http_status INT NULL,
  created_time TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE acme_purchase (
  id BIGSERIAL PRIMARY KEY,
  order_number VARCHAR(40) NOT NULL UNIQUE,
  idempotency_key VARCHAR(80) NOT NULL UNIQUE,
  buyer_id BIGINT NOT NULL,
  state VARCHAR(16) NOT NULL,
  total_amount BIGINT NOT NULL,
  created_time TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE acme_payment_txn (
  id BIGSERIAL PRIMARY KEY,
  txn_no VARCHAR(64) NOT NULL UNIQUE,
  order_number VARCHAR(40) NOT NULL,
  event_id VARCHAR(64) NOT NULL,
  amount BIGINT NOT NULL,
  status VARCHAR(16) NOT NULL,
  created_time TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// The team's checkout mid-incident: order B paid ten minutes ago, its payment event sent twice
/// — keyed by orderNumber through murmur2, and again without a key by the provider's retry —
/// its Redisson lock held under the team's prefix; logback's JSON lines of it.
struct AcmeIncident {
    config: idemguard::config::Config,
    order: String,
    request: String,
    prefix: String,
    payment_topic: String,
    logs: tempfile::TempDir,
    _keys: RedisKeys,
}

async fn acme_incident() -> AcmeIncident {
    let config = common::fresh_database_config(Dialect::Postgres).await;
    let db = idemguard::db::Database::connect(&config).await.unwrap();
    for statement in ACME.split(";\n") {
        common::exec(&db, statement).await;
    }
    let tag = common::unique_suffix();
    let order = format!("AC-{tag}-7");
    let request = format!("chk_{tag}");
    let event = uuid::Uuid::new_v4().to_string();
    let t0 = now_ms() - 10 * MINUTE;
    let at = |ms: i64| format!("to_timestamp({ms} / 1000.0)");
    common::exec(&db, &format!("INSERT INTO acme_checkout_request (idempotency_key, payload_hash, state, http_status, created_time, expires_at) VALUES ('{request}', 'h', 'DONE', 200, {}, {})", at(t0), at(t0 + 86_400_000))).await;
    common::exec(&db, &format!("INSERT INTO acme_purchase (order_number, idempotency_key, buyer_id, state, total_amount, created_time) VALUES ('{order}', '{request}', 7, 'DONE', 4200, {})", at(t0))).await;
    common::exec(&db, &format!("INSERT INTO acme_checkout_request (idempotency_key, payload_hash, state, created_time, expires_at) VALUES ('chk_{tag}_b', 'h', 'INIT', now(), now())")).await;
    common::exec(&db, &format!("INSERT INTO acme_payment_txn (txn_no, order_number, event_id, amount, status, created_time) VALUES ('TX{tag}', '{order}', '{event}', 4200, 'PAID', {})", at(t0 + MINUTE))).await;
    db.pool.close().await;

    let topics = common::fresh_topics(&config, &["acme-payments"]).await;
    let body = |o: &str, e: &str| json!({"type": "PaymentSucceeded", "data": {"orderNumber": o, "eventId": e, "idempotencyKey": request}});
    let home = murmur2_partition(&order);
    let elsewhere = (home + 1) % 3;
    let mut messages = vec![
        Produced {
            key: Some(order.clone()),
            partition: Some(home),
            body: body(&order, &event),
            at_ms: t0 + MINUTE,
        },
        Produced {
            key: None,
            partition: Some(elsewhere),
            body: body(&order, &event),
            at_ms: t0 + 3 * MINUTE,
        },
        // Another order's retry without a key, in B's partition.
        Produced {
            key: None,
            partition: Some(home),
            body: body("AC-other", "e-other"),
            at_ms: t0 + 2 * MINUTE,
        },
    ];
    for n in 0..6 {
        let other = format!("AC-{tag}-{n}x");
        let p = murmur2_partition(&other);
        messages.push(Produced {
            key: Some(other.clone()),
            partition: Some(p),
            body: body(&other, &format!("e{n}")),
            at_ms: t0 + MINUTE,
        });
    }
    produce(&config.kafka.bootstrap_servers, &topics[0], &messages).await;

    let prefix = letters(&tag);
    let lock = format!("{prefix}:purchase:lock:{order}");
    redisson_lock(
        &mut redis_conn().await,
        &lock,
        &format!("{}:88", uuid::Uuid::new_v4()),
    )
    .await;

    let logs = tempfile::tempdir().unwrap();
    let logback = |ms: i64, msg: &str| {
        let at = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis((ms + 8 * 3_600_000) as u64),
        );
        let local = at.to_string().trim_end_matches('Z').to_string() + "+08:00";
        json!({"@timestamp": local, "@version": "1", "message": msg, "logger_name": "com.acme.checkout.PaymentListener", "thread_name": "kafka-1", "level": "INFO", "orderNumber": order, "idempotencyKey": request, "eventId": event}).to_string()
    };
    let lines = [
        logback(t0, "checkout accepted"),
        logback(t0 + MINUTE, "payment applied"),
        logback(t0 + 3 * MINUTE, "duplicate payment ignored"),
    ];
    std::fs::write(
        logs.path().join("checkout.json.log"),
        lines.join("\n") + "\n",
    )
    .unwrap();
    AcmeIncident {
        config,
        order,
        request,
        prefix,
        payment_topic: topics[0].clone(),
        logs,
        _keys: RedisKeys(vec![lock]),
    }
}

/// The team's system from `profile suggest` to a trace with both copies (one without a key),
/// the Redisson lock and logback's lines; then with murmur2 assumed for a topic that also has
/// unkeyed messages, and a column the table lacks.
#[tokio::test]
async fn postgres_a_teams_own_system_from_suggest_to_trace() {
    let f = acme_incident().await;
    let env = vec![
        (
            "IDEMGUARD_DATABASE__URL".to_string(),
            f.config.database.url.clone(),
        ),
        (
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC".to_string(),
            f.payment_topic.clone(),
        ),
        ("IDEMGUARD_KAFKA__TRACE_TOPIC".to_string(), String::new()),
        (
            "IDEMGUARD_LOGS__FILES".to_string(),
            format!("{}/*.log", f.logs.path().display()),
        ),
    ];
    let (config, profile) = suggest(f.logs.path(), &env, &format!("{}:*", f.prefix));
    for (logical, table) in [
        ("idempotency_record", "acme_checkout_request"),
        ("order_record", "acme_purchase"),
        ("payment_flow", "acme_payment_txn"),
    ] {
        assert_eq!(
            value(&profile, &format!("source.{logical}"), "table").as_str(),
            Some(table),
            "{profile}"
        );
    }
    assert_eq!(
        value(&profile, "source.notification", "table").as_str(),
        Some("absent")
    );
    assert_eq!(
        value(&profile, "source.order_record", "time").as_str(),
        Some("timestamptz")
    );
    assert_eq!(
        value(&profile, "source.order_record", "columns.order_no").as_str(),
        Some("order_number")
    );
    assert_eq!(
        value(&profile, "source.order_record", "status.PAID").as_str(),
        Some("DONE")
    );
    assert_eq!(
        value(&profile, "source.idempotency_record", "status.PROCESSING").as_str(),
        Some("INIT")
    );
    assert_eq!(
        value(&profile, "kafka", "partitioner").as_str(),
        Some("none"),
        "unkeyed messages: {profile}"
    );
    assert_eq!(
        value(&profile, "kafka_ids.payment", "order_no")
            .as_array()
            .unwrap()[0]
            .as_str(),
        Some("json:/data/orderNumber")
    );
    assert_eq!(
        value(&profile, "logs", "time_field").as_str(),
        Some("@timestamp")
    );
    assert_eq!(
        value(&profile, "logs", "order_no_field").as_str(),
        Some("orderNumber")
    );
    assert!(
        profile.contains(&format!("{}:purchase:lock:{{orderNo}}", f.prefix)),
        "{profile}"
    );
    first_contact::doctor_is_clean(&config, &[], &profile);

    let t = trace(&config, &[], &f.order);
    assert!(
        warnings(&t).is_empty(),
        "a clean trace: {:#?}",
        warnings(&t)
    );
    assert_eq!(t["data"]["request_id"], f.request.as_str(), "{t:#}");
    assert_eq!(
        kafka_copies(&t, &f.payment_topic),
        2,
        "the keyed copy and the unkeyed retry: {t:#}"
    );
    assert!(
        entries(&t, "db")
            .iter()
            .any(|e| e["source"] == "payment_flow"),
        "{t:#}"
    );
    assert!(
        entries(&t, "lock")
            .iter()
            .any(|e| e["fields"]["format"]["kind"] == "redisson"),
        "{t:#}"
    );
    let logs: Vec<&str> = entries(&t, "log")
        .iter()
        .filter_map(|e| e["fields"]["message"].as_str())
        .collect();
    assert_eq!(
        logs,
        [
            "checkout accepted",
            "payment applied",
            "duplicate payment ignored"
        ],
        "{t:#}"
    );

    let murmur = vec![(
        "IDEMGUARD_KAFKA__PARTITIONER".to_string(),
        "murmur2_random".to_string(),
    )];
    let t = trace(&config, &murmur, &f.order);
    assert!(
        warnings(&t).iter().any(|w| w.contains("have no key")),
        "{:#?}",
        warnings(&t)
    );
    assert_eq!(kafka_copies(&t, &f.payment_topic), 2, "{t:#}");
    let (_, out, _) = first_contact::run(Some(&config), &murmur, &["doctor"]);
    assert!(
        out.contains("have no key") && out.contains("set kafka.partitioner = \"none\""),
        "doctor reports the observed partitioning: {out}"
    );

    let version = vec![(
        "IDEMGUARD_SOURCE__ORDER_RECORD__COLUMNS__VERSION".to_string(),
        "version".to_string(),
    )];
    let t = trace(&config, &version, &f.order);
    let notes = profile_notes(&t);
    assert!(
        notes.iter().any(|n| n.contains("version shown as unknown")
            && n.contains("acme_purchase.version does not exist")),
        "{notes:#?}"
    );
    assert!(
        entries(&t, "db")
            .iter()
            .any(|e| e["source"] == "order_record"),
        "the order still shows: {t:#}"
    );
}

/// A fresh database with `ddl` (statements separated by `;\n`) run in it; its URL.
async fn database_with(dialect: Dialect, ddl: &str) -> String {
    let config = common::fresh_database_config(dialect).await;
    let db = idemguard::db::Database::connect(&config).await.unwrap();
    for statement in ddl.split(";\n").filter(|s| !s.trim().is_empty()) {
        common::exec(&db, statement).await;
    }
    db.pool.close().await;
    config.database.url
}

/// Prisma's and Entity Framework's names: a table `Order` (a reserved word, and not lowercase)
/// and columns `orderNo`, `createdAt`, as each dialect quotes them.
fn mixed_case_schema(dialect: Dialect) -> String {
    let (q, serial, time) = match dialect {
        Dialect::Postgres => ('"', "BIGSERIAL", "TIMESTAMP(3)"),
        Dialect::Mysql => ('`', "BIGINT AUTO_INCREMENT", "DATETIME(3)"),
    };
    format!(
        "CREATE TABLE {q}Order{q} ({q}id{q} {serial} PRIMARY KEY, {q}orderNo{q} VARCHAR(40) NOT NULL UNIQUE, \
           {q}requestId{q} VARCHAR(64) NOT NULL UNIQUE, {q}userId{q} BIGINT NOT NULL, {q}status{q} VARCHAR(16) NOT NULL, \
           {q}createdAt{q} {time} NOT NULL);\n\
         CREATE TABLE {q}Payment{q} ({q}id{q} {serial} PRIMARY KEY, {q}paymentNo{q} VARCHAR(64) NOT NULL UNIQUE, \
           {q}orderNo{q} VARCHAR(40) NOT NULL, {q}createdAt{q} {time} NOT NULL);\n\
         INSERT INTO {q}Order{q} ({q}orderNo{q}, {q}requestId{q}, {q}userId{q}, {q}status{q}, {q}createdAt{q}) \
           VALUES ('O-1', 'r-1', 7, 'PAID', CURRENT_TIMESTAMP), ('O-2', 'r-2', 7, 'PENDING', CURRENT_TIMESTAMP);\n\
         INSERT INTO {q}Payment{q} ({q}paymentNo{q}, {q}orderNo{q}, {q}createdAt{q}) VALUES ('P-1', 'O-1', CURRENT_TIMESTAMP)"
    )
}

/// Mixed-case names are written as the schema spells them, their status values read, and every
/// statement `doctor` prepares with them runs.
async fn mixed_case_names_are_read_and_quoted(dialect: Dialect) {
    let url = database_with(dialect, &mixed_case_schema(dialect)).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, profile, _) = suggest_database(dir.path(), &url, &[]);
    let at = |section: &str, key: &str| value(&profile, section, key).as_str().map(str::to_string);
    assert_eq!(
        at("source.order_record", "table").as_deref(),
        Some("Order"),
        "{profile}"
    );
    assert_eq!(
        at("source.order_record", "columns.order_no").as_deref(),
        Some("orderNo")
    );
    assert_eq!(
        at("source.order_record", "columns.created_at").as_deref(),
        Some("createdAt")
    );
    assert_eq!(
        at("source.order_record", "status.PAID").as_deref(),
        Some("PAID"),
        "{profile}"
    );
    assert_eq!(
        at("source.order_record", "status.CREATED").as_deref(),
        Some("PENDING")
    );
    assert_eq!(
        at("source.payment_flow", "table").as_deref(),
        Some("Payment")
    );
    assert_eq!(
        at("source.payment_flow", "columns.pay_no").as_deref(),
        Some("paymentNo")
    );
    let rows = source_profile_rows(&config, &[]);
    assert!(failing(&rows).is_empty(), "{rows:#?}\n{profile}");
    assert!(rows.iter().any(|r| r["target"] == "[source]"), "{rows:#?}");
}

per_dialect!(mixed_case_names_are_read_and_quoted => postgres_mixed_case_names_are_read_and_quoted, mysql_mixed_case_names_are_read_and_quoted);

/// A plain team schema: `t_`-prefixed tables, `order_sn`, `idem_key`, `state`, `trade_no`; an
/// order's `sku_id` and `qty` are no stock table.
fn plain_team_schema(dialect: Dialect) -> String {
    let serial = match dialect {
        Dialect::Postgres => "BIGSERIAL",
        Dialect::Mysql => "BIGINT AUTO_INCREMENT",
    };
    format!(
        "CREATE TABLE t_order (id {serial} PRIMARY KEY, order_sn VARCHAR(32) NOT NULL UNIQUE, idem_key VARCHAR(64) NOT NULL UNIQUE, \
           user_id BIGINT NOT NULL, sku_id BIGINT NOT NULL, qty INT NOT NULL, state VARCHAR(16) NOT NULL, remark VARCHAR(200) NULL, \
           batch_no VARCHAR(32) NULL, create_time TIMESTAMP NULL);\n\
         CREATE TABLE t_payment (id {serial} PRIMARY KEY, trade_no VARCHAR(64) NOT NULL UNIQUE, order_sn VARCHAR(32) NOT NULL, \
           amount BIGINT NOT NULL, create_time TIMESTAMP NULL);\n\
         CREATE TABLE t_stock (id {serial} PRIMARY KEY, sku_id BIGINT NOT NULL, stock INT NOT NULL, location VARCHAR(32) NOT NULL);\n\
         INSERT INTO t_order (order_sn, idem_key, user_id, sku_id, qty, state, remark, batch_no) VALUES \
           ('S1', 'k1', 1, 9, 2, 'WAIT_PAY', 'call me before delivery', 'B1'), ('S2', 'k2', 1, 9, 1, 'PAID', 'leave it at the door', 'B1');\n\
         INSERT INTO t_payment (trade_no, order_sn, amount) VALUES ('T1', 'S2', 100);\n\
         INSERT INTO t_stock (sku_id, stock, location) VALUES (9, 40, 'shelf A')"
    )
}

/// The usual names are recognised: orders and payments mapped, the orders never taken for stock.
async fn a_plain_team_schema_is_recognised(dialect: Dialect) {
    let url = database_with(dialect, &plain_team_schema(dialect)).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, profile, _) = suggest_database(dir.path(), &url, &[]);
    let at = |section: &str, key: &str| value(&profile, section, key).as_str().map(str::to_string);
    for (section, key, want) in [
        ("source.order_record", "table", "t_order"),
        ("source.order_record", "columns.order_no", "order_sn"),
        ("source.order_record", "columns.req_id", "idem_key"),
        ("source.order_record", "columns.status", "state"),
        ("source.order_record", "status.PAID", "PAID"),
        ("source.order_record", "status.CREATED", "WAIT_PAY"),
        ("source.payment_flow", "table", "t_payment"),
        ("source.payment_flow", "columns.pay_no", "trade_no"),
        ("source.payment_flow", "columns.order_no", "order_sn"),
        ("source.inventory", "table", "t_stock"),
        ("source.inventory", "columns.stock", "stock"),
        ("source.idempotency_record", "table", "absent"),
    ] {
        assert_eq!(
            at(section, key).as_deref(),
            Some(want),
            "[{section}] {key}:\n{profile}"
        );
    }
    let rows = source_profile_rows(&config, &[]);
    assert!(failing(&rows).is_empty(), "{rows:#?}\n{profile}");
    doctor_checks_what_each_mapping_means(&config);
}

per_dialect!(a_plain_team_schema_is_recognised => postgres_a_plain_team_schema_is_recognised, mysql_a_plain_team_schema_is_recognised);

/// Mappings whose columns exist but do not mean what the console takes them for: each is a
/// failing row naming the table, the column and the key to set.
fn doctor_checks_what_each_mapping_means(config: &Path) {
    let env = |k: &str, v: &str| vec![(format!("IDEMGUARD_SOURCE__{k}"), v.to_string())];
    let fails = |env: Vec<(String, String)>, target: &str, said: &[&str]| {
        let rows = source_profile_rows(config, &env);
        let row = failing(&rows)
            .into_iter()
            .find(|r| r["target"] == target)
            .unwrap_or_else(|| panic!("{env:?}: no failing row for {target}: {rows:#?}"));
        let text = format!("{} {}", row["detail"], row["hint"]);
        for s in said {
            assert!(text.contains(s), "{env:?}: {s:?} in {text}");
        }
    };
    fails(
        env("ORDER_RECORD__COLUMNS__ORDER_NO", "batch_no"),
        "source.order_record.columns.order_no",
        &[
            "t_order.batch_no",
            "no unique index",
            "set source.order_record.columns.order_no",
        ],
    );
    fails(
        env("ORDER_RECORD__COLUMNS__STATUS", "remark"),
        "source.order_record.columns.status",
        &[
            "t_order.remark",
            "does not hold states",
            "set source.order_record.columns.status",
        ],
    );
    fails(
        env("INVENTORY__COLUMNS__STOCK", "location"),
        "source.inventory.columns.stock",
        &["t_stock.location", "numeric stock column"],
    );
}

/// Tables and columns a profile cannot name, and tables beyond the bound, are said with their
/// counts: in the file and on stderr.
async fn what_is_not_read_is_said(dialect: Dialect) {
    let q = if dialect == Dialect::Postgres {
        '"'
    } else {
        '`'
    };
    let ddl = format!(
        "CREATE TABLE {q}order-items{q} (id BIGINT PRIMARY KEY);\n\
         CREATE TABLE t_order (id BIGINT PRIMARY KEY, order_sn VARCHAR(32) NOT NULL, {q}unit price{q} BIGINT, state VARCHAR(16));\n\
         CREATE TABLE t_payment (id BIGINT PRIMARY KEY, trade_no VARCHAR(32) NOT NULL, order_sn VARCHAR(32) NOT NULL)"
    );
    let url = database_with(dialect, &ddl).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, profile, stderr) = suggest_database(dir.path(), &url, &[]);
    for said in [
        "NOT READ: 1 table(s) whose names are not plain SQL identifiers",
        "order-items",
        "NOT READ: 1 column(s) whose names are not plain SQL identifiers",
        "t_order.unit price",
    ] {
        assert!(profile.contains(said), "{said:?} in the file:\n{profile}");
    }
    assert!(
        stderr.contains("order-items") && stderr.contains("t_order.unit price"),
        "{stderr}"
    );

    let mut config = idemguard::config::Config::defaults();
    config.database.url = url;
    config.kafka.trace_topic.clear();
    config.logs.topic.clear();
    let bounds = idemguard::profile::suggest::Bounds {
        tables: 2,
        redis_match: "igt-nothing-here:*".into(),
        ..Default::default()
    };
    let s = idemguard::profile::suggest::suggest(&config, &bounds, &Default::default()).await;
    let text = s.to_toml();
    assert!(
        text.contains("NOT READ: 1 of the 3 tables: only the first 2 by name were read"),
        "{text}"
    );
}

per_dialect!(what_is_not_read_is_said => postgres_what_is_not_read_is_said, mysql_what_is_not_read_is_said);

/// The file declares where it points: named after the database's host and yellow by default,
/// as asked with `--environment` and `--production`; `--help` says so.
#[tokio::test]
async fn the_suggestion_declares_its_environment() {
    let url = database_with(Dialect::Postgres, &plain_team_schema(Dialect::Postgres)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, profile, _) = suggest_database(dir.path(), &url, &[]);
    assert_eq!(
        value(&profile, "environment", "name").as_str(),
        Some("127.0.0.1"),
        "{profile}"
    );
    assert_eq!(
        value(&profile, "environment", "color").as_str(),
        Some("yellow")
    );
    assert_eq!(
        value(&profile, "environment", "production").as_bool(),
        Some(false)
    );

    let named = tempfile::tempdir().unwrap();
    let args = ["--environment", "shop-prod", "--production"];
    let (_, profile, _) = suggest_database(named.path(), &url, &args);
    assert_eq!(
        value(&profile, "environment", "name").as_str(),
        Some("shop-prod")
    );
    assert_eq!(
        value(&profile, "environment", "color").as_str(),
        Some("red")
    );
    assert_eq!(
        value(&profile, "environment", "production").as_bool(),
        Some(true)
    );

    let (_, help, _) = first_contact::run(None, &[], &["profile", "suggest", "--help"]);
    for said in [
        "--environment <NAME>",
        "--production",
        "database's host",
        "yellow",
    ] {
        assert!(help.contains(said), "{said:?} in {help}");
    }
}
