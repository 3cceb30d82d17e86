//! The alerting an on-call engineer relies on, proved against the real things: promtool checks
//! and unit-tests every rule of config/prometheus/; a real `serve` and `consume` expose metrics
//! promtool lints; and a real Prometheus (Debian's, started here on a free port with its own
//! data directory) scrapes both during a few orders, replays and payments, until every
//! expression of the rules and of the dashboard (config/grafana/) returns data and the counters agree with what was sent.
//! The consumer lag the alert fires on is the lag the console shows, for a group whose committed
//! offsets the test laid out itself.
//! promtool and prometheus come from `scripts/stack up` (Debian's `prometheus` package).

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect};
use idemguard::db::orders::Orders;
use idemguard::trace::Tracer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use common::consumer::consumer_setup;

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/prometheus/idemguard.rules.yml"
);
const RULE_TESTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/prometheus/idemguard.rules.test.yml"
);
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/grafana/idemguard.json");
/// How long the real Prometheus may take to hold data for every expression.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(120);

/// `promtool ARGS…`, its output in the panic message when it fails.
fn promtool(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = std::process::Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool not found ({e}): run scripts/stack up (it installs Debian's prometheus)"
            )
        });
    {
        use std::io::Write;
        let mut input = child.stdin.take().expect("piped");
        input
            .write_all(stdin.unwrap_or("").as_bytes())
            .expect("promtool reads its input");
    }
    let out = child.wait_with_output().expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// The alert names and one-line `expr:`s of the rules file.
fn rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(RULES).unwrap();
    let mut out = Vec::new();
    let mut alert = None;
    for line in text.lines().map(str::trim) {
        if let Some(a) = line.strip_prefix("- alert: ") {
            alert = Some(a.to_string());
        } else if let Some(e) = line.strip_prefix("expr: ") {
            out.push((
                alert.take().expect("an expr follows its alert"),
                e.to_string(),
            ));
        }
    }
    out
}

#[test]
fn every_rule_is_valid_has_a_runbook_and_is_unit_tested() {
    promtool(&["check", "rules", RULES], None);
    let tested = promtool(&["test", "rules", RULE_TESTS], None);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let rules = rules();
    assert!(rules.len() >= 9, "the rules file has its rules: {rules:?}");
    let text = std::fs::read_to_string(RULES).unwrap();
    assert_eq!(
        text.matches("runbook: ").count(),
        rules.len(),
        "every rule has a runbook"
    );
    let tests = std::fs::read_to_string(RULE_TESTS).unwrap();
    for (alert, _) in &rules {
        let cases = tests.matches(&format!("alertname: {alert}\n")).count();
        assert!(
            cases >= 2,
            "{alert} is tested firing and quiet ({cases} cases)"
        );
    }
}

/// Every `expr` of the dashboard's panels.
fn dashboard_expressions() -> Vec<String> {
    let text = std::fs::read_to_string(DASHBOARD).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let out: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("a target has an expr")
                .to_string()
        })
        .collect();
    assert!(out.len() >= 15, "the dashboard has its panels: {out:?}");
    out
}

/// The sides of an alert's comparison: each must return data for the alert to mean anything.
fn signals(expr: &str) -> Vec<String> {
    expr.split(" > ")
        .map(str::trim)
        .filter(|s| s.parse::<f64>().is_err())
        .map(String::from)
        .collect()
}

/// A child that says where it listens on stdout: its lines, read until `wanted` are all seen.
async fn spawn_and_read(mut command: Command, wanted: &[&str]) -> (Child, Vec<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the idemguard binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut found = vec![String::new(); wanted.len()];
    let read = async {
        while found.iter().any(String::is_empty) {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the process says where it listens before exiting");
            for (i, w) in wanted.iter().enumerate() {
                if let Some(rest) = line.split_once(w) {
                    found[i] = rest.1.trim_end_matches("/metrics").to_string();
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the process is listening within 60 s");
    (child, found)
}

fn idemguard(config: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemguard"));
    c.arg("--config")
        .arg(config)
        .args(args)
        .env_remove("IDEMGUARD_CONFIG")
        .stdin(Stdio::null());
    c
}

/// A real Prometheus on a free port, its data in `dir`, scraping `targets` every second.
async fn prometheus(dir: &Path, targets: &[&str]) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - '{RULES}'\n\
         scrape_configs:\n  - job_name: idemguard\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus not found: run scripts/stack up (it installs Debian's prometheus)");
    (child, format!("http://127.0.0.1:{port}"))
}

/// The instant vector of `query`, empty when Prometheus is not up yet.
async fn query(http: &reqwest::Client, base: &str, query: &str) -> Vec<serde_json::Value> {
    let answer = http
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", query)])
        .send()
        .await;
    let Ok(answer) = answer else { return vec![] };
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    body["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The sum of a query's samples.
async fn value(http: &reqwest::Client, base: &str, q: &str) -> f64 {
    query(http, base, &format!("sum({q})"))
        .await
        .first()
        .and_then(|s| s["value"][1].as_str()?.parse().ok())
        .unwrap_or(-1.0)
}

/// Orders, a replay, a key reused with another body, a payment the consumer applies.
async fn traffic(http: &reqwest::Client, api: &str) {
    let post = |path: &str, key: &str, body: serde_json::Value| {
        http.post(format!("http://{api}{path}"))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let key = idemguard::contracts::RequestId::generate("APP", "ORDER").to_string();
    let order = serde_json::json!({"userId": 42, "skuId": 11, "quantity": 1, "amount": 1999});
    let first = post("/orders", &key, order.clone()).await.unwrap();
    assert_eq!(first.status(), 201, "the order is created");
    let created: serde_json::Value = first.json().await.unwrap();
    let replay = post("/orders", &key, order).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let other = serde_json::json!({"userId": 42, "skuId": 11, "quantity": 2, "amount": 1999});
    assert_eq!(post("/orders", &key, other).await.unwrap().status(), 422);
    let pay_key = idemguard::contracts::RequestId::generate("APP", "PAY").to_string();
    let callback = serde_json::json!({
        "payNo": format!("PAY{}", common::unique_suffix()),
        "orderNo": created["orderNo"],
        "amount": 1999,
    });
    let paid = post("/payments/callback", &pay_key, callback)
        .await
        .unwrap();
    assert!(
        paid.status().is_success(),
        "the payment is booked: {}",
        paid.status()
    );
}

async fn real_prometheus_scrapes_a_real_serve_and_consume(dialect: Dialect) {
    let setup = consumer_setup(dialect).await;
    Orders::new(
        setup.db.clone(),
        Tracer::log_only(&idemguard::contracts::Instance::current()),
    )
    .set_stock(11, 100)
    .await
    .unwrap();
    let mut config: Config = setup.config.clone();
    config.metrics.listen = "127.0.0.1:0".into();
    config.metrics.refresh_interval = Duration::from_secs(1);
    config.metrics.leak_check_interval = Duration::from_secs(1);
    config.api.listen = "127.0.0.1:0".into();
    config.kafka.consumer_group = setup.group.clone();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idemguard.toml");
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();

    let (_serve, at) = spawn_and_read(
        idemguard(&file, &["serve"]),
        &["listening on http://", "metrics on http://"],
    )
    .await;
    let (api, serve_metrics) = (at[0].clone(), at[1].clone());
    let (_consume, at) =
        spawn_and_read(idemguard(&file, &["consume"]), &["metrics on http://"]).await;
    let consume_metrics = at[0].clone();

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    traffic(&http, &api).await;

    // promtool lints both expositions as a scraper without OpenMetrics reads them.
    for target in [&serve_metrics, &consume_metrics] {
        let text = http
            .get(format!("http://{target}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains("idemguard_decisions_total"), "{text}");
        promtool(&["check", "metrics"], Some(&text));
    }

    let (_prometheus, base) = prometheus(dir.path(), &[&serve_metrics, &consume_metrics]).await;
    let mut expressions: Vec<String> = rules().iter().flat_map(|(_, e)| signals(e)).collect();
    expressions.extend(dashboard_expressions());
    let deadline = Instant::now() + SCRAPE_DEADLINE;
    // The consumer's applied payment is part of what must be seen.
    let applied = "sum(idemguard_decisions_total{outcome=\"sink_applied\"}) >= 1";
    let mut missing = expressions.clone();
    missing.push(applied.into());
    while !missing.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for e in &missing {
            if query(&http, &base, e).await.is_empty() {
                still.push(e.clone());
            }
        }
        missing = still;
        if !missing.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    assert!(
        missing.is_empty(),
        "{dialect}: expressions without data after {SCRAPE_DEADLINE:?}: {missing:#?}"
    );

    // What the query-backed gauges cost here (printed with --nocapture; docs/alerting.md).
    let cost = "sum by (gauges) (idemguard_metrics_refresh_duration_seconds_sum) \
                / sum by (gauges) (idemguard_metrics_refresh_duration_seconds_count)";
    for s in query(&http, &base, cost).await {
        println!(
            "{dialect}: mean refresh of {}: {} s",
            s["metric"]["gauges"], s["value"][1]
        );
    }

    // The counters say what was sent: one replay, one key reused, two creations.
    let requests = |outcome: &str, route: &str| {
        format!("idemguard_api_requests_total{{route=\"{route}\",outcome=\"{outcome}\"}}")
    };
    assert_eq!(
        value(&http, &base, &requests("replayed", "create_order")).await,
        1.0
    );
    assert_eq!(
        value(&http, &base, &requests("key_reused", "create_order")).await,
        1.0
    );
    assert_eq!(
        value(&http, &base, &requests("created", "create_order")).await,
        1.0
    );
    assert_eq!(
        value(&http, &base, &requests("created", "payment_callback")).await,
        1.0
    );
    assert_eq!(
        value(&http, &base, "idemguard_leaks").await,
        0.0,
        "{dialect}: no leak"
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread")] real_prometheus_scrapes_a_real_serve_and_consume => real_prometheus_scrapes_a_real_serve_and_consume_postgres, real_prometheus_scrapes_a_real_serve_and_consume_mysql);

#[test]
fn a_comparison_is_split_into_the_signals_that_must_return_data() {
    assert_eq!(
        signals("sum(rate(a[5m])) > 3 * sum(rate(a[1h])) + 1"),
        vec!["sum(rate(a[5m]))", "3 * sum(rate(a[1h])) + 1"]
    );
    assert_eq!(signals("max(b) > 300"), vec!["max(b)"]);
}

/// Idle and half-sent connections to the metrics port never starve the order API: `serve` with
/// 256 file descriptors, and 300 connections to its metrics port each holding half a request
/// head. The metrics listener serves at most its own few at once (the rest wait in the listen
/// backlog, holding none of the process's descriptors) and closes a head not finished within
/// the API's header-read timeout; `/healthz` on the API still answers meanwhile. Without the
/// cap, the scrape port took every descriptor and the API's accepts failed.
#[tokio::test]
async fn half_sent_connections_to_the_metrics_port_never_starve_the_api() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let setup = consumer_setup(Dialect::Postgres).await;
    let mut config: Config = setup.config.clone();
    config.metrics.listen = "127.0.0.1:0".into();
    config.api.listen = "127.0.0.1:0".into();
    config.api.header_read_timeout = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idemguard.toml");
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
    let mut serve = idemguard(&file, &["serve"]);
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        serve.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let (_serve, at) = spawn_and_read(serve, &["listening on http://", "metrics on http://"]).await;
    let (api, metrics) = (at[0].clone(), at[1].clone());

    let mut held = Vec::new();
    for _ in 0..300 {
        let mut tcp = tokio::net::TcpStream::connect(&metrics).await.unwrap();
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHo").await.unwrap();
        held.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let health = http.get(format!("http://{api}/healthz")).send().await;
    assert!(
        health.as_ref().is_ok_and(|r| r.status().is_success()),
        "the API answers while the metrics port holds 300 half-sent heads: {health:?}"
    );
    // The first connections, served, are closed once their head is late.
    let mut first = held.swap_remove(0);
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), first.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "a half-sent head to the metrics port is closed within the header-read timeout"
    );
    drop(held);
}

/// What the Overview says of `lag`: its `consumer lag` lines.
fn overview_lag_lines(
    lag: &Result<Vec<idemguard::stream::lag::PartitionLag>, String>,
) -> Vec<String> {
    let rates = idemguard::console::read::store::RateTable::default();
    idemguard::console::read::overview::findings(
        &idemguard::console::read::overview::OverviewInput {
            leaks: None,
            stuck: None,
            locks: None,
            lag: Some(lag),
            rates: &rates,
            rates_reading: None,
            lock_patterns: &[],
            now_ms: 0,
        },
    )
    .into_iter()
    .map(|f| f.text)
    .filter(|t| t.starts_with("consumer lag"))
    .collect()
}

/// (partition, produced, deleted before, committed, lag).
type LagCase = (i32, i64, Option<i64>, Option<i64>, i64);

/// What the test did to its topic's three partitions, and the lag each must show: p0 has 7
/// messages and the group committed 2 (lag 5); p1 has 4 and nothing committed — the consumer
/// starts at the beginning, so all 4 are lag; p2 has 6 of which retention dropped the first 3,
/// and the group committed 1, below what is kept — the consumer resumes at 3, so the lag is 3,
/// not 5.
const LAG_FIXTURE: [LagCase; 3] = [
    // (partition, produced, deleted before, committed, lag)
    (0, 7, None, Some(2), 5),
    (1, 4, None, None, 4),
    (2, 6, Some(3), Some(1), 3),
];

/// Produces, deletes and commits as [`LAG_FIXTURE`] says, on `topic` for `group`.
async fn lay_out_lag(config: &Config, topic: &str, group: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::{Offset, TopicPartitionList};

    let producer: FutureProducer = idemguard::kafka_client::client_config(&config.kafka)
        .set("acks", "all")
        .create()
        .unwrap();
    for (partition, produced, ..) in LAG_FIXTURE {
        for n in 0..produced {
            let payload = format!("lag fixture {partition}/{n}");
            producer
                .send(
                    FutureRecord::<(), _>::to(topic)
                        .partition(partition)
                        .payload(&payload),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
        }
    }
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .unwrap();
    let mut deleted = TopicPartitionList::new();
    let mut committed = TopicPartitionList::new();
    for (partition, _, before, commit, _) in LAG_FIXTURE {
        if let Some(before) = before {
            deleted
                .add_partition_offset(topic, partition, Offset::Offset(before))
                .unwrap();
        }
        if let Some(commit) = commit {
            committed
                .add_partition_offset(topic, partition, Offset::Offset(commit))
                .unwrap();
        }
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let answer = admin.delete_records(&deleted, &opts).await.unwrap();
    for e in answer.elements() {
        e.error()
            .unwrap_or_else(|err| panic!("delete records of {topic}/{}: {err}", e.partition()));
    }
    let member: BaseConsumer = idemguard::kafka_client::client_config(&config.kafka)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    member
        .commit(&committed, CommitMode::Sync)
        .expect("the group's offsets are committed");
}

/// `partition → lag` of `topic` in an exposition's text.
fn exposed_lag(exposition: &str, topic: &str) -> Vec<(i32, i64)> {
    let mut out: Vec<(i32, i64)> = exposition
        .lines()
        .filter(|l| l.starts_with("idemguard_consumer_lag_messages{"))
        .filter(|l| l.contains(&format!("topic=\"{topic}\"")))
        .map(|l| {
            let partition = l
                .split("partition=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("a partition label: {l}"));
            let value = l.rsplit(' ').next().and_then(|v| v.parse().ok());
            (partition, value.unwrap_or_else(|| panic!("a value: {l}")))
        })
        .collect();
    out.sort();
    out
}

/// The lag the alert fires on is the lag the console shows: for a group with known committed
/// offsets ([`LAG_FIXTURE`]), `consume`'s exposition (`idemguard_consumer_lag_messages`) and
/// `idemguard rates --json` give the same figures, each the one computed from what the test
/// produced, deleted and committed; the Overview says those figures, not "unknown".
#[tokio::test(flavor = "multi_thread")]
async fn the_lag_gauge_and_the_console_agree_on_known_offsets() {
    let mut config = common::local_config();
    let topic = common::fresh_topics(&config, &["payment.succeeded"])
        .await
        .remove(0);
    let group = format!("igt-group-{}", common::unique_suffix());
    config.kafka.payment_topic = topic.clone();
    config.kafka.consumer_group = group.clone();
    config.metrics.listen = "127.0.0.1:0".into();
    config.metrics.refresh_interval = Duration::from_millis(200);
    lay_out_lag(&config, &topic, &group).await;
    let expected: Vec<(i32, i64)> = LAG_FIXTURE.iter().map(|f| (f.0, f.4)).collect();

    // The metrics: `consume`'s exposition with its lag gauge, scraped over HTTP.
    let stop = tokio_util::sync::CancellationToken::new();
    let exposition = idemguard::metrics::exposition::start_consume(&config, &group, &stop)
        .await
        .unwrap()
        .expect("metrics.listen is set");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let exposed = loop {
        let text = http
            .get(format!("http://{}/metrics", exposition.addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let lag = exposed_lag(&text, &topic);
        if lag.len() == LAG_FIXTURE.len() || Instant::now() > deadline {
            break lag;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stop.cancel();
    exposition.stop().await;
    assert_eq!(
        exposed, expected,
        "the exposition's consumer lag of {topic}"
    );

    // The console: `idemguard rates --json`, as an operator runs it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idemguard.toml");
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
    let out = idemguard(&file, &["rates", "--json"])
        .output()
        .await
        .unwrap();
    let rates: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rates --json answers JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut read: Vec<(i32, i64)> = rates["data"]["lag"]
        .as_array()
        .unwrap_or_else(|| panic!("a lag per partition: {rates:#}"))
        .iter()
        .map(|p| {
            assert_eq!(p["topic"], topic.as_str());
            (
                p["partition"].as_i64().unwrap() as i32,
                p["lag"].as_i64().unwrap(),
            )
        })
        .collect();
    read.sort();
    assert_eq!(read, exposed, "idemguard rates --json and the exposition");

    // The Overview's lines, from the reader the console's collector calls.
    let (kafka, g, t) = (config.kafka.clone(), group.clone(), topic.clone());
    let lag = tokio::task::spawn_blocking(move || {
        idemguard::stream::lag::consumer_lag(&kafka, &g, &t, Duration::from_secs(10))
    })
    .await
    .unwrap()
    .map_err(|e| e.to_string());
    let lines = overview_lag_lines(&lag);
    assert_eq!(
        lines,
        [
            format!("consumer lag 5 on p0 of {topic}"),
            format!("consumer lag 4 on p1 of {topic} (nothing committed yet: counted from the partition's start)"),
            format!("consumer lag 3 on p2 of {topic}"),
        ]
    );
}

/// A lag the broker did not give is never a figure: a broker that does not answer ends the read
/// within its bound, and a topic the broker does not have is said; each error names the broker,
/// the thing asked for and what to do, and the Overview says "unknown" with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_lag_the_broker_did_not_give_is_said_with_the_broker() {
    use idemguard::stream::lag::{consumer_lag, LagFailure};
    let config = common::local_config();
    let group = format!("igt-group-{}", common::unique_suffix());
    let missing = format!("payment.succeeded.missing{}", common::unique_suffix());
    let (kafka, g, t) = (config.kafka.clone(), group.clone(), missing.clone());
    let read =
        tokio::task::spawn_blocking(move || consumer_lag(&kafka, &g, &t, Duration::from_secs(5)))
            .await
            .unwrap();
    let e = read.expect_err("no lag of a topic the broker does not have");
    assert!(matches!(e.failure(), LagFailure::NoTopic { .. }), "{e:?}");
    let servers = &config.kafka.bootstrap_servers;
    assert_eq!(
        e.to_string(),
        format!("kafka {servers} has no topic {missing} (`scripts/stack up` creates the stack's topics; elsewhere check kafka.payment_topic)")
    );

    // A port nothing listens on: a real refusal, not a stand-in broker.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut silent = config.kafka.clone();
    silent.bootstrap_servers = address.clone();
    let started = Instant::now();
    let read = tokio::task::spawn_blocking(move || {
        consumer_lag(&silent, &group, "payment.succeeded", Duration::from_secs(1))
    })
    .await
    .unwrap();
    let took = started.elapsed();
    let e = read.expect_err("no lag from a broker that does not answer");
    assert!(
        took < Duration::from_secs(3),
        "the read ends within its 1 s bound (and the client's close): {took:?}"
    );
    let said = e.to_string();
    assert!(
        said.starts_with(&format!(
            "kafka {address} did not answer with the partitions of topic payment.succeeded within 1s"
        )) && said.ends_with("(is the broker running? `scripts/stack status`)"),
        "{said}"
    );
    let lag = Err(said.clone());
    let lines = overview_lag_lines(&lag);
    assert_eq!(lines, [format!("consumer lag unknown — {said}")]);
}
