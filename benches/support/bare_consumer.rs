//! The consumer's yardstick: a bare rdkafka consumer doing the durable work the
//! deduplicating consumer must do, with none of its logic — per batch, in ONE transaction, the
//! order update (CREATED → PAID), one multi-row insert into each sink table that skips conflicts
//! (`ON CONFLICT DO NOTHING` / `INSERT IGNORE`), then the offset commit once the database commit
//! is known (asynchronous, the cheapest). No dedup query, no state machine, no per-event
//! decisions, no trace events, no DLQ. Written here, not under queries/: no part of idemguard
//! runs it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect};
use idemguard::contracts::{now_ms, PaymentSucceeded};
use idemguard::db::Database;

use super::proc_cpu::{self, Usage, Watch};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// One event of a batch with its source position.
struct Row {
    e: PaymentSucceeded,
    topic: String,
    partition: i32,
    offset: i64,
}

fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn order_update(dialect: Dialect, rows: &[Row], now: i64) -> String {
    match dialect {
        Dialect::Postgres => {
            let v: Vec<String> = rows
                .iter()
                .map(|r| format!("({}, {})", q(&r.e.order_no), q(&r.e.event_id)))
                .collect();
            format!(
                "UPDATE order_record AS o SET status = 'PAID', version = o.version + 1, \
                 payment_event_id = v.e, updated_at = {now} FROM (VALUES {}) AS v(o, e) \
                 WHERE o.order_no = v.o AND o.status = 'CREATED'",
                v.join(",")
            )
        }
        Dialect::Mysql => {
            let v: Vec<String> = rows
                .iter()
                .map(|r| {
                    format!(
                        "SELECT {} AS o, {} AS e",
                        q(&r.e.order_no),
                        q(&r.e.event_id)
                    )
                })
                .collect();
            format!(
                "UPDATE order_record AS o JOIN ({}) AS v ON o.order_no = v.o \
                 SET o.status = 'PAID', o.version = o.version + 1, o.payment_event_id = v.e, \
                 o.updated_at = {now} WHERE o.status = 'CREATED'",
                v.join(" UNION ALL ")
            )
        }
    }
}

fn insert_skip(dialect: Dialect, table: &str, cols: &str, values: Vec<String>) -> String {
    match dialect {
        Dialect::Postgres => format!(
            "INSERT INTO {table} ({cols}) VALUES {} ON CONFLICT DO NOTHING",
            values.join(",")
        ),
        Dialect::Mysql => format!(
            "INSERT IGNORE INTO {table} ({cols}) VALUES {}",
            values.join(",")
        ),
    }
}

/// The four statements of one batch.
fn statements(dialect: Dialect, group: &str, rows: &[Row]) -> Vec<String> {
    let now = now_ms();
    let points = rows
        .iter()
        .map(|r| {
            let e = &r.e;
            format!(
                "({}, {}, {}, {}, {now})",
                q(&e.event_id),
                q(&e.order_no),
                e.user_id,
                e.amount / 100
            )
        })
        .collect();
    let notes = rows
        .iter()
        .map(|r| {
            let e = &r.e;
            let body = format!(
                "Payment of {}.{:02} received for order {}",
                e.amount / 100,
                e.amount % 100,
                e.order_no
            );
            format!(
                "({}, {}, {}, 'app', {}, {now})",
                q(&e.event_id),
                q(&e.order_no),
                e.user_id,
                q(&body)
            )
        })
        .collect();
    let processed = rows
        .iter()
        .map(|r| {
            format!(
                "({}, {}, {}, {}, {}, {}, 'applied', {now}, {})",
                q(group),
                q(&r.e.event_id),
                q(&r.e.order_no),
                q(&r.topic),
                r.partition,
                r.offset,
                now + 7 * 86_400_000
            )
        })
        .collect();
    vec![
        order_update(dialect, rows, now),
        insert_skip(
            dialect,
            "points_ledger",
            "source_event_no, order_no, user_id, points, created_at",
            points,
        ),
        insert_skip(
            dialect,
            "notification",
            "event_id, order_no, user_id, channel, body, created_at",
            notes,
        ),
        insert_skip(
            dialect,
            "processed_event",
            "consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at",
            processed,
        ),
    ]
}

/// Events per second of the bare consumer until `n` messages are written, at `batch` messages
/// per batch (filled as the deduplicating consumer fills its own: the first, then what arrives
/// within 20 ms), and the CPU each process group used meanwhile. The clock starts at the first
/// message.
pub async fn bare_consume(
    config: &Config,
    db: &Database,
    topic: &str,
    n: usize,
    batch: usize,
    watch: &Watch,
) -> (f64, Usage) {
    let group = format!("bare-{}", uuid::Uuid::now_v7().simple());
    let c: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("bare consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let first = tokio::time::timeout(Duration::from_secs(60), c.recv())
        .await
        .expect("first message")
        .expect("receive")
        .detach();
    let cpu_from = proc_cpu::sample(watch);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut pending = vec![first];
    let mut done = 0;
    while done < n {
        assert!(
            Instant::now() < deadline,
            "the bare consumer did not finish"
        );
        let fill = tokio::time::Instant::now() + Duration::from_millis(20);
        while pending.len() < batch {
            match tokio::time::timeout_at(fill, c.recv()).await {
                Ok(Ok(m)) => pending.push(m.detach()),
                _ => break,
            }
        }
        if pending.is_empty() {
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(10), c.recv()).await {
                pending.push(m.detach());
            }
            continue;
        }
        let rows: Vec<Row> = pending
            .iter()
            .map(|m| Row {
                e: serde_json::from_slice(m.payload().expect("payload")).expect("event"),
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
            })
            .collect();
        let mut tx = db.pool.begin().await.expect("begin");
        for sql in statements(db.dialect(), &group, &rows) {
            sqlx::Executor::execute(&mut *tx, sql.as_str())
                .await
                .expect("bare batch statement");
        }
        tx.commit().await.expect("commit");
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for r in &rows {
            let e = next.entry((r.topic.clone(), r.partition)).or_insert(0);
            *e = (*e).max(r.offset + 1);
        }
        let mut tpl = TopicPartitionList::new();
        for ((t, p), o) in next {
            tpl.add_partition_offset(&t, p, Offset::Offset(o)).unwrap();
        }
        c.commit(&tpl, CommitMode::Async).expect("offset commit");
        done += rows.len();
        pending.clear();
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    (
        rate,
        proc_cpu::usage_counting_new(&cpu_from, &proc_cpu::sample(watch)),
    )
}
