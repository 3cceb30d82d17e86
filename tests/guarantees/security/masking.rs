//! Operators of a payment system do not see more than they need: the fields `[mask]` names are
//! masked in every face — `trace` (table and JSON), `report --id` (Markdown and JSON, an audited
//! record's before/after state included), `stuck`, and the TUI, whose `/` filter cannot find a
//! masked value either. In an environment with `environment.production = true` the customer's
//! `user_id` and the API's `response_body` (also the fast path's copy of it) are masked without
//! a word of configuration; here `amount`, `owner`, a Kafka body's payNo and a log line's message
//! are masked too. The same world without the mask shows every value: the checks can fail.

use crate::common;
use crate::support::redis_server;

use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use idemguard::config::{Config, Dialect};
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Backends;
use idemguard::console::tui::keymap::View;
use idemguard::contracts::{keys, now_ms, OrderNo};
use idemguard::db::Database;
use rdkafka::producer::{FutureProducer, FutureRecord};
use redis_server::RedisServer;
use serde_json::json;

/// The values no face may show, each in its own source.
const USER_ID: i64 = 987_654_321;
const AMOUNT: i64 = 4_242_424;
const PAY_NO: &str = "PAYSECRET-77";
const LOG_SECRET: &str = "card 4111-secret";
const OWNER: &str = "owner-secret-host";

fn secrets() -> [String; 5] {
    [
        USER_ID.to_string(),
        AMOUNT.to_string(),
        PAY_NO.into(),
        LOG_SECRET.into(),
        OWNER.into(),
    ]
}

struct World {
    config: Config,
    db: Database,
    _redis: RedisServer,
    order_no: String,
    request_id: String,
    log_file: tempfile::NamedTempFile,
}

async fn world(dialect: Dialect) -> World {
    let (mut config, db) = common::migrated_database(dialect).await;
    let redis = RedisServer::start();
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];
    let topics = common::fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.console.refresh = Duration::from_millis(250);
    let order_no = OrderNo::generate().to_string();
    let request_id = format!("APP:ORDER:20261201:{}", uuid::Uuid::now_v7());
    let now = now_ms();
    write_rows(&db, &order_no, &request_id, now).await;
    let response = json!({ "orderNo": order_no, "userId": USER_ID, "amount": AMOUNT }).to_string();
    let mut c = redis.conn().await;
    let _: () = redis::cmd("SET")
        .arg(keys::idempotency_fast_path(&request_id))
        .arg(&response)
        .query_async(&mut c)
        .await
        .unwrap();
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .create()
        .unwrap();
    let body = json!({ "order_no": order_no, "pay_no": PAY_NO }).to_string();
    p.send(
        FutureRecord::to(&config.kafka.payment_topic)
            .key(&order_no)
            .payload(&body),
        Duration::from_secs(10),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
    let log_file = tempfile::Builder::new().suffix(".log").tempfile().unwrap();
    let line = json!({ "timestamp": now, "service": "pay", "level": "INFO", "message": LOG_SECRET, "orderNo": order_no });
    std::fs::write(log_file.path(), format!("{line}\n")).unwrap();
    config.logs.files = vec![log_file.path().display().to_string()];
    World {
        config,
        db,
        _redis: redis,
        order_no,
        request_id,
        log_file,
    }
}

/// The order, its SUCCEEDED record (its response holding the user id), its payment, points and
/// notification; a stuck record of another request (its owner masked); an audited finalize of
/// the request whose before-state holds the response.
async fn write_rows(db: &Database, order_no: &str, request_id: &str, now: i64) {
    let response = json!({ "orderNo": order_no, "userId": USER_ID }).to_string();
    let rows: Vec<(&str, Vec<serde_json::Value>)> = vec![
        (
            "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES (?, ?, ?, 1, 1, ?, 'PAID', ?, ?)",
            vec![json!(request_id), json!(order_no), json!(USER_ID), json!(AMOUNT), json!(now), json!(now)],
        ),
        (
            "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, response_code, response_body, order_no, owner, lease_until, created_at, updated_at, expire_at) VALUES (?, 'ORDER', 'h', 'SUCCEEDED', 201, ?, ?, 'svc-1', 0, ?, ?, ?)",
            vec![json!(request_id), json!(response), json!(order_no), json!(now), json!(now), json!(now + 86_400_000)],
        ),
        (
            "INSERT INTO payment_flow (pay_no, order_no, amount, status, event_id, created_at) VALUES ('P-1', ?, ?, 'SUCCESS', ?, ?)",
            vec![json!(order_no), json!(AMOUNT), json!(uuid::Uuid::new_v4().to_string()), json!(now)],
        ),
        (
            "INSERT INTO points_ledger (source_event_no, order_no, user_id, points, created_at) VALUES (?, ?, ?, 19, ?)",
            vec![json!(uuid::Uuid::new_v4().to_string()), json!(order_no), json!(USER_ID), json!(now)],
        ),
        (
            "INSERT INTO notification (event_id, order_no, user_id, channel, body, created_at) VALUES (?, ?, ?, 'sms', 'paid', ?)",
            vec![json!(uuid::Uuid::new_v4().to_string()), json!(order_no), json!(USER_ID), json!(now)],
        ),
        (
            "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) VALUES (?, 'ORDER', 'h', 'PROCESSING', ?, ?, ?, ?, ?)",
            vec![json!(format!("APP:ORDER:20261201:stuck-{}", uuid::Uuid::now_v7())), json!(OWNER), json!(now - 600_000), json!(now - 600_000), json!(now - 600_000), json!(now + 86_400_000)],
        ),
        (
            "INSERT INTO ops_audit (operator, environment, action, target, before_state, reason, outcome, detail, created_at) VALUES ('op', 'prod', 'finalize', ?, ?, 'r', 'done', 'SUCCEEDED 201', ?)",
            vec![json!(request_id), json!(json!({ "request_id": request_id, "response_body": response }).to_string()), json!(now)],
        ),
    ];
    for (sql, binds) in rows {
        let mut n = 0;
        let sql = if db.dialect() == Dialect::Postgres {
            sql.chars()
                .map(|c| {
                    if c == '?' {
                        n += 1;
                        format!("${n}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        } else {
            sql.to_string()
        };
        let mut q = sqlx::query(&sql);
        for b in binds {
            q = match b {
                serde_json::Value::Number(n) => q.bind(n.as_i64().unwrap()),
                serde_json::Value::String(s) => q.bind(s),
                other => panic!("{other}"),
            };
        }
        q.execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// The mask of these tests, on top of a production environment's own.
fn masked_env() -> Vec<(&'static str, String)> {
    vec![
        ("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true".into()),
        (
            common::ALLOW_UNVERIFIED.0,
            common::ALLOW_UNVERIFIED.1.into(),
        ),
        ("IDEMGUARD_MASK__COLUMNS", "amount,owner".into()),
        ("IDEMGUARD_MASK__KAFKA_JSON", "/pay_no".into()),
        ("IDEMGUARD_MASK__LOG_JSON", "/message".into()),
    ]
}

impl World {
    fn run(&self, env: &[(&str, String)], args: &[&str]) -> String {
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
            .env("IDEMGUARD_LOGS__FILES", self.log_file.path())
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .env("IDEMGUARD_LOG", "warn")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run idemguard");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// The faces of the binary, each output with what it was run as.
fn faces(w: &World, env: &[(&str, String)]) -> Vec<(String, String)> {
    let commands: [&[&str]; 6] = [
        &["trace", &w.order_no],
        &["trace", &w.order_no, "--json"],
        &["report", "--id", &w.order_no],
        &["report", "--id", &w.order_no, "--json"],
        &["stuck"],
        &["stuck", "--json"],
    ];
    commands
        .iter()
        .map(|args| (args.join(" "), w.run(env, args)))
        .collect()
}

async fn every_face_masks_what_the_mask_names(dialect: Dialect) {
    let w = world(dialect).await;
    // Without a mask every value is shown: the checks below can fail.
    for (face, out) in faces(&w, &[]) {
        let shown: Vec<String> = secrets().into_iter().filter(|s| out.contains(s)).collect();
        assert!(
            !shown.is_empty(),
            "unmasked `{face}` shows the values:\n{out}"
        );
    }
    let all: String = faces(&w, &[]).into_iter().map(|(_, o)| o).collect();
    for s in secrets() {
        assert!(all.contains(&s), "{s} is shown by some face without a mask");
    }
    for (face, out) in faces(&w, &masked_env()) {
        for s in secrets() {
            assert!(!out.contains(&s), "`{face}` shows the masked {s:?}:\n{out}");
        }
        // (In Markdown it is escaped: `\[masked\]` renders as `[masked]`.)
        let said = out.contains("[masked]") || out.contains(r"\[masked\]");
        assert!(said, "`{face}` says what it masked:\n{out}");
    }
    // The trace is still whole: the masked fields link it as before.
    let out = w.run(&masked_env(), &["trace", &w.order_no, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["data"]["request_id"], w.request_id.as_str(), "{out}");
    let fields: Vec<&serde_json::Value> = doc["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["fields"])
        .collect();
    let order = fields
        .iter()
        .find(|f| f["req_id"] == w.request_id.as_str())
        .unwrap();
    assert_eq!(
        (&order["user_id"], &order["amount"]),
        (&json!("[masked]"), &json!("[masked]"))
    );
    assert_eq!(order["status"], "PAID", "unmasked columns are shown");
    tui(&w).await;
    w.db.pool.close().await;
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] every_face_masks_what_the_mask_names => every_face_masks_what_the_mask_names_postgres, every_face_masks_what_the_mask_names_mysql);

/// The TUI under the same mask: the Trace and Stuck views draw no masked value, and the `/`
/// filter finds none (`/987654321` keeps no row; `/PAID`, shown, keeps the order's).
async fn tui(w: &World) {
    let mut config = w.config.clone();
    config.environment.production = true;
    config.mask.columns = vec!["amount".into(), "owner".into()];
    config.mask.kafka_json = vec!["/pay_no".into()];
    config.mask.log_json = vec!["/message".into()];
    let mut backends = Backends::spawn(&config);
    let mut app = App::new(&config, Some(backends.focus.clone()));
    let key = |app: &mut App, c: KeyCode| app.handle_key(KeyEvent::new(c, KeyModifiers::NONE));
    // A command or a filter, then Enter.
    let typed = |app: &mut App, s: &str| {
        for c in s.chars() {
            key(app, KeyCode::Char(c));
        }
        key(app, KeyCode::Enter);
    };
    typed(&mut app, &format!(":trace {}", w.order_no));
    pump(&mut app, &mut backends, "the whole trace", |a| {
        a.timeline().is_some_and(|t| {
            ["log", "kafka", "sink"]
                .iter()
                .all(|l| t.entries.iter().any(|e| e.layer == *l))
                && t.entries.iter().any(|e| e.source.starts_with("idem:"))
        })
    })
    .await;
    let rows = app.timeline_rows();
    let drawn: String = rows.iter().flat_map(|(_, c)| c.clone()).collect();
    let fields = serde_json::to_string(&app.timeline().unwrap()).unwrap();
    for s in secrets() {
        assert!(
            !drawn.contains(&s) && !fields.contains(&s),
            "the TUI shows {s}: {drawn}"
        );
    }
    typed(&mut app, &format!("/{USER_ID}"));
    assert!(
        app.timeline_rows().is_empty(),
        "the filter found a masked value"
    );
    typed(&mut app, "/PAID");
    assert!(
        !app.timeline_rows().is_empty(),
        "the filter finds what is shown"
    );
    key(&mut app, KeyCode::Char('5'));
    assert_eq!(app.ui.view, View::Stuck);
    pump(&mut app, &mut backends, "the stuck record", |a| {
        a.stores.stuck.as_ref().is_some_and(|s| !s.is_empty())
    })
    .await;
    typed(&mut app, &format!("/{OWNER}"));
    assert_eq!(
        app.row_count(View::Stuck),
        0,
        "the filter found a masked owner"
    );
    typed(&mut app, "/[masked]");
    assert_eq!(
        app.row_count(View::Stuck),
        1,
        "the masked owner is drawn as [masked]"
    );
    // The Overview lists the stuck record too, as the Stuck view shows it.
    let overview: String = app.findings().into_iter().map(|f| f.text).collect();
    let masked = overview.contains("held by [masked]") && !overview.contains(OWNER);
    assert!(masked, "the Overview: {overview}");
    backends.shutdown().await;
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
