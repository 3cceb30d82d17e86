//! The headless twins of the views: `idemguard trace ID`, `locks`, `rates`, `stuck` — the same
//! readers and the same timeline as the TUI, run once, printed as a table (default) or as JSON
//! (`--json`, the schema is in the [module docs](super)).
//!
//! Exit status: 0 when every backend answered (and, for `trace`, the ID is known); 1 when a
//! backend failed (what could be read is still printed); 3 when `trace` finds no trace of the ID
//! anywhere while every backend answered.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::contracts::{format_ms, now_ms, TraceTarget};
use crate::db::Database;

use crate::console::columns;
use crate::console::read::locks;
use crate::console::read::records::{self, StuckRecord, TraceIds, TraceRows};
use crate::console::read::store::{PaymentIndex, RateTable, TraceLog};
use crate::console::read::timeline::{self, Timeline, TimelineInputs};
use crate::console::read::topics::{self, PartitionLag, PaymentMessage, StartAt};
use crate::console::tui::backend::{BackendId, DB_CONNECTIONS, POLL_TIMEOUT};
use crate::lock::{Liveness, LockInspector, LockScan};

/// The `schema` field of every headless document.
pub const SCHEMA: &str = "idemguard.console/v1";
/// How long reading a topic to its end may take.
pub const TOPIC_READ_DEADLINE: Duration = Duration::from_secs(30);

pub const EXIT_OK: u8 = 0;
pub const EXIT_BACKEND_FAILED: u8 = 1;
pub const EXIT_UNKNOWN_ID: u8 = 3;

#[derive(Debug, Clone, Serialize)]
pub struct EnvironmentInfo {
    pub name: String,
    pub color: String,
    pub production: bool,
}

/// How one backend answered.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    pub name: &'static str,
    pub target: String,
    pub ok: bool,
    pub error: Option<String>,
    pub latency_ms: f64,
}

/// The one document every headless command prints with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report<T: Serialize> {
    pub schema: &'static str,
    /// `trace`, `locks`, `rates` or `stuck`.
    pub command: &'static str,
    pub environment: EnvironmentInfo,
    pub generated_at: String,
    pub generated_at_ms: i64,
    /// True when every backend answered (and, for `trace`, the ID was found).
    pub ok: bool,
    pub backends: Vec<BackendReport>,
    pub data: T,
}

impl<T: Serialize> Report<T> {
    fn new(
        config: &Config,
        command: &'static str,
        backends: Vec<BackendReport>,
        data: T,
    ) -> Report<T> {
        let now = now_ms();
        Report {
            schema: SCHEMA,
            command,
            environment: EnvironmentInfo {
                name: config.environment.name.clone(),
                color: config.environment.color.clone(),
                production: config.environment.production,
            },
            generated_at: format_ms(now),
            generated_at_ms: now,
            ok: backends.iter().all(|b| b.ok),
            backends,
            data,
        }
    }

    pub fn exit_code(&self) -> u8 {
        if self.backends.iter().any(|b| !b.ok) {
            EXIT_BACKEND_FAILED
        } else if !self.ok {
            EXIT_UNKNOWN_ID
        } else {
            EXIT_OK
        }
    }

    /// Backend failures, for stderr.
    pub fn failures(&self) -> String {
        self.backends
            .iter()
            .filter(|b| !b.ok)
            .map(|b| {
                format!(
                    "idemguard {}: {} ({}) failed: {}\n",
                    self.command,
                    b.name,
                    b.target,
                    b.error.as_deref().unwrap_or("?")
                )
            })
            .collect()
    }
}

fn report(config: &Config, b: BackendId, started: Instant, error: Option<String>) -> BackendReport {
    BackendReport {
        name: b.name(),
        target: b.target(config),
        ok: error.is_none(),
        error,
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
    }
}

async fn connect_db(config: &Config) -> anyhow::Result<Database> {
    let mut c = config.clone();
    c.database.max_connections = c.database.max_connections.min(DB_CONNECTIONS);
    match tokio::time::timeout(POLL_TIMEOUT, Database::connect_for_reads(&c)).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "database {} did not answer within {POLL_TIMEOUT:?}",
            BackendId::Database.target(config)
        ),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow::anyhow!("reader thread failed: {e}"))?
}

/// Every payment message of the payment topic, indexed (bounded read to the current end).
pub async fn read_payments(config: &Config) -> anyhow::Result<PaymentIndex> {
    let c = config.clone();
    blocking(move || {
        let mut index = PaymentIndex::default();
        topics::read_to_end(
            &c,
            &c.kafka.payment_topic,
            StartAt::Beginning,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| index.ingest(PaymentMessage::from_kafka(m)),
        )?;
        Ok(index)
    })
    .await
}

/// The IDs a read of the topics for one trace keeps: a payment message or trace event is kept
/// when it names one of them, however many other messages the topic holds. Without it a read
/// keeps the newest [`PAYMENT_MESSAGES_KEPT`](crate::console::read::store::PAYMENT_MESSAGES_KEPT) /
/// [`TRACE_EVENTS_KEPT`](crate::console::read::store::TRACE_EVENTS_KEPT), and on a busy system the trace of an
/// order from an hour ago would have lost its Kafka side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Keep {
    ids: BTreeSet<String>,
}

impl Keep {
    /// The query itself and every ID the database rows link it to.
    pub fn of(query: &str, rows: Option<&TraceRows>) -> Keep {
        let mut ids = BTreeSet::from([query.to_string()]);
        if let Some(r) = rows {
            ids.extend(
                [
                    r.ids.order_no.clone(),
                    r.ids.request_id.clone(),
                    r.ids.event_id.clone(),
                ]
                .into_iter()
                .flatten(),
            );
            ids.extend(timeline::event_ids_of(
                &TraceTarget::classify(query),
                Some(r),
                &[],
            ));
        }
        Keep { ids }
    }

    /// The query and the IDs it resolved to (the live console's trace target).
    pub fn of_ids(query: &str, ids: &TraceIds) -> Keep {
        let mut keep = BTreeSet::from([query.to_string()]);
        keep.extend(
            [
                ids.order_no.clone(),
                ids.request_id.clone(),
                ids.event_id.clone(),
            ]
            .into_iter()
            .flatten(),
        );
        Keep { ids: keep }
    }

    fn names(&self, id: Option<&str>) -> bool {
        id.is_some_and(|i| self.ids.contains(i))
    }

    /// Keeps a message that names a kept ID, and from then on every ID it names (an eventId the
    /// database does not know yet leads to its order).
    fn message(&mut self, m: &PaymentMessage) -> bool {
        let hit = self.names(m.order_no.as_deref())
            || self.names(m.request_id.as_deref())
            || self.names(m.event_id.as_deref());
        if hit {
            self.ids.extend(
                [m.order_no.clone(), m.request_id.clone(), m.event_id.clone()]
                    .into_iter()
                    .flatten(),
            );
        }
        hit
    }

    /// True when the event names one of the kept IDs.
    pub fn keeps(&self, e: &crate::contracts::TraceEvent) -> bool {
        self.names(e.order_no.as_deref())
            || self.names(e.request_id.as_deref())
            || self.names(e.event_id.as_deref())
    }
}

/// The payment messages that name what `keep` keeps (growing it), read to the current end.
pub async fn read_payments_keeping(
    config: &Config,
    keep: Keep,
) -> anyhow::Result<(PaymentIndex, Keep)> {
    let c = config.clone();
    blocking(move || {
        let mut keep = keep;
        let mut index = PaymentIndex::default();
        topics::read_to_end(
            &c,
            &c.kafka.payment_topic,
            StartAt::Beginning,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| {
                let m = PaymentMessage::from_kafka(m);
                if keep.message(&m) {
                    index.ingest(m);
                }
            },
        )?;
        Ok((index, keep))
    })
    .await
}

/// The trace events of the trace topic from `start` that name what `keep` keeps; ends early,
/// with an error, when `cancel` is cancelled.
pub async fn read_trace_log_keeping(
    config: &Config,
    start: StartAt,
    keep: &Keep,
    cancel: &CancellationToken,
) -> anyhow::Result<TraceLog> {
    let c = config.clone();
    let keep = keep.clone();
    let cancel = cancel.clone();
    blocking(move || {
        let mut log = TraceLog::default();
        topics::read_to_end(
            &c,
            &c.kafka.trace_topic,
            start,
            TOPIC_READ_DEADLINE,
            &cancel,
            |m| match topics::trace_event_of(m) {
                Some(e) if keep.keeps(&e) => log.ingest(e),
                Some(_) => {}
                None => log.undecodable += 1,
            },
        )?;
        Ok(log)
    })
    .await
}

/// Both topics, read for one trace: the payment messages first (they can lead an eventId to
/// its order), then the trace events that name any ID found so far.
pub async fn read_topics_for(
    config: &Config,
    query: &str,
    rows: Option<&TraceRows>,
) -> (anyhow::Result<PaymentIndex>, anyhow::Result<TraceLog>) {
    let keep = Keep::of(query, rows);
    let (payments, keep) = match read_payments_keeping(config, keep.clone()).await {
        Ok((p, k)) => (Ok(p), k),
        Err(e) => (Err(e), keep),
    };
    (
        payments,
        read_trace_log_keeping(config, StartAt::Beginning, &keep, &CancellationToken::new()).await,
    )
}

/// The trace events of the trace topic from `start` (bounded read to the current end).
pub async fn read_trace_log(config: &Config, start: StartAt) -> anyhow::Result<TraceLog> {
    let c = config.clone();
    blocking(move || {
        let mut log = TraceLog::default();
        topics::read_to_end(
            &c,
            &c.kafka.trace_topic,
            start,
            TOPIC_READ_DEADLINE,
            &CancellationToken::new(),
            |m| match topics::trace_event_of(m) {
                Some(e) => log.ingest(e),
                None => log.undecodable += 1,
            },
        )?;
        Ok(log)
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// trace
// ---------------------------------------------------------------------------------------------

/// `idemguard trace ID`.
pub async fn trace(config: &Config, query: &str) -> Report<Timeline> {
    let target = TraceTarget::classify(query);
    let mut backends = Vec::new();

    // The database first: its rows link the IDs, and the topics are read for those IDs only
    // (a topic holds far more than one trace). Redis once the IDs are known.
    let t_db = Instant::now();
    let db_part = async {
        let db = connect_db(config).await?;
        let rows = records::trace_rows(&db, &TraceIds::of_target(&target)).await?;
        anyhow::Ok((db, rows))
    }
    .await;
    let (mut db, mut rows): (Option<Database>, Option<TraceRows>) = (None, None);
    match db_part {
        Ok((d, r)) => {
            db = Some(d);
            rows = Some(r);
        }
        Err(e) => backends.push(report(
            config,
            BackendId::Database,
            t_db,
            Some(format!("{e:#}")),
        )),
    }
    let t_kafka = Instant::now();
    let (payments, log) = read_topics_for(config, query, rows.as_ref()).await;
    let trace_error = log.as_ref().err().map(|e| format!("{e:#}"));
    let payment_error = payments.as_ref().err().map(|e| format!("{e:#}"));
    let payments = payments.unwrap_or_default();
    let log = log.unwrap_or_default();

    // An eventId only Kafka knows yet: ask the database again with the orderNo it names.
    let ids = timeline::resolve_ids(query, rows.as_ref(), &payments, &log);
    if let (Some(d), Some(r)) = (&db, &rows) {
        if ids != r.ids {
            match records::trace_rows(d, &ids).await {
                Ok(more) => rows = Some(more),
                Err(e) => backends.push(report(
                    config,
                    BackendId::Database,
                    t_db,
                    Some(format!("{e:#}")),
                )),
            }
        }
    }
    if db.is_some()
        && !backends
            .iter()
            .any(|b| b.name == BackendId::Database.name())
    {
        backends.push(report(config, BackendId::Database, t_db, None));
    }
    if let Some(d) = db {
        d.pool.close().await;
    }
    let ids = timeline::resolve_ids(query, rows.as_ref(), &payments, &log);

    let t_redis = Instant::now();
    let keys = async {
        let inspector = LockInspector::from_config(config)?;
        locks::trace_keys(
            &inspector,
            ids.order_no.as_deref(),
            ids.request_id.as_deref(),
        )
        .await
    };
    let keys = match tokio::time::timeout(POLL_TIMEOUT, keys).await {
        Ok(Ok(k)) => {
            let err = (!k.node_errors.is_empty()).then(|| k.node_errors.join("; "));
            backends.push(report(config, BackendId::Redis, t_redis, err));
            Some(k)
        }
        Ok(Err(e)) => {
            backends.push(report(
                config,
                BackendId::Redis,
                t_redis,
                Some(format!("{e:#}")),
            ));
            None
        }
        Err(_) => {
            backends.push(report(
                config,
                BackendId::Redis,
                t_redis,
                Some(format!("redis did not answer within {POLL_TIMEOUT:?}")),
            ));
            None
        }
    };
    backends.push(report(config, BackendId::TraceTopic, t_kafka, trace_error));
    backends.push(report(
        config,
        BackendId::PaymentTopic,
        t_kafka,
        payment_error,
    ));

    let messages = payments.messages_for(ids.order_no.as_deref(), ids.event_id.as_deref());
    let event_ids = timeline::event_ids_of(&target, rows.as_ref(), &messages);
    let events = log.matching(
        ids.order_no.as_deref(),
        ids.request_id.as_deref(),
        &event_ids,
    );
    let t = timeline::build(TimelineInputs {
        query,
        rows: rows.as_ref(),
        keys: keys.as_ref(),
        messages: &messages,
        events: &events,
        now_ms: now_ms(),
    });
    let mut r = Report::new(config, "trace", backends, t);
    r.ok = r.ok && r.data.found;
    r
}

pub fn trace_table(r: &Report<Timeline>) -> String {
    let t = &r.data;
    let mut out = format!(
        "{} {}  ({})\n",
        t.kind.replace('_', " "),
        t.query,
        r.environment.name
    );
    out.push_str(&format!(
        "orderNo {} · requestId {}\n",
        t.order_no.as_deref().unwrap_or("?"),
        t.request_id.as_deref().unwrap_or("?")
    ));
    if !t.found {
        out.push_str("no row, key, message or trace event names this ID\n");
        return out;
    }
    out.push_str(&format!("duplicates stopped: {}", t.stopped_count()));
    let mut by: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for i in &t.interceptions {
        *by.entry((i.layer.clone(), i.outcome.clone())).or_default() += 1;
    }
    for ((l, o), n) in by {
        out.push_str(&format!(" · {l} {o} ×{n}"));
    }
    out.push('\n');
    for e in &t.events {
        out.push_str(&format!(
            "payment event {}: {} cop{} in kafka → processed {} · points {} · notifications {}\n",
            e.event_id,
            e.kafka_copies,
            if e.kafka_copies == 1 { "y" } else { "ies" },
            e.processed_rows,
            e.points_rows,
            e.notification_rows
        ));
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = t.entries.iter().map(columns::timeline_cells).collect();
    out.push_str(&columns::text_table(columns::TIMELINE, &rows));
    out
}

// ---------------------------------------------------------------------------------------------
// locks
// ---------------------------------------------------------------------------------------------

/// `idemguard locks`.
pub async fn locks(config: &Config) -> Report<LockScan> {
    let started = Instant::now();
    let scan = match LockInspector::from_config(config) {
        Ok(inspector) => inspector.scan(locks::LOCK_LIST_LIMIT).await,
        Err(e) => LockScan::failed(
            crate::config::host_port(&config.redis.url),
            "main",
            format!("{e:#}"),
        ),
    };
    let err = (!scan.all_nodes_ok()).then(|| {
        scan.nodes
            .iter()
            .filter_map(|n| n.error.clone())
            .collect::<Vec<_>>()
            .join("; ")
    });
    Report::new(
        config,
        "locks",
        vec![report(config, BackendId::Redis, started, err)],
        scan,
    )
}

pub fn locks_table(r: &Report<LockScan>) -> String {
    let now = r.data.read_at_ms;
    let mut out = String::new();
    for n in &r.data.nodes {
        out.push_str(&format!(
            "{} {} {}: {}\n",
            n.role,
            n.node,
            if n.ok { "ok" } else { "DOWN" },
            if n.ok {
                format!("{} lock keys, scanned in {:.1}ms", n.keys, n.scan_ms)
            } else {
                n.error.clone().unwrap_or_default()
            }
        ));
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = r
        .data
        .locks
        .iter()
        .map(|l| columns::lock_cells(l, now))
        .collect();
    out.push_str(&columns::text_table(columns::LOCKS, &rows));
    out
}

// ---------------------------------------------------------------------------------------------
// rates
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct RatesData {
    pub rates: RateTable,
    /// Lag of `kafka.consumer_group` on the payment topic, per partition.
    pub lag: Vec<PartitionLag>,
    pub consumer_group: String,
}

/// `idemguard rates`: the trace topic's last hour, and the consumer group's lag.
pub async fn rates(config: &Config) -> Report<RatesData> {
    let started = Instant::now();
    let now = now_ms();
    let c = config.clone();
    // From the beginning, not from an hour ago by time: brokers differ in how well they look
    // offsets up by time, and the rates only count events whose own `ts` is in the window.
    let (log, lag) = tokio::join!(
        read_trace_log(config, StartAt::Beginning),
        blocking(move || topics::consumer_lag(&c, &c.kafka.payment_topic, &c.kafka.consumer_group))
    );
    let backends = vec![
        report(
            config,
            BackendId::TraceTopic,
            started,
            log.as_ref().err().map(|e| format!("{e:#}")),
        ),
        report(
            config,
            BackendId::PaymentTopic,
            started,
            lag.as_ref().err().map(|e| format!("{e:#}")),
        ),
    ];
    let data = RatesData {
        rates: log.unwrap_or_default().rates(now),
        lag: lag.unwrap_or_default(),
        consumer_group: config.kafka.consumer_group.clone(),
    };
    Report::new(config, "rates", backends, data)
}

pub fn rates_table(r: &Report<RatesData>) -> String {
    let d = &r.data;
    let mut out = format!(
        "interceptions per minute, last {} minutes (from {}), {} trace events read\n\n",
        d.rates.window_minutes,
        format_ms(d.rates.first_minute_ms),
        d.rates.events_seen
    );
    let rows: Vec<Vec<String>> = d.rates.series.iter().map(columns::rate_cells).collect();
    out.push_str(&columns::text_table(columns::RATES, &rows));
    out.push_str(&format!("\nconsumer group {} lag\n", d.consumer_group));
    let rows: Vec<Vec<String>> = d.lag.iter().map(columns::lag_cells).collect();
    out.push_str(&columns::text_table(columns::LAG, &rows));
    out
}

// ---------------------------------------------------------------------------------------------
// stuck
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct StuckData {
    pub threshold_ms: i64,
    pub records: Vec<StuckRecord>,
}

/// `idemguard stuck`.
pub async fn stuck(config: &Config) -> Report<StuckData> {
    let now = now_ms();
    let t_db = Instant::now();
    let db_part = async {
        let db = connect_db(config).await?;
        let r = records::stuck_records(&db, now, config.console.stuck_threshold).await;
        db.pool.close().await;
        r
    };
    let t_redis = Instant::now();
    let redis_part = async { anyhow::Ok(Liveness::from_config(config)?.live_instances().await?) };
    let (records, live) = tokio::join!(
        tokio::time::timeout(POLL_TIMEOUT, db_part),
        tokio::time::timeout(POLL_TIMEOUT, redis_part)
    );
    let records = records.unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "the database did not answer within {POLL_TIMEOUT:?}"
        ))
    });
    let live = live.unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "redis did not answer within {POLL_TIMEOUT:?}"
        ))
    });
    let backends = vec![
        report(
            config,
            BackendId::Database,
            t_db,
            records.as_ref().err().map(|e| format!("{e:#}")),
        ),
        report(
            config,
            BackendId::Redis,
            t_redis,
            live.as_ref().err().map(|e| format!("{e:#}")),
        ),
    ];
    let mut records = records.unwrap_or_default();
    records::annotate_stuck(&mut records, live.as_ref().ok());
    Report::new(
        config,
        "stuck",
        backends,
        StuckData {
            threshold_ms: config.console.stuck_threshold.as_millis() as i64,
            records,
        },
    )
}

pub fn stuck_table(r: &Report<StuckData>) -> String {
    let now = r.generated_at_ms;
    let mut out = format!(
        "{} PROCESSING record(s) older than {}, oldest first\n\n",
        r.data.records.len(),
        humantime::format_duration(Duration::from_millis(r.data.threshold_ms as u64))
    );
    let rows: Vec<Vec<String>> = r
        .data
        .records
        .iter()
        .map(|s| columns::stuck_cells(s, now))
        .collect();
    out.push_str(&columns::text_table(columns::STUCK, &rows));
    out
}
