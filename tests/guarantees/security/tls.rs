//! Every connection production-grade, against the stack's servers that refuse anything less
//! (`scripts/stack up`: a test CA under .stack/tls/; PostgreSQL 5433 and MariaDB 3307 TLS-only
//! with a password; Redis 6390-6393 with mutual TLS and an ACL user; Apache Kafka's listeners
//! 9093 with mutual TLS and 9094 with TLS then SASL).
//!
//! - the order service, the consumer and the console's `trace`, `locks`, `stuck` — the real
//!   binary — run on both dialects with every connection verified (verify-full /
//!   VERIFY_IDENTITY against the test CA, Redis with client certificates, Kafka with a client
//!   certificate on PostgreSQL's run and a SASL SCRAM login on MariaDB's), the passwords read
//!   from files;
//! - every Kafka client — `serve`'s producers, `consume` and its DLQ producer, the console's
//!   `trace` and `dlq` readers, `redrive` — runs over SASL_SSL logged in by each of the broker's
//!   three mechanisms, and `serve` and `consume` say at start which login they use;
//! - each refusal — a certificate that does not verify, a host name not in it (127.0.0.2, which
//!   the servers also listen on), plaintext to a TLS-only server, no client certificate, a SASL
//!   login the broker refuses — fails within seconds, saying which and naming the setting.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect, KafkaSecurityProtocol, SaslMechanism};
use idemguard::db::Database;

fn tls_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".stack/tls")
}

fn tls_file(name: &str) -> String {
    let p = tls_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `scripts/stack up` (it makes the test CA and the TLS servers)",
        p.display()
    );
    p.display().to_string()
}

/// The TLS server of the dialect, verified in full against the test CA (path replaced).
fn tls_server_url(dialect: Dialect, host: &str, database: &str) -> String {
    let ca = tls_file("ca.pem");
    match dialect {
        Dialect::Postgres => format!(
            "postgres://idemguard@{host}:5433/{database}?sslmode=verify-full&sslrootcert={ca}"
        ),
        Dialect::Mysql => {
            format!("mysql://idemguard@{host}:3307/{database}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}")
        }
    }
}

/// The local configuration with every backend on its TLS server, verified, passwords in files.
fn tls_config(dialect: Dialect) -> Config {
    let mut c = common::local_config();
    c.database.url = tls_server_url(dialect, "localhost", "idemguard");
    c.database.password_file = tls_file("database.password");
    c.redis.url = "rediss://idemguard@localhost:6390".into();
    c.redis.redlock_nodes = (6391..=6393)
        .map(|p| format!("rediss://idemguard@localhost:{p}"))
        .collect();
    c.redis.tls_ca_file = tls_file("ca.pem");
    c.redis.tls_cert_file = tls_file("client.pem");
    c.redis.tls_key_file = tls_file("client.key");
    c.redis.password_file = tls_file("redis.password");
    // A TLS connect (the platform roots read, a handshake) on a loaded 2-core machine, debug
    // build: well above the default 500ms at times.
    c.redis.command_timeout = Duration::from_secs(3);
    c.kafka.bootstrap_servers = "localhost:9093".into();
    c.kafka.security_protocol = KafkaSecurityProtocol::Ssl;
    c.kafka.ssl_ca_file = tls_file("ca.pem");
    c.kafka.ssl_cert_file = tls_file("client.pem");
    c.kafka.ssl_key_file = tls_file("client.key");
    c
}

/// Kafka's other production login, on the stack's SASL broker (9094: TLS, then SCRAM; the user
/// `idemguard` and the password of .stack/tls/kafka.password): the MariaDB run reaches Kafka
/// this way, the PostgreSQL run with a client certificate (9093) — Kafka's login does not depend
/// on the dialect, so each run proves one of the two. [`every_kafka_client_logs_in_by`] overrides
/// the mechanism per process, for each of the broker's three.
fn sasl_login(c: &mut Config) {
    c.kafka.bootstrap_servers = "localhost:9094".into();
    c.kafka.security_protocol = KafkaSecurityProtocol::SaslSsl;
    c.kafka.sasl_mechanism = SaslMechanism::ScramSha512;
    c.kafka.sasl_username = "idemguard".into();
    c.kafka.sasl_password_file = tls_file("kafka.password");
    c.kafka.ssl_cert_file = String::new();
    c.kafka.ssl_key_file = String::new();
}

/// A database and topics of the test's own on the TLS servers, the schema applied by the real
/// `idemguard migrate`; the configuration as the file the binary is given. Kafka is reached as
/// the dialect's run does (see [`sasl_login`]).
async fn tls_world(dialect: Dialect) -> (Config, tempfile::TempDir, PathBuf, Database) {
    tls_world_with(dialect, dialect == Dialect::Mysql).await
}

/// [`tls_world`], Kafka reached by the SASL login when `sasl`, else by client certificate.
async fn tls_world_with(
    dialect: Dialect,
    sasl: bool,
) -> (Config, tempfile::TempDir, PathBuf, Database) {
    let mut config = tls_config(dialect);
    if sasl {
        sasl_login(&mut config);
    }
    let server = match dialect {
        Dialect::Postgres => tls_server_url(dialect, "localhost", "postgres"),
        Dialect::Mysql => tls_server_url(dialect, "localhost", "mysql"),
    };
    let name = common::fresh_database_on(&config, &server).await;
    config.database.url = tls_server_url(dialect, "localhost", &name);
    let topics = common::fresh_topics(
        &config,
        &[
            "payment.succeeded",
            "payment.succeeded.dlq",
            "idemguard.trace",
        ],
    )
    .await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.dlq_topic = topics[1].clone();
    config.kafka.trace_topic = topics[2].clone();
    config.kafka.consumer_group = format!("igt-group-{}", common::unique_suffix());
    config.environment.production = true;
    config.environment.name = "tls-test".into();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tls.toml");
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
    let (code, out) = idemguard(&file, &["migrate"], &[]).await;
    assert_eq!(code, Some(0), "migrate over TLS: {out}");
    let db = Database::connect(&config)
        .await
        .expect("the test's database over TLS");
    (config, dir, file, db)
}

/// The real binary on `file`, with `env` over it; (exit code, stdout + stderr).
async fn idemguard(file: &Path, args: &[&str], env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
    c.arg("--config").arg(file).args(args).kill_on_drop(true);
    c.env_remove("IDEMGUARD_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .unwrap_or_else(|_| panic!("idemguard {args:?} did not finish within 60 s"))
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process of the binary for the test's duration (killed when dropped), with `env` over
/// `file`, its stderr as asked.
fn spawn_with(
    file: &Path,
    args: &[&str],
    env: &[(&str, String)],
    stderr: std::process::Stdio,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .arg("--config")
        .arg(file)
        .args(args)
        .env_remove("IDEMGUARD_CONFIG")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

fn spawn(file: &Path, args: &[&str]) -> tokio::process::Child {
    spawn_with(file, args, &[], std::process::Stdio::null())
}

/// A service started on `file` with `env` over it, and the line it says on stderr, as it
/// starts, of how each connection is secured.
async fn spawn_saying_connections(
    file: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = spawn_with(file, args, env, std::process::Stdio::piped());
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let said = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("connections: ") {
                return line;
            }
        }
        String::new()
    })
    .await
    .expect("the service says how its connections are secured within 30 s");
    // The rest of its stderr is drained, so the service never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, said)
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = http
        .post(url)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

/// On the order service at `port`: an order placed twice with one key (the second a replay),
/// then paid; waits (bounded) until the consumer has made it PAID with one points row. Its
/// orderNo.
async fn placed_twice_and_paid(port: u16, db: &Database, what: &str) -> String {
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let ready = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "{what}: serve did not start over TLS"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let key = idemguard::contracts::RequestId::generate("APP", "ORDER")
        .as_str()
        .to_string();
    let body = serde_json::json!({"userId": 42, "skuId": 1, "quantity": 1, "amount": 1999});
    let (status, first) = post(&http, &format!("{base}/orders"), &key, body.clone()).await;
    assert_eq!(status, 201, "{what}: {first}");
    let (status, again) = post(&http, &format!("{base}/orders"), &key, body).await;
    assert_eq!((status, &again), (201, &first), "{what}: the replay");
    let order_no = first["orderNo"].as_str().unwrap().to_string();
    let pay = serde_json::json!({"payNo": format!("PAY{}", common::unique_suffix()), "orderNo": order_no, "amount": 1999});
    let pay_key = idemguard::contracts::RequestId::generate("PAY", "CALLBACK")
        .as_str()
        .to_string();
    let (status, paid) = post(&http, &format!("{base}/payments/callback"), &pay_key, pay).await;
    assert!(
        status == 200 || status == 201,
        "{what}: payment {status} {paid}"
    );
    let waited = Instant::now();
    loop {
        if common::count(
            db,
            &format!("order_record WHERE order_no = '{order_no}' AND status = 'PAID'"),
        )
        .await
            == 1
            && common::count(db, &format!("points_ledger WHERE order_no = '{order_no}'")).await == 1
        {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "{what}: the consumer did not pay {order_no} over TLS"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    order_no
}

/// An order placed twice with one key, paid, consumed; then the console's twins on it — every
/// process of it on verified TLS to every backend.
async fn the_three_lines_and_the_console_run_over_verified_tls(dialect: Dialect) {
    let (config, _dir, file, db) = tls_world(dialect).await;
    let (code, out) = idemguard(&file, &["doctor", "--strict"], &[]).await;
    assert_eq!(
        code,
        Some(0),
        "{dialect}: doctor --strict in production over TLS:\n{out}"
    );
    for service in [
        "database security",
        "redis security",
        "redlock node 3 security",
        "kafka security",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(service))
            .unwrap_or_else(|| panic!("{service}:\n{out}"));
        assert!(
            line.contains("TLSv1.3, verified against")
                && line.contains("host name checked")
                && line.contains("CN=localhost"),
            "{dialect}: {line}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("database security") && l.contains("user idemguard")),
        "{out}"
    );
    let kafka_user = match dialect {
        Dialect::Mysql => "idemguard (SASL SCRAM-SHA-512)",
        Dialect::Postgres => "by client certificate",
    };
    assert!(
        out.lines()
            .any(|l| l.starts_with("kafka security") && l.contains(kafka_user)),
        "{dialect}: {kafka_user}:\n{out}"
    );

    sqlx::query("INSERT INTO inventory (sku_id, stock, updated_at) VALUES (1, 100, 0)")
        .execute(&db.pool)
        .await
        .unwrap();
    let port = free_port();
    let (_serve, secured) = spawn_saying_connections(
        &file,
        &["serve", "--listen", &format!("127.0.0.1:{port}")],
        &[],
    )
    .await;
    for key in [
        "database.url",
        "redis.url",
        "redis.redlock_nodes",
        "kafka.security_protocol",
    ] {
        assert!(
            secured.contains(&format!("{key} TLS, verified against")),
            "{dialect}: serve says how {key} is secured: {secured}"
        );
    }
    assert!(!secured.contains("PLAINTEXT"), "{dialect}: {secured}");
    assert!(
        secured.contains(&format!("host checked, user {kafka_user}")),
        "{dialect}: serve says its Kafka login: {secured}"
    );
    let _consume = spawn(&file, &["consume"]);
    let order_no = placed_twice_and_paid(port, &db, &dialect.to_string()).await;
    let (code, out) = idemguard(&file, &["trace", &order_no, "--json"], &[]).await;
    assert_eq!(code, Some(0), "{dialect}: trace over TLS: {out}");
    let trace: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    let text = trace.to_string();
    for expected in [
        "idempotency_record",
        "order_record",
        "replayed",
        "processed",
    ] {
        assert!(
            text.contains(expected),
            "{dialect}: the trace has {expected}: {text}"
        );
    }
    let (code, out) = idemguard(&file, &["locks", "--json"], &[]).await;
    assert_eq!(code, Some(0), "{dialect}: locks over mutual TLS: {out}");
    // A Redis Cluster over mutual TLS: the seeds, then each master reached directly.
    let cluster = (
        "IDEMGUARD_REDIS__URL",
        "rediss+cluster://idemguard@localhost:7011,localhost:7012".to_string(),
    );
    let (code, out) = idemguard(&file, &["locks", "--json"], &[cluster]).await;
    assert_eq!(code, Some(0), "{dialect}: locks on a TLS cluster: {out}");
    let (code, out) = idemguard(&file, &["stuck", "--json"], &[]).await;
    assert_eq!(code, Some(0), "{dialect}: stuck over TLS: {out}");
    let _ = config;
}

per_dialect!(#[tokio::test(flavor = "multi_thread")] the_three_lines_and_the_console_run_over_verified_tls
    => the_three_lines_and_the_console_run_over_verified_tls_postgres,
       the_three_lines_and_the_console_run_over_verified_tls_mysql);

/// Every Kafka client over SASL_SSL, logged in by `mechanism` — chosen as an operator would, by
/// `IDEMGUARD_KAFKA__SASL_MECHANISM` over a file that names SCRAM-SHA-512: `serve`'s producers
/// (the outbox's payment events, the trace events), `consume` (its reads and its DLQ producer),
/// the console's readers (`trace`, `dlq`) and `redrive`. `serve` and `consume` say that login as
/// they start, and `doctor` with the same environment reports it, as every command reads the
/// one configuration; the listener (9094) takes nothing but a SASL login. An order is paid once;
/// its trace reads the payment and trace topics; an event for an order not yet written is
/// dead-lettered, listed, and once its order exists its redrive is applied once.
async fn every_kafka_client_logs_in_by(mechanism: &str) {
    let (config, _dir, file, db) = tls_world_with(Dialect::Postgres, true).await;
    let env = [("IDEMGUARD_KAFKA__SASL_MECHANISM", mechanism.to_string())];
    let login = format!("user idemguard (SASL {mechanism})");
    let (code, out) = idemguard(&file, &["doctor", "--strict"], &env).await;
    let kafka = out.lines().find(|l| l.starts_with("kafka security"));
    assert!(
        code == Some(0) && kafka.is_some_and(|l| l.contains(&login)),
        "{mechanism}: doctor:\n{out}"
    );

    sqlx::query("INSERT INTO inventory (sku_id, stock, updated_at) VALUES (1, 100, 0)")
        .execute(&db.pool)
        .await
        .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (_serve, serve_says) =
        spawn_saying_connections(&file, &["serve", "--listen", &listen], &env).await;
    let (_consume, consume_says) = spawn_saying_connections(&file, &["consume"], &env).await;
    for said in [&serve_says, &consume_says] {
        assert!(
            said.contains(&format!(
                "kafka.security_protocol TLS, verified against {}, host checked, {login}",
                config.kafka.ssl_ca_file
            )),
            "{mechanism}: {said}"
        );
    }
    let order_no = placed_twice_and_paid(port, &db, mechanism).await;

    let (code, out) = idemguard(&file, &["trace", &order_no, "--json"], &env).await;
    assert_eq!(code, Some(0), "{mechanism}: trace: {out}");
    let trace = json_in(&out, mechanism);
    for topic in ["payment topic", "trace topic"] {
        let read = trace["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == topic);
        assert!(
            read.is_some_and(
                |b| b["ok"] == true && b["target"].as_str().unwrap().starts_with("localhost:9094 ")
            ),
            "{mechanism}: the trace read the {topic} over the login: {trace}"
        );
    }
    // Read over the login: serve's trace events (the replay, the outbox's publish), the
    // consumer's, and the payment event the outbox published.
    let entries = trace["data"]["entries"].as_array().unwrap();
    for outcome in ["replayed", "event_published", "transition_applied"] {
        assert!(
            entries
                .iter()
                .any(|e| e["source"] == "trace" && e["fields"]["outcome"] == outcome),
            "{mechanism}: the trace event {outcome}: {trace}"
        );
    }
    let payment_topic = format!("{} p", config.kafka.payment_topic);
    assert!(
        entries
            .iter()
            .any(|e| e["source"].as_str().unwrap().starts_with(&payment_topic)),
        "{mechanism}: the payment event: {trace}"
    );

    // An event for an order not written yet: the consumer dead-letters it as unknown.
    let (late_no, late_req) = (
        idemguard::contracts::OrderNo::generate().to_string(),
        format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7()),
    );
    let late = common::consumer::payment(&late_no, &late_req, 43);
    let producer: rdkafka::producer::FutureProducer =
        idemguard::kafka_client::producer_config(&config.kafka)
            .create()
            .unwrap();
    common::consumer::produce(&producer, &config.kafka.payment_topic, &late).await;
    let position = dlq_position(&file, &env, &late.event_id, mechanism).await;
    sqlx::query(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES ($1, $2, 43, 1, 1, 1999, 'CREATED', 0, 0)",
    )
    .bind(&late_req)
    .bind(&late_no)
    .execute(&db.pool)
    .await
    .unwrap();
    let args = ["redrive", "--dlq", &position, "--allow-actions", "--json"];
    let (code, out) = idemguard(&file, &args, &env).await;
    let redriven = json_in(&out, mechanism);
    assert_eq!(
        (code, redriven["results"][0]["outcome"].as_str()),
        (Some(0), Some("done")),
        "{mechanism}: redrive: {out}"
    );
    let applied = format!("points_ledger WHERE source_event_no = '{}'", late.event_id);
    let waited = Instant::now();
    while common::count(&db, &applied).await == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "{mechanism}: the redriven event was not applied"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let paid = format!("order_record WHERE order_no = '{late_no}' AND status = 'PAID'");
    assert_eq!(common::count(&db, &paid).await, 1, "{mechanism}");
    assert_eq!(common::count(&db, &applied).await, 1, "{mechanism}: once");
}

/// The DLQ position (`P:O`) of the message of `event_id`, as `idemguard dlq --json` lists it;
/// waits (bounded) until it is listed.
async fn dlq_position(
    file: &Path,
    env: &[(&str, String)],
    event_id: &str,
    mechanism: &str,
) -> String {
    let waited = Instant::now();
    loop {
        let (code, out) = idemguard(file, &["dlq", "--json"], env).await;
        assert_eq!(code, Some(0), "{mechanism}: dlq: {out}");
        let json = json_in(&out, mechanism);
        let listed = json["data"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["event_id"] == event_id);
        if let Some(m) = listed {
            return format!("{}:{}", m["partition"], m["offset"]);
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "{mechanism}: {event_id} not dead-lettered: {json}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The JSON document a command printed on stdout, before what it said on stderr.
fn json_in(out: &str, what: &str) -> serde_json::Value {
    let from = out
        .find('{')
        .unwrap_or_else(|| panic!("{what}: no JSON: {out}"));
    serde_json::Deserializer::from_str(&out[from..])
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("{what}: no JSON: {out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_kafka_client_logs_in_by_scram_sha_256() {
    every_kafka_client_logs_in_by("SCRAM-SHA-256").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_kafka_client_logs_in_by_plain() {
    every_kafka_client_logs_in_by("PLAIN").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_kafka_client_logs_in_by_scram_sha_512() {
    every_kafka_client_logs_in_by("SCRAM-SHA-512").await;
}

/// One refusal: what was run, what the message must say (which refusal, the setting).
struct Refused {
    what: String,
    args: &'static [&'static str],
    env: Vec<(&'static str, String)>,
    says: [&'static str; 2],
}

/// `host:port`.
fn is_address(word: &str) -> bool {
    word.rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

async fn check(file: &Path, r: &Refused) {
    let started = Instant::now();
    let (code, out) = idemguard(file, r.args, &r.env).await;
    let took = started.elapsed();
    assert_ne!(code, Some(0), "{}: must fail:\n{out}", r.what);
    for s in r.says {
        assert!(out.contains(s), "{}: says `{s}`:\n{out}", r.what);
    }
    for line in out.lines() {
        let words = line.split_whitespace().collect::<Vec<_>>();
        assert!(
            !words.windows(2).any(|w| w[0] == w[1] && is_address(w[0])),
            "{}: an address said twice in a row: {line}",
            r.what
        );
    }
    assert!(
        took < Duration::from_secs(15),
        "{}: failed after {took:?}",
        r.what
    );
}

/// Each refusal, for each backend: a certificate that does not verify (a CA that did not issue
/// it), a host name not in it, plaintext to a server that refuses it, TLS to a plaintext port;
/// and the mutual-TLS and SASL refusals. All at once, each within 15 s.
#[tokio::test(flavor = "multi_thread")]
async fn each_refusal_says_which_and_the_setting_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tls.toml");
    std::fs::write(
        &file,
        toml::to_string(&tls_config(Dialect::Postgres)).unwrap(),
    )
    .unwrap();
    let cases: Vec<Refused> = [database_refusals(), redis_refusals(), kafka_refusals()]
        .into_iter()
        .flatten()
        .collect();
    let checks: Vec<_> = cases.iter().map(|r| check(&file, r)).collect();
    futures::future::join_all(checks).await;
}

/// `migrate` on each dialect's TLS server: another CA, 127.0.0.2, plaintext.
fn database_refusals() -> Vec<Refused> {
    let other = tls_file("other-ca.pem");
    let mut cases = Vec::new();
    for dialect in common::DIALECTS {
        let (mode, param, plain, by_ca) = match dialect {
            Dialect::Postgres => (
                "sslmode=verify-full",
                "sslrootcert",
                "sslmode=disable",
                "sslmode=verify-ca",
            ),
            Dialect::Mysql => (
                "ssl-mode=VERIFY_IDENTITY",
                "ssl-ca",
                "ssl-mode=DISABLED",
                "ssl-mode=VERIFY_CA",
            ),
        };
        let good = tls_server_url(dialect, "localhost", "idemguard");
        let untrusted = good.replace(&tls_file("ca.pem"), &other);
        let wrong_name = tls_server_url(dialect, "127.0.0.2", "idemguard");
        let plaintext = good.split('?').next().unwrap().to_string() + "?" + plain;
        for (what, url, says) in [
            ("untrusted", untrusted, ["unknown issuer", param]),
            (
                "host name",
                wrong_name,
                ["not valid for the host name `127.0.0.2`", by_ca],
            ),
            (
                "plaintext",
                plaintext,
                ["refuses unencrypted connections", mode],
            ),
        ] {
            cases.push(Refused {
                what: format!("{dialect} {what}"),
                args: &["migrate"],
                env: vec![("IDEMGUARD_DATABASE__URL", url)],
                says,
            });
        }
    }
    cases
}

/// `locks` on the mutual-TLS Redis: another CA, 127.0.0.2, plaintext, no client certificate.
fn redis_refusals() -> Vec<Refused> {
    let no_redlock = ("IDEMGUARD_REDIS__REDLOCK_NODES", String::new());
    let redis = |what: &str, env: Vec<(&'static str, String)>, says| Refused {
        what: format!("redis {what}"),
        args: &["locks"],
        env: [vec![no_redlock.clone()], env].concat(),
        says,
    };
    let no_client = vec![
        ("IDEMGUARD_REDIS__TLS_CERT_FILE", String::new()),
        ("IDEMGUARD_REDIS__TLS_KEY_FILE", String::new()),
    ];
    let plaintext = [
        vec![
            (
                "IDEMGUARD_REDIS__URL",
                "redis://idemguard@localhost:6390".into(),
            ),
            ("IDEMGUARD_REDIS__TLS_CA_FILE", String::new()),
        ],
        no_client.clone(),
    ]
    .concat();
    vec![
        redis(
            "untrusted",
            vec![("IDEMGUARD_REDIS__TLS_CA_FILE", tls_file("other-ca.pem"))],
            ["unknown issuer", "redis.tls_ca_file"],
        ),
        redis(
            "host name",
            vec![(
                "IDEMGUARD_REDIS__URL",
                "rediss://idemguard@127.0.0.2:6390".into(),
            )],
            [
                "not valid for the host name `127.0.0.2`",
                "name the certificate has",
            ],
        ),
        redis(
            "plaintext",
            plaintext,
            ["refuses unencrypted connections", "rediss://"],
        ),
        redis(
            "TLS to the plaintext port",
            vec![("IDEMGUARD_REDIS__URL", "rediss://127.0.0.1:6379".into())],
            [
                "127.0.0.1:6379 does not speak TLS",
                "redis:// where plaintext",
            ],
        ),
        redis(
            "no client certificate",
            no_client,
            ["requires a client certificate", "redis.tls_cert_file"],
        ),
    ]
}

/// `consume` on the broker's TLS listeners: another CA, 127.0.0.2 (the broker's listener on
/// 9096 there), plaintext, no client certificate; a SASL login the broker refuses (a user it does
/// not know), by SCRAM and by PLAIN.
/// A `trace` reads the topics through readers of its own: its plaintext refusal is said too.
fn kafka_refusals() -> Vec<Refused> {
    let kafka = |what: &str, env: Vec<(&'static str, String)>, says| Refused {
        what: format!("kafka {what}"),
        args: &["consume"],
        env,
        says,
    };
    let no_client = vec![
        ("IDEMGUARD_KAFKA__SSL_CERT_FILE", String::new()),
        ("IDEMGUARD_KAFKA__SSL_KEY_FILE", String::new()),
    ];
    let plaintext = [
        vec![
            ("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "PLAINTEXT".into()),
            ("IDEMGUARD_KAFKA__SSL_CA_FILE", String::new()),
        ],
        no_client.clone(),
    ]
    .concat();
    let sasl = [
        vec![
            (
                "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
                "localhost:9094".into(),
            ),
            ("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "SASL_SSL".into()),
            ("IDEMGUARD_KAFKA__SASL_USERNAME", "alice".into()),
            ("IDEMGUARD_KAFKA__SASL_PASSWORD", "not-her-password".into()),
        ],
        no_client.clone(),
    ]
    .concat();
    // PLAIN, the broker's other mechanism on that listener, with a password that is not hers.
    let plain_login = [
        vec![
            (
                "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
                "localhost:9094".into(),
            ),
            ("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "SASL_SSL".into()),
            ("IDEMGUARD_KAFKA__SASL_MECHANISM", "PLAIN".into()),
            ("IDEMGUARD_KAFKA__SASL_USERNAME", "alice".into()),
            ("IDEMGUARD_KAFKA__SASL_PASSWORD", "not-her-password".into()),
        ],
        no_client.clone(),
    ]
    .concat();
    vec![
        kafka(
            "untrusted",
            vec![("IDEMGUARD_KAFKA__SSL_CA_FILE", tls_file("other-ca.pem"))],
            ["unknown issuer", "kafka.ssl_ca_file"],
        ),
        kafka(
            "host name",
            vec![(
                "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
                "127.0.0.2:9096".into(),
            )],
            [
                "not valid for the host name `127.0.0.2`",
                "kafka.bootstrap_servers",
            ],
        ),
        kafka(
            "plaintext",
            plaintext.clone(),
            ["refuses unencrypted connections", "kafka.security_protocol"],
        ),
        kafka(
            "TLS to the plaintext listener",
            vec![(
                "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
                "127.0.0.1:9092".into(),
            )],
            [
                "127.0.0.1:9092 does not speak TLS",
                "kafka.security_protocol",
            ],
        ),
        Refused {
            what: "kafka plaintext, as the console's trace reads".into(),
            args: &["trace", "ORD-TLS-REFUSED"],
            env: plaintext.clone(),
            says: ["refuses unencrypted connections", "kafka.security_protocol"],
        },
        kafka(
            "no client certificate",
            no_client,
            ["requires a client certificate", "kafka.ssl_cert_file"],
        ),
        kafka(
            "SASL login refused",
            sasl,
            ["refused the SASL login of `alice`", "kafka.sasl_password"],
        ),
        kafka(
            "SASL PLAIN login refused",
            plain_login,
            ["refused the SASL login of `alice`", "kafka.sasl_password"],
        ),
    ]
}

/// The six worked configurations of `docs/production.md`, as written there:
/// each parses and passes the same validation as `--config`. The files they name (provider CA
/// bundles, secrets under /run) are pointed at the test CA's files, key by key, through the
/// environment — the rest of each block is loaded as written.
#[test]
fn the_production_guides_configurations_load() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/production.md"))
        .unwrap();
    let blocks: Vec<&str> = guide
        .split("```toml\n")
        .skip(1)
        .map(|b| &b[..b.find("```").unwrap()])
        .collect();
    assert_eq!(blocks.len(), 6, "six worked configurations");
    let files = [
        ("redis", "tls_ca_file", "ca.pem"),
        ("redis", "tls_cert_file", "client.pem"),
        ("redis", "tls_key_file", "client.key"),
        ("redis", "password_file", "redis.password"),
        ("database", "password_file", "database.password"),
        ("kafka", "sasl_password_file", "redis.password"),
        ("kafka", "ssl_ca_file", "ca.pem"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, block) in blocks.iter().enumerate() {
        let table: toml::Table = block.parse().unwrap_or_else(|e| panic!("block {i}: {e}"));
        let env = files
            .iter()
            .filter(|(section, key, _)| table.get(*section).and_then(|s| s.get(*key)).is_some())
            .map(|(section, key, file)| {
                let var = format!(
                    "IDEMGUARD_{}__{}",
                    section.to_uppercase(),
                    key.to_uppercase()
                );
                (var, tls_file(file))
            })
            .collect();
        let path = dir.path().join(format!("production-{i}.toml"));
        std::fs::write(&path, block).unwrap();
        let config = Config::load(&idemguard::config::ConfigSource {
            file: Some(path),
            env,
        })
        .unwrap_or_else(|e| panic!("docs/production.md block {i} does not load: {e}\n{block}"));
        assert!(!config.to_redacted_toml().is_empty());
    }
}

/// The console's least-privilege principal (`idemguard-console`: Describe, Read and
/// DescribeConfigs on the topics, Describe on groups and the cluster) over SASL_SSL, logged in by
/// each of the broker's three mechanisms: the DLQ, the trace and the lag are read; a redrive is
/// refused before anything is published, naming the ACL it lacks and how to grant it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_principal_reads_and_its_redrive_names_the_missing_acl() {
    use common::consumer::{consumer_setup, payment, produce, producer};
    let s = consumer_setup(Dialect::Postgres).await;
    let member = s.start_member().await;
    // An order the database does not have: dead-lettered as unknown.
    let order = idemguard::contracts::OrderNo::generate().to_string();
    let poison = payment(
        &order,
        "APP:ORDER:20261130:0193a1c2-7b3d-7c4e-8f00-cccccccccccc",
        7,
    );
    produce(&producer(&s.config), &s.config.kafka.payment_topic, &poison).await;
    member
        .until("the poison dead-lettered", 60, |st| {
            st.dlq.load(std::sync::atomic::Ordering::Relaxed) >= 1
        })
        .await;
    member.stop().await;

    let console = |mechanism: &str| {
        vec![
            ("IDEMGUARD_DATABASE__URL", s.config.database.url.clone()),
            (
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
                s.config.kafka.payment_topic.clone(),
            ),
            (
                "IDEMGUARD_KAFKA__DLQ_TOPIC",
                s.config.kafka.dlq_topic.clone(),
            ),
            ("IDEMGUARD_KAFKA__CONSUMER_GROUP", s.group.clone()),
            (
                "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
                "localhost:9094".into(),
            ),
            ("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "SASL_SSL".into()),
            ("IDEMGUARD_KAFKA__SASL_MECHANISM", mechanism.into()),
            ("IDEMGUARD_KAFKA__SASL_USERNAME", "idemguard-console".into()),
            (
                "IDEMGUARD_KAFKA__SASL_PASSWORD_FILE",
                tls_file("kafka-console.password"),
            ),
            ("IDEMGUARD_KAFKA__SSL_CA_FILE", tls_file("ca.pem")),
            ("IDEMGUARD_TRACE__ENABLED", "false".into()),
        ]
    };
    let local = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"));
    let mut position = String::new();
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
        let (code, out) = idemguard(local, &["dlq", "--json"], &console(mechanism)).await;
        assert_eq!(
            code,
            Some(0),
            "{mechanism}: dlq as the console's principal: {out}"
        );
        let json: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..])
            .unwrap_or_else(|e| panic!("{mechanism}: {e}: {out}"));
        let m = &json["data"]["messages"][0];
        assert_eq!(
            m["event_id"],
            poison.event_id.as_str(),
            "{mechanism}: {json}"
        );
        position = format!("{}:{}", m["partition"], m["offset"]);
    }
    let env = console("SCRAM-SHA-512");
    let (code, out) = idemguard(local, &["rates", "--json"], &env).await;
    assert_eq!(
        code,
        Some(0),
        "rates (the group's lag) as the console's principal: {out}"
    );
    let (_, out) = idemguard(local, &["trace", &order, "--json"], &env).await;
    assert!(
        out.contains(&poison.event_id),
        "the trace reads the payment topic: {out}"
    );

    let args = ["redrive", "--dlq", &position, "--allow-actions", "--json"];
    let (code, out) = idemguard(local, &args, &env).await;
    let topic = &s.config.kafka.payment_topic;
    for says in [
        "refused",
        "User:idemguard-console",
        &format!("the ACL Write on Topic:{topic}"),
        "kafka-acls.sh",
    ] {
        assert!(out.contains(says), "redrive says `{says}`: {out}");
    }
    assert_ne!(code, Some(0), "{out}");
    let published = common::count(&s.db, "ops_audit WHERE outcome = 'done'").await;
    assert_eq!(published, 0, "nothing recorded as published: {out}");
}
