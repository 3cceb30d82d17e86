//! A trace's log lines are the same in every face. An order paid by three payment events — the
//! provider's callback came three times, each callback a new eventId — has a log line per
//! event that names only its eventId; the console's Trace view (the real binary in tmux) and
//! `idemguard trace --json` must show the same lines: both search the IDs the timeline shows
//! in the trace's windows.

use crate::common;
use crate::support::tmux;

use std::time::Duration;

use idemguard::config::{Config, Dialect};
use idemguard::contracts::{headers, new_event_id, now_ms, OrderNo, PaymentSucceeded, RequestId};
use idemguard::db::Database;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::Value as Json;

/// An order paid by three payment events: the first paid it, the other two found it paid.
struct PaidOrder {
    order_no: String,
    request_id: String,
    /// The payment events, in the order the callbacks came.
    event_ids: [String; 3],
    /// When the order was created (epoch ms, ten minutes ago).
    t0: i64,
}

impl PaidOrder {
    /// The order's rows, the three payment messages (keyed by the order, in the partition the
    /// configured partitioner gives it) and the consumer's decision on each.
    async fn write(config: &Config, db: &Database) -> PaidOrder {
        let o = PaidOrder {
            order_no: OrderNo::generate().to_string(),
            request_id: RequestId::generate("APP", "ORDER").to_string(),
            event_ids: [new_event_id(), new_event_id(), new_event_id()],
            t0: now_ms() - 10 * 60_000,
        };
        let (order, request, first, t0) = (&o.order_no, &o.request_id, &o.event_ids[0], o.t0);
        common::exec(
            db,
            &format!(
                "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, \
                 status, version, fence, payment_event_id, created_at, updated_at) VALUES \
                 ('{request}', '{order}', 42, 7, 1, 1999, 'PAID', 1, 1, '{first}', {t0}, {})",
                t0 + 1_000
            ),
        )
        .await;
        common::exec(
            db,
            &format!(
                "INSERT INTO payment_flow (pay_no, order_no, amount, status, event_id, \
                 created_at) VALUES ('PAY-{order}', '{order}', 1999, 'SUCCEEDED', '{first}', {})",
                t0 + 1_000
            ),
        )
        .await;
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &config.kafka.bootstrap_servers)
            .create()
            .unwrap();
        let partition = config
            .kafka
            .partitioner
            .partition_of(order.as_bytes(), 3)
            .unwrap_or(0);
        for (n, event_id) in o.event_ids.iter().enumerate() {
            let at = t0 + 1_000 + n as i64 * 100;
            let body = serde_json::to_string(&PaymentSucceeded {
                event_id: event_id.clone(),
                order_no: order.clone(),
                request_id: request.clone(),
                pay_no: format!("PAY-{order}"),
                user_id: 42,
                amount: 1999,
                paid_at: at,
            })
            .unwrap();
            let h = OwnedHeaders::new()
                .insert(Header {
                    key: headers::EVENT_ID,
                    value: Some(event_id),
                })
                .insert(Header {
                    key: headers::REQUEST_ID,
                    value: Some(request),
                })
                .insert(Header {
                    key: headers::ORDER_NO,
                    value: Some(order),
                });
            let record = FutureRecord::to(&config.kafka.payment_topic)
                .key(order)
                .payload(&body)
                .headers(h)
                .partition(partition)
                .timestamp(at);
            let delivered = producer
                .send(record, Duration::from_secs(10))
                .await
                .unwrap_or_else(|(e, _)| panic!("produce payment: {e}"));
            let (p, offset) = (delivered.partition, delivered.offset);
            let outcome = if n == 0 { "applied" } else { "paid_by_other" };
            common::exec(
                db,
                &format!(
                    "INSERT INTO processed_event (consumer_group, event_id, order_no, topic, \
                     kafka_partition, kafka_offset, outcome, processed_at, expire_at) VALUES \
                     ('{}', '{event_id}', '{order}', '{}', {p}, {offset}, '{outcome}', {}, {})",
                    config.kafka.consumer_group,
                    config.kafka.payment_topic,
                    at + 50,
                    at + 7 * 86_400_000,
                ),
            )
            .await;
        }
        o
    }
}

fn log_line(ms: i64, service: &str, ids: (&str, &str), message: &str) -> String {
    let mut line = serde_json::json!({
        "timestamp": ms, "service": service, "level": "INFO", "message": message,
    });
    line[ids.0] = ids.1.into();
    line.to_string()
}

/// The log file of the order's services: the order's own line, a line per payment callback
/// naming only its eventId, and a callback of another order. The messages, and whether a trace
/// of the order shows each.
fn write_logs(dir: &std::path::Path, o: &PaidOrder) -> Vec<(String, bool)> {
    let mut lines = vec![(
        log_line(
            o.t0,
            "order-api",
            ("orderNo", &o.order_no),
            "cart checked out",
        ),
        "cart checked out".to_string(),
        true,
    )];
    for (n, event_id) in o.event_ids.iter().enumerate() {
        let message = format!("provider callback #{}", n + 1);
        let at = o.t0 + 1_000 + n as i64 * 100;
        let line = log_line(at, "pay-gw", ("eventId", event_id), &message);
        lines.push((line, message, true));
    }
    let other = log_line(
        o.t0 + 1_500,
        "pay-gw",
        ("eventId", &new_event_id()),
        "provider callback of another order",
    );
    lines.push((other, "provider callback of another order".into(), false));
    let text: Vec<&str> = lines.iter().map(|(l, _, _)| l.as_str()).collect();
    std::fs::write(dir.join("app.log"), text.join("\n") + "\n").unwrap();
    lines.into_iter().map(|(_, m, shown)| (m, shown)).collect()
}

/// The messages of the log lines `idemguard trace ORDER --json` shows.
fn cli_log_messages(env: &[(&str, String)], order_no: &str) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["trace", order_no, "--json"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let j: Json = serde_json::from_str(&text).unwrap_or_else(|e| {
        let err = String::from_utf8_lossy(&out.stderr);
        panic!("trace --json: {e}: {text}\n{err}")
    });
    let entries = j["data"]["entries"].as_array().expect("entries");
    let mut messages: Vec<String> = entries
        .iter()
        .filter(|e| e["layer"] == "log")
        .map(|e| e["fields"]["message"].as_str().unwrap_or("").to_string())
        .collect();
    messages.sort();
    messages
}

async fn console_and_cli_show_the_same_log_lines(dialect: Dialect) {
    let (mut config, db) = common::migrated_database(dialect).await;
    let topics = common::fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    config.kafka.consumer_group = format!("igt-group-{}", common::unique_suffix());
    let order = PaidOrder::write(&config, &db).await;
    let dir = tempfile::tempdir().unwrap();
    let messages = write_logs(dir.path(), &order);
    let mut env = tmux::local_env(&config);
    let glob = format!("{}/*.log", dir.path().display());
    env.push(("IDEMGUARD_LOGS__FILES", glob));

    let cli = cli_log_messages(&env, &order.order_no);
    let mut want: Vec<String> = messages
        .iter()
        .filter(|(_, shown)| *shown)
        .map(|(m, _)| m.clone())
        .collect();
    want.sort();
    assert_eq!(
        cli, want,
        "idemguard trace shows the lines of every eventId"
    );

    let t = tmux::Terminal::console("igt", (200, 60), &env, "");
    let within = Duration::from_secs(30);
    t.wait_for("the console", within, |s| s.contains("database ok"));
    t.keys(&[&format!(":trace {}", order.order_no), "Enter"]);
    let screen = t.wait_for("the trace's log lines as the CLI shows them", within, |s| {
        s.contains("Timeline, oldest first") && cli.iter().all(|m| s.contains(m.as_str()))
    });
    for (message, _) in &messages {
        assert_eq!(
            screen.contains(message.as_str()),
            cli.contains(message),
            "{message:?}: the console shows it iff idemguard trace does:\n{screen}"
        );
    }
    let after = t.quit_console(within);
    tmux::assert_console_gone(&after);
}

per_dialect!(console_and_cli_show_the_same_log_lines => console_and_cli_show_the_same_log_lines_postgres, console_and_cli_show_the_same_log_lines_mysql);
