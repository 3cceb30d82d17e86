//! The headless twins of the views: `idemguard trace ID`, `locks`, `rates`, `stuck`, `dlq` — the same
//! readers and the same timeline as the TUI, run once, printed as a table (default) or as JSON
//! (`--json`, the schema is in the [module docs](super)).
//!
//! Exit status: 0 when every backend answered (and, for `trace`, the ID is known); 1 when a
//! backend failed (what could be read is still printed); 3 when `trace` finds no trace of the ID
//! anywhere while every backend answered.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Config;
use crate::contracts::{format_ms, now_ms, TraceTarget};

use crate::console::columns;
use crate::console::read::bounded::read_trace_log_window;
use crate::console::read::locks;
use crate::console::read::records::{self, StuckRecord};
use crate::console::read::sources::{
    blocking, connect_database, BackendId, BackendStatus, EnvironmentInfo, POLL_TIMEOUT,
};
use crate::console::read::store::{RateTable, RATE_WINDOW_MINUTES};
use crate::console::read::timeline::Timeline;
use crate::console::read::trace::{note_unanswered, read_trace, TopicsFrom, TraceSources};
use crate::console::read::window::{TimeWindow, TopicCost};
use crate::lock::{Liveness, LockInspector, LockScan};
use crate::stream::lag::{self, PartitionLag};
use crate::untrusted::{escape, escape_lines};

/// The `schema` field of every headless document.
pub const SCHEMA: &str = "idemguard.console/v1";

pub const EXIT_OK: u8 = 0;
pub const EXIT_BACKEND_FAILED: u8 = 1;
pub const EXIT_UNKNOWN_ID: u8 = 3;

/// The one document every headless command prints with `--json`: the envelope (schema,
/// environment, when, how each source answered) around one view's `data`.
#[derive(Debug, Clone, Serialize)]
pub struct Document<T: Serialize> {
    pub schema: &'static str,
    /// `trace`, `locks`, `rates`, `stuck` or `dlq`.
    pub command: &'static str,
    pub environment: EnvironmentInfo,
    pub generated_at: String,
    pub generated_at_ms: i64,
    /// True when every backend answered (and, for `trace`, the ID was found).
    pub ok: bool,
    pub backends: Vec<BackendStatus>,
    pub data: T,
}

impl<T: Serialize> Document<T> {
    fn new(
        config: &Config,
        command: &'static str,
        backends: Vec<BackendStatus>,
        data: T,
    ) -> Document<T> {
        let now = now_ms();
        Document {
            schema: SCHEMA,
            command,
            environment: EnvironmentInfo::of(config),
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
                    escape_lines(b.error.as_deref().unwrap_or("?"))
                )
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// trace
// ---------------------------------------------------------------------------------------------

/// `idemguard trace ID`: the database first (its rows link the IDs, and the topics are read for
/// those IDs only, in windows around the rows' times: a topic holds far more than one trace),
/// then the topics, then Redis. An ID the database does not know is searched in the last 24 h.
pub async fn trace(config: &Config, target: &TraceTarget) -> Document<Timeline> {
    trace_in(config, target, None).await
}

/// [`trace`], an ID the database does not know searched in `unknown_id_window`
/// (`--since/--until`) instead of the last 24 h.
pub async fn trace_in(
    config: &Config,
    target: &TraceTarget,
    unknown_id_window: Option<TimeWindow>,
) -> Document<Timeline> {
    let started = Instant::now();
    let (db, mut statuses) = match connect_database(config).await {
        Ok(db) => (Some(db), Vec::new()),
        Err(e) => {
            let failed =
                BackendStatus::of(config, BackendId::Database, started, Some(format!("{e:#}")));
            (None, vec![failed])
        }
    };
    let sources = TraceSources {
        database: db.as_ref(),
        topics: unknown_id_window.map_or(TopicsFrom::ReadForTarget, TopicsFrom::ReadForTargetIn),
        redis: true,
    };
    let read = read_trace(config, target, sources).await;
    if let Some(db) = db {
        db.pool.close().await;
    }
    statuses.extend(read.statuses);
    let mut timeline = read.timeline;
    note_unanswered(&mut timeline, &statuses);
    let mut d = Document::new(config, "trace", statuses, timeline);
    d.ok = d.ok && d.data.found;
    d
}

pub fn trace_table(r: &Document<Timeline>) -> String {
    let t = &r.data;
    // The IDs come from rows, headers and log lines of other systems: escaped like every cell.
    let mut out = format!(
        "{} {}  ({})\n",
        t.kind.replace('_', " "),
        escape(&t.query),
        r.environment.name
    );
    out.push_str(&format!(
        "orderNo {} · requestId {}\n",
        escape(t.order_no.as_deref().unwrap_or("?")),
        escape(t.request_id.as_deref().unwrap_or("?"))
    ));
    if let Some(partial) = t.partial_line() {
        out.push_str(&format!("{partial}\n"));
    }
    for w in &t.warnings {
        out.push_str(&format!("WARNING: {w}\n"));
    }
    if !t.found {
        out.push_str(&format!("{}\n", t.not_found_line()));
        out.push_str(&read_cost_lines(t));
        return out;
    }
    out.push_str(&format!("duplicates stopped: {}", t.stopped_count()));
    for ((l, o), n) in t.stopped_by_layer_and_outcome() {
        out.push_str(&format!(" · {l} {o} ×{n}"));
    }
    out.push('\n');
    for e in &t.events {
        out.push_str(&format!(
            "payment event {}: {} cop{} in kafka → processed {} · points {} · notifications {}\n",
            escape(&e.event_id),
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
    out.push('\n');
    out.push_str(&read_cost_lines(t));
    out
}

/// What reading the topics cost, one line per topic, and the window an unknown ID was searched
/// in: a slow trace says why, a trace that found nothing says where it did not look.
fn read_cost_lines(t: &Timeline) -> String {
    let Some(cost) = t.read_cost.as_ref() else {
        return String::new();
    };
    let mut out = String::new();
    if let Some(w) = cost.unknown_id_window {
        let why = if !t.database_answered() {
            "the database did not answer"
        } else if cost.rows_without_time {
            "no row of this ID carries a time"
        } else {
            "the database has no row of this ID"
        };
        out.push_str(&format!(
            "{why}: the topics were searched from {} to {} only \
             (--since/--until; default the last 24 h)\n",
            format_ms(w.from_ms),
            format_ms(w.to_ms)
        ));
    }
    if let Some(w) = cost.forward_search {
        out.push_str(&format!(
            "no row carries the payment's own time: searched forward from {} to {} \
             (console.forward_search); the topics' windows below include it\n",
            format_ms(w.from_ms),
            format_ms(w.to_ms)
        ));
    }
    if cost.concurrent {
        out.push_str(
            "the topics were read at the same time (the database named the order and the \
             request): their times overlap\n",
        );
    }
    for t in &cost.topics {
        if let Some(why) = &t.partitions_widened {
            out.push_str(&format!("read every partition of {}: {why}\n", t.topic));
        }
        let wait = match t.times.wait_ms {
            0 => String::new(),
            ms => format!(", {ms} ms waiting for the payment topic's IDs"),
        };
        let windows: Vec<String> = t
            .windows
            .iter()
            .map(|w| format!("{}–{}", format_ms(w.from_ms), format_ms(w.to_ms)))
            .collect();
        out.push_str(&format!(
            "read {}: {} message(s) scanned in {} window(s) [{}], partition(s) {:?} of {}; {} ({} probe(s)); {}; {} ms setup, {} ms lookup{wait}, {} ms scan\n",
            t.topic,
            t.messages_scanned,
            t.windows.len(),
            windows.join(", "),
            t.partitions_read,
            t.partitions_total,
            t.offsets_found_by(),
            t.offset_probes,
            t.round_trips,
            t.times.setup_ms,
            t.times.lookup_ms,
            t.times.scan_ms
        ));
    }
    if !cost.topics.is_empty() {
        out.push_str(&format!("kafka, this trace: {}\n", cost.round_trips));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// locks
// ---------------------------------------------------------------------------------------------

/// `idemguard locks`.
pub async fn locks(config: &Config) -> Document<LockScan> {
    let started = Instant::now();
    let mut scan = match LockInspector::from_config(config) {
        Ok(inspector) => inspector.scan(locks::LOCK_LIST_LIMIT).await,
        Err(e) => LockScan::failed(
            crate::config::host_port(&config.redis.url),
            "main",
            format!("{e:#}"),
        ),
    };
    link_tokens(config, &mut scan.locks).await;
    // Run once, this reader sees a Redisson lock or a token for the first time now: only an
    // idemguard value's holding time is known here (the console's counts across its scans).
    let warning = crate::lock::lock_held_warning(config);
    crate::lock::FirstSeen::default().judge(&mut scan.locks, warning);
    let err = (!scan.all_nodes_ok()).then(|| {
        scan.nodes
            .iter()
            .filter_map(|n| n.error.clone())
            .collect::<Vec<_>>()
            .join("; ")
    });
    Document::new(
        config,
        "locks",
        vec![BackendStatus::of(config, BackendId::Redis, started, err)],
        scan,
    )
}

/// Token locks linked to the requests they name, when the database answers within a poll (a
/// lock list never fails for it: the tokens then stay raw).
async fn link_tokens(config: &Config, found: &mut [crate::lock::LockView]) {
    let has_token = found
        .iter()
        .any(|l| matches!(l.format, crate::lock::formats::LockFormat::Token { .. }));
    if !has_token {
        return;
    }
    let linked = async {
        let db = crate::db::Database::connect_for_reads(config).await?;
        locks::link_tokens(&db, found).await
    };
    let _ = tokio::time::timeout(crate::console::read::sources::POLL_TIMEOUT, linked).await;
}

pub fn locks_table(r: &Document<LockScan>) -> String {
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
                escape(n.error.as_deref().unwrap_or_default()).into_owned()
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
    /// How the trace topic was read: its last hour only (`console.trace_margin` more on each
    /// side: an event's own time and its Kafka timestamp may differ a little).
    pub read_cost: Option<TopicCost>,
}

/// `idemguard rates`: the trace topic's last hour, read once (found by time, never from the
/// topic's beginning: that took 3.6 s for ~17,000 events and grew with the retention), and the
/// consumer group's lag.
pub async fn rates(config: &Config) -> Document<RatesData> {
    let started = Instant::now();
    let now = now_ms();
    let c = config.clone();
    let margin = config.console.trace_margin.as_millis() as i64;
    let window = TimeWindow {
        from_ms: now - RATE_WINDOW_MINUTES as i64 * 60_000 - margin,
        to_ms: now + margin,
    };
    let never = tokio_util::sync::CancellationToken::new();
    let (log, lag) = tokio::join!(
        read_trace_log_window(config, window, &never),
        blocking(move || Ok(lag::consumer_lag(
            &c.kafka,
            &c.kafka.consumer_group,
            &c.kafka.payment_topic,
            crate::console::read::topics::KAFKA_TIMEOUT,
        )?))
    );
    let backends = vec![
        BackendStatus::of(
            config,
            BackendId::TraceTopic,
            started,
            log.as_ref().err().map(|e| format!("{e:#}")),
        ),
        BackendStatus::of(
            config,
            BackendId::PaymentTopic,
            started,
            lag.as_ref().err().map(|e| format!("{e:#}")),
        ),
    ];
    let (log, read_cost) = log.map_or_else(|_| Default::default(), |(l, c)| (l, Some(c)));
    let data = RatesData {
        rates: log.rates(now),
        lag: lag.unwrap_or_default(),
        consumer_group: config.kafka.consumer_group.clone(),
        read_cost,
    };
    Document::new(config, "rates", backends, data)
}

pub fn rates_table(r: &Document<RatesData>) -> String {
    let d = &r.data;
    let mut out = format!(
        "interceptions per minute, last {} minutes (from {}), {} trace events read\n\n",
        d.rates.window_minutes,
        format_ms(d.rates.first_minute_ms),
        d.rates.events_seen
    );
    if let Some(w) = &d.rates.undecodable_warning {
        out.push_str(&format!("WARNING: {w}\n\n"));
    }
    if let Some(c) = &d.read_cost {
        out.push_str(&format!(
            "read {}: {} message(s) scanned, its last hour only, {} partition(s); {} ({} probe(s))\n\n",
            c.topic,
            c.messages_scanned,
            c.partitions_read.len(),
            c.offsets_found_by(),
            c.offset_probes
        ));
    }
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
pub async fn stuck(config: &Config) -> Document<StuckData> {
    let now = now_ms();
    let t_db = Instant::now();
    let db_part = async {
        let db = connect_database(config).await?;
        let r = records::stuck_records(&db, now, config.console.stuck_threshold).await;
        db.pool.close().await;
        r
    };
    let t_redis = Instant::now();
    let redis_part = async { anyhow::Ok(Liveness::from_config(config)?.live_instances().await?) };
    // The database part needs no deadline of its own: connecting has one, and its statement is
    // bounded on both sides (database.read_timeout), which also names the table it waited for.
    let (records, live) = tokio::join!(db_part, tokio::time::timeout(POLL_TIMEOUT, redis_part));
    let live = live.unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "redis did not answer within {POLL_TIMEOUT:?}"
        ))
    });
    let backends = vec![
        BackendStatus::of(
            config,
            BackendId::Database,
            t_db,
            records.as_ref().err().map(|e| format!("{e:#}")),
        ),
        BackendStatus::of(
            config,
            BackendId::Redis,
            t_redis,
            live.as_ref().err().map(|e| format!("{e:#}")),
        ),
    ];
    let mut records = records.unwrap_or_default();
    records::annotate_stuck(&mut records, live.as_ref().ok());
    let mask = crate::mask::Mask::of(config);
    let records = records
        .iter()
        .map(|r| r.shown(&mask).into_owned())
        .collect();
    Document::new(
        config,
        "stuck",
        backends,
        StuckData {
            threshold_ms: config.console.stuck_threshold.as_millis() as i64,
            records,
        },
    )
}

pub fn stuck_table(r: &Document<StuckData>) -> String {
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

// ---------------------------------------------------------------------------------------------
// dlq
// ---------------------------------------------------------------------------------------------

/// `idemguard dlq`: the DLQ's messages in `window`, newest first, each with what the consumer
/// would do with it now (the database answers that; without it the verdicts say "not looked
/// up" and the document is not ok).
pub async fn dlq(
    config: &Config,
    window: TimeWindow,
) -> Document<crate::console::read::dlq::DlqListing> {
    use crate::console::read::dlq::{look_up, read_dlq, DlqListing};
    let t_kafka = Instant::now();
    let cancel = tokio_util::sync::CancellationToken::new();
    let read = read_dlq(config, window, &cancel).await;
    let mut backends = vec![BackendStatus::of(
        config,
        BackendId::DlqTopic,
        t_kafka,
        read.as_ref().err().map(|e| format!("{e:#}")),
    )];
    let mut listing = read.unwrap_or_else(|_| DlqListing {
        topic: config.kafka.dlq_topic.clone(),
        window,
        messages: Vec::new(),
        truncated: false,
        read_cost: None,
    });
    let t_db = Instant::now();
    let looked = async {
        let db = connect_database(config).await?;
        let r = look_up(config, &db, &mut listing).await;
        db.pool.close().await;
        r
    }
    .await;
    backends.push(BackendStatus::of(
        config,
        BackendId::Database,
        t_db,
        looked.as_ref().err().map(|e| format!("{e:#}")),
    ));
    Document::new(config, "dlq", backends, listing)
}

pub fn dlq_table(r: &Document<crate::console::read::dlq::DlqListing>) -> String {
    let l = &r.data;
    let mut out = format!(
        "{} message(s) in the DLQ {} from {} to {}, newest first{}\n\n",
        l.messages.len(),
        escape(&l.topic),
        format_ms(l.window.from_ms),
        format_ms(l.window.to_ms),
        if l.truncated {
            " (more in the window: narrow it with --since/--until)"
        } else {
            ""
        }
    );
    let rows: Vec<Vec<String>> = l
        .messages
        .iter()
        .map(|m| columns::dlq_cells(m, r.generated_at_ms))
        .collect();
    out.push_str(&columns::text_table(columns::DLQ, &rows));
    if !l.messages.is_empty() {
        // Who dead-lettered each, whole: the table's BY names only the instance.
        let who: Vec<Vec<String>> = l
            .messages
            .iter()
            .map(|m| columns::dlq_who_cells(m, r.generated_at_ms))
            .collect();
        out.push('\n');
        out.push_str(&columns::text_table(columns::DLQ_WHO, &who));
    }
    out
}
