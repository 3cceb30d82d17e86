//! What other systems write is shown safely: the standing bad-input suite. Every source of text
//! idemguard did not write — a database row another service inserted (by SQL, on both
//! dialects), a lock key, value and Redisson field set by a plain Redis client, a Kafka message
//! from a raw producer (headers, key, body), a DLQ message's `dlq.by.*` headers (who
//! dead-lettered it, which anyone writing to the DLQ can forge), a JSON log line on disk — is
//! filled with every input of [`HOSTILE`] (terminal escapes, CR/LF, NUL, DEL, C1, bidi overrides
//! and isolates, invisible characters, HTML, a `javascript:` link, a table pipe; the DLQ headers
//! also 100 KB values and invalid UTF-8), and every face that shows it is read back: `trace`
//! and `report --id` (table, Markdown and HTML), `locks`, `stuck`, `release-lock`, `dlq`, the
//! TUI's Trace, Locks, Stuck, Overview and DLQ views, and `consume`'s text log. Every face must show each input
//! visibly escaped (`\x1b`, `\u{202e}`, `\n`) and never a raw control or bidi character; the
//! Markdown report no raw HTML, link or extra table cell; the HTML report no element or
//! attribute of a value's making; the JSON twins the values byte for byte.
//!
//! Data-driven: a new hostile input is one line of [`HOSTILE`], a new face one function that
//! reads it back.
//!
//! The bad input that is no text to show is fed where its face is tested: connections that send
//! half a request head to the metrics port (`tests/guarantees/duplicates_found/alerting.rs`,
//! `half_sent_connections_to_the_metrics_port_never_starve_the_api`); secret and CA files that are
//! `/dev/zero`, a FIFO, a directory or world-readable (`tests/guarantees/security/redaction.rs`,
//! `secret_and_certificate_files_are_read_as_bounded_files`); schemas with mixed-case, reserved
//! and non-identifier names, and more tables than are read
//! (`tests/guarantees/team_system/first_contact.rs`, `mixed_case_names_are_read_and_quoted`,
//! `what_is_not_read_is_said`); a forged `dlq.source.*` or `redrive.*` header (`console::redrive`,
//! `a_redrive_writes_only_to_the_payment_topic`).

use crate::common;
use crate::support::redis_server;
use crate::support::report_page;

use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use idemguard::config::{Config, Dialect};
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Backends;
use idemguard::console::tui::keymap::View;
use idemguard::console::tui::ui;
use idemguard::contracts::{headers, now_ms, OrderNo};
use idemguard::db::Database;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use redis_server::RedisServer;
use serde_json::{json, Value};

/// One hostile input: how it is written (`raw`) and how a terminal face must show it (`shown`).
struct Hostile {
    name: &'static str,
    raw: &'static str,
    shown: &'static str,
    /// PostgreSQL's text types refuse a NUL byte: that input cannot come from its rows.
    in_postgres: bool,
}

const fn h(name: &'static str, raw: &'static str, shown: &'static str) -> Hostile {
    Hostile {
        name,
        raw,
        shown,
        in_postgres: true,
    }
}

const HOSTILE: &[Hostile] = &[
    h("OSC retitle", "\x1b]0;pwned\x07", r"\x1b]0;pwned\x07"),
    h("clear screen", "\x1b[2J\x1b[H", r"\x1b[2J\x1b[H"),
    h("carriage return", "ok\roverwritten", r"ok\roverwritten"),
    h("newline", "ok\nforged row", r"ok\nforged row"),
    Hostile {
        in_postgres: false,
        ..h("NUL", "a\0b", r"a\x00b")
    },
    h("DEL and C1 CSI", "a\x7f\u{9b}2J", r"a\x7f\u{9b}2J"),
    h("bidi override", "\u{202e}gnp.exe", r"\u{202e}gnp.exe"),
    h(
        "bidi isolate",
        "\u{2067}rtl\u{2069}",
        r"\u{2067}rtl\u{2069}",
    ),
    h(
        "invisible",
        "a\u{200b}b\u{2028}c\u{feff}",
        r"a\u{200b}b\u{2028}c\u{feff}",
    ),
    h(
        "HTML",
        "<img src=x onerror=alert(1)>",
        "<img src=x onerror=alert(1)>",
    ),
    h(
        "javascript link",
        "[pay](javascript:alert(1))",
        "[pay](javascript:alert(1))",
    ),
    h("table pipe", "a|b|c", "a|b|c"),
];

/// Hidden characters as the suite judges them (independently of the code under test): any
/// control but the line break, and the bidi and invisible format characters of [`HOSTILE`].
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
}

#[track_caller]
fn assert_no_hidden(face: &str, text: &str) {
    if let Some((i, c)) = text.char_indices().find(|(_, c)| hidden(*c)) {
        let from = text[..i].char_indices().rev().nth(60).map_or(0, |(p, _)| p);
        panic!(
            "{face}: a raw {:?} reached the output, after {:?}",
            c,
            &text[from..i]
        );
    }
}

/// `face` shows every hostile input of `used` as `{tag}{shown}`.
#[track_caller]
fn assert_shown(face: &str, text: &str, used: &[&Hostile], tag: impl Fn(usize) -> String) {
    for (i, x) in used.iter().enumerate() {
        let want = format!("{}{}", tag(i), x.shown);
        assert!(
            text.contains(&want),
            "{face}: the {} input is not shown as {want:?}:\n{text}",
            x.name
        );
    }
}

/// The world the faces read: one order, and every source holding every hostile input.
struct World {
    config: Config,
    db: Database,
    _redis: RedisServer,
    order_no: String,
    /// The inputs this dialect's rows can hold.
    db_inputs: Vec<&'static Hostile>,
    log_file: tempfile::NamedTempFile,
    prefix: String,
}

async fn world(dialect: Dialect) -> World {
    let (mut config, db) = common::migrated_database(dialect).await;
    let redis = RedisServer::start();
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];
    let topics = common::fresh_topics(
        &config,
        &[
            "payment.succeeded",
            "idemguard.trace",
            "payment.succeeded.dlq",
        ],
    )
    .await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.kafka.dlq_topic = topics[2].clone();
    config.console.refresh = Duration::from_millis(250);
    let prefix = format!("ut{}", common::unique_suffix());
    config.foreign_locks.patterns = vec!["lock:*".into(), format!("{prefix}:*")];
    let order_no = OrderNo::generate().to_string();
    let db_inputs: Vec<&Hostile> = HOSTILE
        .iter()
        .filter(|x| dialect == Dialect::Mysql || x.in_postgres)
        .collect();
    let now = now_ms();
    write_rows(&db, &order_no, &db_inputs, now).await;
    write_keys(&redis, &order_no, &prefix).await;
    write_messages(&config, &order_no).await;
    write_dlq_messages(&config).await;
    let log_file = write_log(&order_no, now);
    config.logs.files = vec![log_file.path().display().to_string()];
    World {
        config,
        db,
        _redis: redis,
        order_no,
        db_inputs,
        log_file,
        prefix,
    }
}

/// Rows "another system" inserted by SQL: the order, one payment flow per input (its payNo),
/// one stuck PROCESSING record per input (its owner), a notification whose body opens an OSC
/// hyperlink that only closes past where the timeline cuts it.
async fn write_rows(db: &Database, order_no: &str, inputs: &[&Hostile], now: i64) {
    let ph = |n| common::placeholders(db.dialect(), n);
    let p4 = ph(4);
    let p: Vec<&str> = p4.split(", ").collect();
    let sql = format!(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES ({}, {}, 7, 1, 1, 1999, 'CREATED', {}, {})",
        p[0], p[1], p[2], p[3]
    );
    sqlx::query(&sql)
        .bind(format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7()))
        .bind(order_no)
        .bind(now)
        .bind(now)
        .execute(&db.pool)
        .await
        .unwrap();
    for (i, x) in inputs.iter().enumerate() {
        let sql = format!(
            "INSERT INTO payment_flow (pay_no, order_no, amount, status, event_id, created_at) VALUES ({})",
            ph(6)
        );
        sqlx::query(&sql)
            .bind(format!("PN{i}:{}", x.raw))
            .bind(order_no)
            .bind(1999i64)
            .bind("SUCCESS")
            .bind(format!("dbev-{i}-{}", uuid::Uuid::new_v4().simple()))
            .bind(now)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", x.name));
        let sql = format!(
            "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES ({})",
            ph(9)
        );
        let old = now - 600_000;
        sqlx::query(&sql)
            .bind(format!(
                "APP:ORDER:20261130:stuck-{i}-{}",
                uuid::Uuid::now_v7()
            ))
            .bind("ORDER")
            .bind("h")
            .bind("PROCESSING")
            .bind(format!("own{i}:{}", x.raw))
            .bind(old)
            .bind(old)
            .bind(old)
            .bind(now + 86_400_000)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", x.name));
    }
    let sql = format!(
        "INSERT INTO notification (event_id, order_no, user_id, channel, body, created_at) VALUES ({})",
        ph(6)
    );
    sqlx::query(&sql)
        .bind(format!("nev-{}", uuid::Uuid::new_v4().simple()))
        .bind(order_no)
        .bind(7i64)
        .bind("sms")
        .bind(format!(
            "\x1b]8;;http://evil/\x07{}\x1b]8;;\x07",
            "A".repeat(60)
        ))
        .bind(now)
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Keys a plain Redis client wrote: the order's own lock holding an input, one key per input
/// whose name and value carry it, one Redisson hash per input whose client id carries it.
async fn write_keys(redis: &RedisServer, order_no: &str, prefix: &str) {
    let mut c = redis.conn().await;
    let set = |key: String, value: String| redis::cmd("SET").arg(key).arg(value).clone();
    let _: () = set(format!("lock:order:{order_no}"), HOSTILE[0].raw.into())
        .query_async(&mut c)
        .await
        .unwrap();
    for (i, x) in HOSTILE.iter().enumerate() {
        let _: () = set(
            format!("{prefix}:k{i}:{}", x.raw),
            format!("v{i}:{}", x.raw),
        )
        .query_async(&mut c)
        .await
        .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("{prefix}:rlock{i}"))
            .arg(format!("c{i}{}:57", x.raw))
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

/// Payment messages from a raw producer, keyed by the order: each input in the eventId header
/// and in the body's payNo.
async fn write_messages(config: &Config, order_no: &str) {
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .create()
        .unwrap();
    for (i, x) in HOSTILE.iter().enumerate() {
        let event = format!("ev{i}:{}", x.raw);
        let body = json!({ "order_no": order_no, "pay_no": format!("kp{i}:{}", x.raw) });
        let body = body.to_string();
        let hs = OwnedHeaders::new()
            .insert(Header {
                key: headers::EVENT_ID,
                value: Some(event.as_bytes()),
            })
            .insert(Header {
                key: headers::ORDER_NO,
                value: Some(order_no.as_bytes()),
            });
        p.send(
            FutureRecord::to(&config.kafka.payment_topic)
                .key(order_no)
                .payload(&body)
                .headers(hs),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    }
}

/// A `dlq.by.*` value of 100 KB: terminal escapes all along.
fn dlq_by_huge() -> Vec<u8> {
    let mut v = b"huge:".to_vec();
    v.extend("\x1b[2J".repeat(25_000).bytes());
    v
}

/// A `dlq.by.*` value that is not UTF-8, with an escape after the invalid bytes.
const DLQ_BY_NOT_UTF8: &[u8] = b"bin:\xff\xfe\x1b[2J";

/// DLQ messages from a raw producer, as if dead-lettered by a consumer whose `dlq.by.*` headers
/// (group, instance, host, version) each hold an input; then one whose values are 100 KB, and
/// one whose values are not UTF-8.
async fn write_dlq_messages(config: &Config) {
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("message.max.bytes", "2000000")
        .create()
        .unwrap();
    let mut values: Vec<[Vec<u8>; 4]> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, x)| {
            ["grp", "by", "host", "ver"].map(|tag| format!("{tag}{i}:{}", x.raw).into_bytes())
        })
        .collect();
    values.push([(); 4].map(|_| dlq_by_huge()));
    values.push([(); 4].map(|_| DLQ_BY_NOT_UTF8.to_vec()));
    for (i, [group, instance, host, version]) in values.iter().enumerate() {
        let reason = format!("dlqreason{i}");
        let mut hs = OwnedHeaders::new().insert(Header {
            key: "dlq.reason",
            value: Some(reason.as_bytes()),
        });
        for (key, value) in [
            ("dlq.by.group", group),
            ("dlq.by.instance", instance),
            ("dlq.by.host", host),
            ("dlq.by.version", version),
        ] {
            hs = hs.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        p.send(
            FutureRecord::<(), _>::to(&config.kafka.dlq_topic)
                .payload("not a payment event")
                .headers(hs),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    }
}

/// How many DLQ messages [`write_dlq_messages`] writes.
fn dlq_messages() -> usize {
    HOSTILE.len() + 2
}

/// A JSON-lines log file on disk: one line per input, in its message, naming the order.
fn write_log(order_no: &str, now: i64) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("igt-untrusted-")
        .suffix(".log")
        .tempfile()
        .unwrap();
    for (i, x) in HOSTILE.iter().enumerate() {
        let line = json!({
            "timestamp": now + i as i64,
            "service": "order-svc",
            "level": "INFO",
            "message": format!("log{i}:{}", x.raw),
            "orderNo": order_no,
        });
        writeln!(f, "{line}").unwrap();
    }
    f.flush().unwrap();
    f
}

impl World {
    /// The binary, on this world.
    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let c = &self.config;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            ])
            .args(args)
            .env("IDEMGUARD_DATABASE__URL", &c.database.url)
            .env("IDEMGUARD_REDIS__URL", &c.redis.url)
            .env("IDEMGUARD_REDIS__REDLOCK_NODES", "")
            .env("IDEMGUARD_KAFKA__PAYMENT_TOPIC", &c.kafka.payment_topic)
            .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &c.kafka.trace_topic)
            .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &c.kafka.dlq_topic)
            .env(
                "IDEMGUARD_FOREIGN_LOCKS__PATTERNS",
                c.foreign_locks.patterns.join(","),
            )
            .env("IDEMGUARD_LOGS__FILES", self.log_file.path())
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .env("IDEMGUARD_LOG", "warn")
            .output()
            .expect("run idemguard");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn json(&self, args: &[&str]) -> Value {
        let (code, out, err) = self.run(args);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{args:?} (exit {code:?}): {e}\n{out}\n{err}"))
    }
}

// ---------------------------------------------------------------------------------------------
// The faces
// ---------------------------------------------------------------------------------------------

/// `trace ORDER`: the rows' payNos, the messages' eventIds, the log lines and the order's lock
/// value, each shown escaped in the table; the notification's body cut without an open OSC.
fn trace_table(w: &World) {
    let (code, out, err) = w.run(&["trace", &w.order_no]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    for (face, text) in [("trace (stdout)", &out), ("trace (stderr)", &err)] {
        assert_no_hidden(face, text);
    }
    assert_shown("trace: payment_flow.pay_no", &out, &w.db_inputs, |i| {
        format!("pay_no PN{i}:")
    });
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("trace: the eventId header", &out, &all, |i| {
        format!("payment event ev{i}:")
    });
    assert_shown("trace: a log line's message", &out, &all, |i| {
        format!("log{i}:")
    });
    assert!(
        out.contains(&format!("value {}", HOSTILE[0].shown)),
        "the lock value:\n{out}"
    );
    assert!(
        out.contains(r"\x1b]8;;http://evil/\x07AAAA"),
        "the cut body:\n{out}"
    );
    // No line of the table was forged by a value: every timeline row starts with a time.
    let table = out.split("TIME ").nth(1).expect("the timeline table");
    for line in table.lines().skip(1).take_while(|l| !l.is_empty()) {
        let starts_with_time = line.as_bytes().get(2) == Some(&b':') || line.starts_with("now");
        assert!(starts_with_time, "a forged timeline row: {line:?}\n{out}");
    }
}

/// `trace ORDER --json`: the values byte for byte.
fn trace_json(w: &World) {
    let doc = w.json(&["trace", &w.order_no, "--json"]);
    let text = doc.to_string();
    let entries = doc["data"]["entries"].as_array().unwrap();
    let field = |name: &str| -> Vec<String> {
        entries
            .iter()
            .filter_map(|e| e["fields"][name].as_str().map(str::to_string))
            .collect()
    };
    let pay_nos = field("pay_no");
    let messages = field("message");
    for (i, x) in HOSTILE.iter().enumerate() {
        if w.db_inputs.iter().any(|d| d.name == x.name) {
            let i = w.db_inputs.iter().position(|d| d.name == x.name).unwrap();
            assert!(
                pay_nos.contains(&format!("PN{i}:{}", x.raw)),
                "{}: {text}",
                x.name
            );
        }
        assert!(
            pay_nos.contains(&format!("kp{i}:{}", x.raw)),
            "{}: {text}",
            x.name
        );
        assert!(
            messages.contains(&format!("log{i}:{}", x.raw)),
            "{}: {text}",
            x.name
        );
        let ids: Vec<&str> = doc["data"]["event_ids"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            ids.contains(&format!("ev{i}:{}", x.raw).as_str()),
            "{}: {ids:?}",
            x.name
        );
    }
}

/// `report --id ORDER` in Markdown: escaped, and no HTML, link or table cell of a value's
/// making.
fn report_markdown(w: &World) {
    let (code, md, err) = w.run(&["report", "--id", &w.order_no]);
    assert!(matches!(code, Some(0 | 6)), "{md}\n{err}");
    assert_no_hidden("report", &md);
    for (i, _) in w.db_inputs.iter().enumerate() {
        assert!(md.contains(&format!("PN{i}:")), "report: payNo {i}:\n{md}");
    }
    for (i, _) in HOSTILE.iter().enumerate() {
        assert!(
            md.contains(&format!("log{i}:")),
            "report: log line {i}:\n{md}"
        );
    }
    let tags = md.matches("<img").count();
    assert_eq!(
        tags,
        md.matches(r"\<img").count(),
        "raw HTML in the report:\n{md}"
    );
    assert!(!md.contains("[pay]("), "a link in the report:\n{md}");
    assert!(md.contains(r"\<img src=x onerror=alert(1)\>"), "{md}");
    // Every row of a table has as many cells as its header.
    let cells = |l: &str| l.replace(r"\\", "").replace(r"\|", "").matches('|').count();
    let mut header = None;
    for line in md.lines() {
        match (line.starts_with('|'), header) {
            (true, None) => header = Some(cells(line)),
            (true, Some(n)) => assert_eq!(cells(line), n, "a cell of a value's making: {line}"),
            (false, _) => header = None,
        }
    }
}

/// `report --id ORDER --format html`: every value is text of the page (escaped as in the
/// terminal), and the page holds no element or attribute a value made.
fn report_html(w: &World) {
    let (code, page, err) = w.run(&["report", "--id", &w.order_no, "--format", "html"]);
    assert!(matches!(code, Some(0 | 6)), "{page}\n{err}");
    assert_no_hidden("report --format html", &page);
    let dom = scraper::Html::parse_document(&page);
    report_page::assert_inert(&dom);
    let text: String = dom.root_element().text().collect();
    assert_shown("report --format html: pay_no", &text, &w.db_inputs, |i| {
        format!("pay_no PN{i}:")
    });
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("report --format html: a log line", &text, &all, |i| {
        format!("log{i}:")
    });
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );
}

/// `locks` and `locks --json`: every key, value and Redisson client id.
fn locks(w: &World) {
    let (code, out, err) = w.run(&["locks"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_no_hidden("locks", &out);
    let p = &w.prefix;
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("locks: a key", &out, &all, |i| format!("{p}:k{i}:"));
    assert!(out.contains(&format!("{p}:rlock0  ")), "{out}");
    assert!(
        out.contains(r"redisson c0\x1b]0;pwned…"),
        "a Redisson client id, cut: {out}"
    );
    let doc = w.json(&["locks", "--json"]);
    let locks = doc["data"]["locks"].as_array().unwrap();
    for (i, x) in HOSTILE.iter().enumerate() {
        let key = format!("{p}:k{i}:{}", x.raw);
        let l = locks.iter().find(|l| l["key"] == key.as_str());
        let l = l.unwrap_or_else(|| panic!("{}: {key:?} not in {doc}", x.name));
        assert_eq!(l["value"], format!("v{i}:{}", x.raw).as_str(), "{}", x.name);
        let r = locks
            .iter()
            .find(|l| l["key"] == format!("{p}:rlock{i}").as_str())
            .unwrap();
        assert_eq!(
            r["format"]["client_id"],
            format!("c{i}{}", x.raw).as_str(),
            "{r}"
        );
    }
}

/// `release-lock` on a key holding an input, its value typed wrong: the result names the key
/// and nothing is released.
fn release_lock(w: &World) {
    // (A command line cannot carry a NUL.)
    for (i, x) in HOSTILE
        .iter()
        .enumerate()
        .filter(|(_, x)| !x.raw.contains('\0'))
    {
        let key = format!("{}:k{i}:{}", w.prefix, x.raw);
        let args = [
            "release-lock",
            &key,
            "--expect-value",
            "x",
            "--allow-actions",
        ];
        let (code, out, err) = w.run(&args);
        assert!(
            code.is_some_and(|c| c != 0),
            "{}: nothing released:\n{out}\n{err}",
            x.name
        );
        assert_no_hidden("release-lock", &format!("{out}{err}"));
        let shown = format!("{}:k{i}:{}", w.prefix, x.shown);
        assert!(
            out.contains(&shown),
            "{}: release-lock names {shown:?}:\n{out}",
            x.name
        );
    }
}

/// `stuck` and `stuck --json`: every owner.
fn stuck(w: &World) {
    let (code, out, err) = w.run(&["stuck"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_no_hidden("stuck", &out);
    assert_shown("stuck: the owner", &out, &w.db_inputs, |i| {
        format!("own{i}:")
    });
    let doc = w.json(&["stuck", "--json"]);
    let owners: Vec<&str> = doc["data"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["owner"].as_str())
        .collect();
    for (i, x) in w.db_inputs.iter().enumerate() {
        assert!(
            owners.contains(&format!("own{i}:{}", x.raw).as_str()),
            "{}",
            x.name
        );
    }
}

/// The longest a `dlq.by.*` value may be shown: its first 128 characters as read, each
/// escape at most 10 characters (`\u{e007f}`).
const DLQ_BY_SHOWN_MAX: usize = 128 * 10;

/// The bounded form of the 100 KB and the not-UTF-8 `dlq.by.*` values, as a terminal face
/// shows them: cut with `…`, and the invalid bytes as U+FFFD.
#[track_caller]
fn assert_dlq_by_bounded(face: &str, text: &str) {
    let huge = text
        .split("instance huge:")
        .nth(1)
        .unwrap_or_else(|| panic!("{face}: no 100 KB instance:\n{text}"));
    let shown: String = huge
        .chars()
        .take_while(|c| *c != '…' && *c != ' ')
        .collect();
    assert!(
        shown.starts_with(r"\x1b[2J\x1b[2J") && shown.chars().count() <= DLQ_BY_SHOWN_MAX,
        "{face}: the 100 KB value is not shown escaped and cut ({} characters)",
        shown.chars().count()
    );
    assert!(
        huge.starts_with(&format!("{shown}…")),
        "{face}: no … after the cut"
    );
    assert!(
        text.contains("instance bin:\u{fffd}\u{fffd}\\x1b[2J"),
        "{face}: the value that is not UTF-8:\n{text}"
    );
}

/// `dlq`: the second table names each message's dead-letterer, every value escaped; the 100 KB
/// values cut, the output a few KB.
fn dlq_table(w: &World) {
    let (code, out, err) = w.run(&["dlq"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_no_hidden("dlq", &format!("{out}{err}"));
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("dlq: dlq.by.instance", &out, &all, |i| {
        format!("instance by{i}:")
    });
    assert_shown("dlq: dlq.by.host", &out, &all, |i| format!("host host{i}:"));
    assert_shown("dlq: dlq.by.group", &out, &all, |i| {
        format!("group grp{i}:")
    });
    assert_shown("dlq: dlq.by.version", &out, &all, |i| {
        format!("idemguard ver{i}:")
    });
    assert_dlq_by_bounded("dlq", &out);
    assert!(out.len() < 64 * 1024, "dlq printed {} bytes", out.len());
}

/// `dlq --json`: each value byte for byte; the 100 KB ones cut to 128 characters, the ones
/// that are not UTF-8 with U+FFFD.
fn dlq_json(w: &World) {
    let doc = w.json(&["dlq", "--json"]);
    let messages = doc["data"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), dlq_messages(), "{doc}");
    let by: Vec<&Value> = messages.iter().map(|m| &m["dead_lettered_by"]).collect();
    let has = |field: &str, value: &str| by.iter().any(|b| b[field] == value);
    for (i, x) in HOSTILE.iter().enumerate() {
        for (field, tag) in [("group", "grp"), ("instance", "by"), ("host", "host")] {
            let want = format!("{tag}{i}:{}", x.raw);
            assert!(has(field, &want), "{}: {field} {want:?}", x.name);
        }
        assert!(has("version", &format!("ver{i}:{}", x.raw)), "{}", x.name);
    }
    let huge = by
        .iter()
        .filter_map(|b| b["instance"].as_str())
        .find(|i| i.starts_with("huge:"))
        .expect("the 100 KB instance");
    assert_eq!(huge.chars().count(), 128, "{huge}");
    assert!(huge.ends_with('…'), "{huge}");
    assert!(has("host", "bin:\u{fffd}\u{fffd}\x1b[2J"), "{doc}");
}

/// The TUI: the Trace, Locks and Stuck views drawn by the real collectors into a wide
/// `TestBackend` (so cells are not cut) — no drawn cell holds a hidden character, and the
/// inputs are drawn escaped.
async fn tui(w: &World) {
    let mut backends = Backends::spawn(&w.config);
    let mut app = App::new(&w.config, Some(backends.focus.clone()));
    // The DLQ view is read by the executor.
    app.attach_executor(backends.spawn_executor(&w.config, false));
    let key = |app: &mut App, c: KeyCode| app.handle_key(KeyEvent::new(c, KeyModifiers::NONE));
    for c in format!(":trace {}", w.order_no).chars() {
        key(&mut app, KeyCode::Char(c));
    }
    key(&mut app, KeyCode::Enter);
    let want_entries = w.db_inputs.len() + 2 * HOSTILE.len();
    pump(&mut app, &mut backends, "the hostile timeline", |a| {
        a.timeline().is_some_and(|t| {
            let n = |layer: &str| t.entries.iter().filter(|e| e.layer == layer).count();
            n("kafka")
                + n("log")
                + t.entries
                    .iter()
                    .filter(|e| e.source == "payment_flow")
                    .count()
                >= want_entries
        })
    })
    .await;
    let s = draw(&mut app);
    assert_no_hidden("TUI Trace", &s);
    assert_shown("TUI Trace: pay_no", &s, &w.db_inputs, |i| {
        format!("pay_no PN{i}:")
    });
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("TUI Trace: log line", &s, &all, |i| format!("log{i}:"));

    key(&mut app, KeyCode::Char('3'));
    assert_eq!(app.ui.view, View::Locks);
    pump(&mut app, &mut backends, "the hostile locks", |a| {
        a.stores
            .locks
            .as_ref()
            .is_some_and(|l| l.locks.len() > 2 * HOSTILE.len())
    })
    .await;
    let s = draw(&mut app);
    assert_no_hidden("TUI Locks", &s);
    let p = &w.prefix;
    assert_shown("TUI Locks: a key", &s, &all, |i| format!("{p}:k{i}:"));

    key(&mut app, KeyCode::Char('5'));
    pump(&mut app, &mut backends, "the hostile stuck records", |a| {
        a.stores
            .stuck
            .as_ref()
            .is_some_and(|s| s.len() >= w.db_inputs.len())
    })
    .await;
    let s = draw(&mut app);
    assert_no_hidden("TUI Stuck", &s);
    for i in 0..w.db_inputs.len() {
        assert!(
            s.contains(&format!("own{i}:")),
            "TUI Stuck: owner {i}:\n{s}"
        );
    }
    // The Overview lists the locks without a TTL (their keys) and the stuck records' owners.
    key(&mut app, KeyCode::Char('1'));
    let s = draw(&mut app);
    assert_no_hidden("TUI Overview", &s);
    let first = format!("{p}:k0:{}", HOSTILE[0].shown);
    assert!(s.contains(&first), "TUI Overview: {first}:\n{s}");
    tui_dlq(&mut app, &mut backends).await;
    backends.shutdown().await;
}

/// The TUI's DLQ view: each message selected in turn, its Selected pane shows who
/// dead-lettered it, escaped and bounded.
async fn tui_dlq(app: &mut App, backends: &mut Backends) {
    let key = |app: &mut App, c: KeyCode| app.handle_key(KeyEvent::new(c, KeyModifiers::NONE));
    key(app, KeyCode::Char('7'));
    pump(
        app,
        backends,
        "the hostile DLQ",
        |a| matches!(&a.stores.dlq, Some(Ok(l)) if l.messages.len() >= dlq_messages()),
    )
    .await;
    let mut panes = String::new();
    for _ in 0..dlq_messages() {
        let s = draw(app);
        assert_no_hidden("TUI DLQ", &s);
        let pane = s.lines().skip_while(|l| !l.contains("Selected"));
        panes.extend(pane.map(|l| l.trim_matches(['│', ' ']).to_string() + " "));
        key(app, KeyCode::Down);
    }
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("TUI DLQ: dlq.by.instance", &panes, &all, |i| {
        format!("instance by{i}:")
    });
    assert_shown("TUI DLQ: dlq.by.group", &panes, &all, |i| {
        format!("group grp{i}:")
    });
    assert_dlq_by_bounded("TUI DLQ", &panes);
}

async fn pump(app: &mut App, b: &mut Backends, what: &str, done: impl Fn(&App) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while !done(app) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        if let Ok(Some(u)) =
            tokio::time::timeout(Duration::from_millis(200), b.updates.recv()).await
        {
            app.apply(u);
        }
    }
    app.refresh_views();
}

/// The frame as text, every cell's symbol (a control character ratatui let through included).
fn draw(app: &mut App) -> String {
    let (width, height) = (400, 120);
    app.ui.size = (width, height);
    app.refresh_views();
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    t.draw(|f| ui::draw(f, app)).unwrap();
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        for x in 0..width {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

/// A face of the binary, read back on the world.
type Face = fn(&World);

/// Every face is read back even when one fails, and the test fails naming each that did.
async fn every_face_shows_every_source_escaped(dialect: Dialect) {
    use futures::FutureExt;
    use std::panic::AssertUnwindSafe;
    let w = world(dialect).await;
    let faces: [(&str, Face); 9] = [
        ("trace", trace_table),
        ("trace --json", trace_json),
        ("report", report_markdown),
        ("report --format html", report_html),
        ("locks", locks),
        ("stuck", stuck),
        ("release-lock", release_lock),
        ("dlq", dlq_table),
        ("dlq --json", dlq_json),
    ];
    let mut failed: Vec<&str> = Vec::new();
    for (name, face) in faces {
        if std::panic::catch_unwind(AssertUnwindSafe(|| face(&w))).is_err() {
            failed.push(name);
        }
    }
    if AssertUnwindSafe(tui(&w)).catch_unwind().await.is_err() {
        failed.push("the TUI");
    }
    w.db.pool.close().await;
    assert!(
        failed.is_empty(),
        "{dialect}: these faces failed (see above): {failed:?}"
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] every_face_shows_every_source_escaped => every_face_shows_every_source_escaped_postgres, every_face_shows_every_source_escaped_mysql);

// ---------------------------------------------------------------------------------------------
// The text log of `consume`
// ---------------------------------------------------------------------------------------------

/// A payment event whose eventId header disagrees with its body is poison, and the DLQ reason
/// (and the log line of that decision) quotes the header: with a newline in it, the text log of
/// `consume` must still hold one line per decision, escaped.
async fn consume_text_log_keeps_one_line_per_decision(dialect: Dialect) {
    let setup = common::consumer::consumer_setup(dialect).await;
    let p = common::consumer::producer(&setup.config);
    for (i, x) in HOSTILE.iter().enumerate() {
        let mut e =
            common::consumer::payment(&OrderNo::generate().to_string(), "APP:ORDER:20261130:x", 7);
        e.pay_no = format!("P{i}");
        let body = serde_json::to_vec(&e).unwrap();
        let header = format!("hdr{i}:{}", x.raw);
        let hs = OwnedHeaders::new().insert(Header {
            key: headers::EVENT_ID,
            value: Some(header.as_bytes()),
        });
        p.send(
            FutureRecord::to(&setup.config.kafka.payment_topic)
                .key(&e.order_no)
                .payload(&body)
                .headers(hs),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    }
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut consume = setup
        .consume_command(&[])
        .env("IDEMGUARD_LOG", "warn,idemguard=info")
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = std::fs::read_to_string(log.path()).unwrap();
        if text.matches("disagrees with the body").count() >= HOSTILE.len() {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "consume did not dead-letter them:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = consume.start_kill();
    let _ = consume.wait().await;
    assert_no_hidden("consume's text log", &text);
    let all: Vec<&Hostile> = HOSTILE.iter().collect();
    assert_shown("consume's text log", &text, &all, |i| format!("hdr{i}:"));
    for line in text.lines() {
        let logged = line.starts_with("20") && line.as_bytes().get(4) == Some(&b'-');
        assert!(
            logged || line.starts_with("idemguard "),
            "a forged log line: {line:?}\n{text}"
        );
    }
}

per_dialect!(consume_text_log_keeps_one_line_per_decision => consume_text_log_keeps_one_line_per_decision_postgres, consume_text_log_keeps_one_line_per_decision_mysql);
