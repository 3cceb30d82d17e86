//! `idemguard profile suggest`: a commented profile written from what the live systems hold —
//! read-only, with the console's credentials, each source bounded in time and size
//! ([`Bounds`]). Every value comes with what it was based on, so a user checks the guesses
//! instead of writing the keys; `doctor` then validates the file.

use std::time::{Duration, Instant};

use crate::config::{redact_url, Config, StatusKind, TimeStorage, ABSENT, OWN_TABLES};
use crate::console::read::sources::blocking;
use crate::db::clock::{self, offset_text};
use crate::db::Database;
use crate::profile::keys::{self, KeySample};
use crate::profile::loglines::{self, FieldGuess, LogSample};
use crate::profile::messages::{self, IdPlace, TopicSample};
use crate::profile::render::{toml_text, Section};
use crate::profile::schema::{self, LiveTable, TableGuess};

/// How much each source is read at most.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Per source (the database's statements each, the Redis SCAN, each topic, the log files).
    pub deadline: Duration,
    pub redis_keys: usize,
    /// Per topic.
    pub messages: usize,
    /// The Redis keys sampled (SCAN MATCH): a Redis shared by several applications is sampled
    /// under the team's prefix.
    pub redis_match: String,
    /// Tables read at most (the first by name); the others are said as not read.
    pub tables: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            deadline: Duration::from_secs(10),
            redis_keys: 5_000,
            messages: 500,
            redis_match: "*".into(),
            tables: 1_000,
        }
    }
}

/// The `[environment]` the file declares (`--environment NAME`, `--production`): the console's
/// header shows it on every screen, so a file pointing at a team's system is never the green
/// `local` of the defaults.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `None`: the database's host.
    pub name: Option<String>,
    pub production: bool,
}

/// The suggested profile, and what could not be read (said on stderr and in the file).
pub struct Suggestion {
    pub sections: Vec<Section>,
    pub problems: Vec<String>,
    pub took: Duration,
}

impl Suggestion {
    pub fn to_toml(&self) -> String {
        toml_text(&self.sections, &self.problems, self.took)
    }
}

/// Reads every configured source and writes the profile they suggest.
pub async fn suggest(config: &Config, bounds: &Bounds, environment: &Environment) -> Suggestion {
    let started = Instant::now();
    let mut problems = Vec::new();
    // Each statement is bounded by the server too: by `--deadline`, the bound asked for here.
    let mut reads = config.for_reads();
    reads.database.statement_timeout = bounds.deadline;
    let db = match Database::connect(&reads).await {
        Ok(db) => Some(db),
        Err(e) => {
            problems.push(format!(
                "database {}: {e:#}",
                redact_url(&config.database.url)
            ));
            None
        }
    };
    let tables = match &db {
        Some(db) => database_side(db, bounds, &mut problems).await,
        None => None,
    };
    let redis = keys::sample(
        config,
        &bounds.redis_match,
        bounds.redis_keys,
        bounds.deadline,
    )
    .await;
    let redis = redis
        .map_err(|e| {
            problems.push(format!(
                "redis {}: {e:#}",
                crate::config::host_port(&config.redis.url)
            ))
        })
        .ok();
    let topics = topic_side(config, bounds, &mut problems).await;
    let mut logs = log_side(config, bounds).await;
    if let Some(Ok(shipped)) = &topics.logs {
        // The shipped lines are the same JSON lines: sampled like the files'.
        for m in &shipped.messages {
            if let Some(serde_json::Value::Object(map)) = &m.body {
                logs.lines.push(map.clone());
            }
        }
        logs.sources.push(format!("topic {}", shipped.topic));
    }
    let mut sections = vec![environment_section(config, environment)];
    sections.extend(connections(config));
    sections.extend(kafka_sections(config, &topics, db.as_ref(), tables.as_ref()).await);
    if let Some(r) = &redis {
        sections.push(lock_section(r, db.as_ref(), tables.as_ref()).await);
    }
    sections.push(logs_section(config, &logs));
    if let Some(t) = &tables {
        sections.extend(source_sections(t));
    }
    if let Some(db) = db {
        db.pool.close().await;
    }
    Suggestion {
        sections,
        problems,
        took: started.elapsed(),
    }
}

/// What the database side found.
pub struct DatabaseSide {
    pub guesses: Vec<TableGuess>,
    pub live: Vec<LiveTable>,
    pub zone: Option<(i64, String)>,
}

impl DatabaseSide {
    fn guess(&self, logical: &str) -> Option<&TableGuess> {
        self.guesses
            .iter()
            .find(|g| g.logical == logical && g.table.is_some())
    }
}

async fn database_side(
    db: &Database,
    bounds: &Bounds,
    problems: &mut Vec<String>,
) -> Option<DatabaseSide> {
    let live = match schema::live_tables(db, bounds.tables).await {
        Ok(l) => {
            problems.extend(l.not_read);
            l.tables
        }
        Err(e) => {
            problems.push(format!("{e:#}"));
            return None;
        }
    };
    let defaults = Config::defaults().source;
    let columns_of = |logical: &str| -> Vec<String> {
        defaults
            .table(logical)
            .map(|t| t.columns.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut guesses = schema::match_tables(&live, columns_of);
    for g in &mut guesses {
        let Some(name) = g.table.clone() else {
            continue;
        };
        let table = live
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .unwrap_or_default();
        schema::refine_epoch(db, g, bounds.deadline).await;
        schema::guess_status(db, g, &table, bounds.deadline).await;
    }
    let zone = zone_of(db, &guesses, bounds.deadline, problems).await;
    Some(DatabaseSide {
        guesses,
        live,
        zone,
    })
}

/// The zone of the wall-clock tables, from the server's clock and their newest rows.
async fn zone_of(
    db: &Database,
    guesses: &[TableGuess],
    deadline: Duration,
    problems: &mut Vec<String>,
) -> Option<(i64, String)> {
    let server = match clock::server_clock(db).await {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!("{e:#}"));
            return None;
        }
    };
    let mut newest = Vec::new();
    for g in guesses.iter().filter(|g| g.time == TimeStorage::Datetime) {
        let (Some(t), Some(c)) = (&g.table, g.physical("created_at")) else {
            continue;
        };
        if let Some(wall_ms) = clock::newest_wall_ms(db, t, &c, deadline).await {
            newest.push(clock::NewestRow {
                column: format!("{t}.{c}"),
                wall_ms,
            });
        }
    }
    Some(clock::ZoneEvidence { server, newest }.suggested())
}

/// The sampled topics: payment, DLQ, trace, shipped logs (each `None` when not configured).
pub struct TopicSide {
    pub payment: Option<Result<TopicSample, String>>,
    pub trace: Option<Result<TopicSample, String>>,
    /// Topics the broker has whose names look like payments, when the configured one is missing.
    pub payment_candidates: Vec<String>,
    pub logs: Option<Result<TopicSample, String>>,
}

async fn topic_side(config: &Config, bounds: &Bounds, problems: &mut Vec<String>) -> TopicSide {
    let read = |topic: String| {
        let (c, b) = (config.clone(), bounds.clone());
        async move {
            if topic.is_empty() {
                return None;
            }
            let r = blocking(move || messages::sample(&c, &topic, b.messages, b.deadline)).await;
            Some(r.map_err(|e| format!("{e:#}")))
        }
    };
    let payment = read(config.kafka.payment_topic.clone()).await;
    let trace = read(config.kafka.trace_topic.clone()).await;
    let logs = read(config.logs.topic.clone()).await;
    let mut payment_candidates = Vec::new();
    if let Some(Err(e)) = &payment {
        problems.push(e.clone());
        let c = config.clone();
        payment_candidates = blocking(move || topic_names(&c)).await.unwrap_or_default();
        payment_candidates.retain(|t| t.to_lowercase().contains("pay"));
    }
    TopicSide {
        payment,
        trace,
        payment_candidates,
        logs,
    }
}

fn topic_names(config: &Config) -> anyhow::Result<Vec<String>> {
    use rdkafka::consumer::Consumer;
    let c = crate::console::read::topics::reader(config, "profile")?;
    let md = c.fetch_metadata(None, crate::console::read::topics::KAFKA_TIMEOUT)?;
    Ok(md.topics().iter().map(|t| t.name().to_string()).collect())
}

async fn log_side(config: &Config, bounds: &Bounds) -> LogSample {
    let globs = config.logs.files.clone();
    let deadline = bounds.deadline;
    let read = blocking(move || Ok(loglines::sample_files(&globs)));
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(s)) => s,
        _ => LogSample {
            errors: vec![format!("the log files were not read within {deadline:?}")],
            ..LogSample::default()
        },
    }
}

/// `[environment]`: named after the database's host unless named, yellow (a system that is not
/// the user's own), red when production.
fn environment_section(config: &Config, e: &Environment) -> Section {
    let mut s = Section::new("environment");
    s.note("shown in the console's header and in every audit row: where an operator is");
    let host = url::Url::parse(&config.database.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    match &e.name {
        Some(name) => s.set("name", name, "--environment"),
        None => s.set(
            "name",
            &host,
            "the database's host; name it with --environment NAME",
        ),
    }
    if e.production {
        s.set("color", "red", "production");
        s.set_bool(
            "production",
            true,
            "--production: every console action asks for a typed confirmation, and every connection must be TLS with a verified certificate (or listed in environment.allow_unverified)",
        );
    } else {
        s.set(
            "color",
            "yellow",
            "not the defaults' green `local`: a team's system",
        );
        s.set_bool(
            "production",
            false,
            "give --production for a production system (typed confirmations, verified TLS)",
        );
    }
    s
}

/// Where this run read from: written as keys when they hold no secret (so the file alone points
/// at the same systems), else as a comment naming the environment variable.
fn connections(config: &Config) -> Vec<Section> {
    let place = |section: &str, key: &str, url: &str, env: &str| {
        let mut s = Section::new(section);
        if redact_url(url) == url {
            s.set(key, url, "where this profile was read from");
        } else {
            let shown = redact_url(url);
            s.note(&format!(
                "{key} = {shown:?}: give it through {env} (it has a password)"
            ));
        }
        s
    };
    vec![
        place(
            "database",
            "url",
            &config.database.url,
            "IDEMGUARD_DATABASE__URL",
        ),
        place("redis", "url", &config.redis.url, "IDEMGUARD_REDIS__URL"),
    ]
}

/// `[kafka]` and `[kafka_ids.payment]`.
async fn kafka_sections(
    config: &Config,
    t: &TopicSide,
    db: Option<&Database>,
    tables: Option<&DatabaseSide>,
) -> Vec<Section> {
    let mut k = Section::new("kafka");
    k.set(
        "bootstrap_servers",
        &config.kafka.bootstrap_servers,
        "where this profile was read from",
    );
    match &t.payment {
        Some(Ok(sample)) => {
            let p = messages::partitioning(sample);
            k.set(
                "payment_topic",
                sample.topic.as_str(),
                &format!("{} message(s) sampled", sample.messages.len()),
            );
            if p == messages::Partitioning::Empty {
                k.note(&format!(
                    "partitioner: {}; the configured one stays",
                    p.describe()
                ));
            } else {
                k.set("partitioner", p.partitioner().name(), &p.describe());
            }
        }
        Some(Err(e)) => {
            k.note(&format!(
                "payment topic {:?} could not be read: {e}",
                config.kafka.payment_topic
            ));
            if !t.payment_candidates.is_empty() {
                k.note(&format!(
                    "topics whose names look like payments: {}",
                    t.payment_candidates.join(", ")
                ));
            }
        }
        None => k.note("no payment topic configured (kafka.payment_topic)"),
    }
    k.set(
        "trace_topic",
        trace_topic_value(&t.trace).0.as_str(),
        &trace_topic_value(&t.trace).1,
    );
    let mut ids = Section::new("kafka_ids.payment");
    if let Some(Ok(sample)) = &t.payment {
        for (key, id) in [
            ("order_no", "order_no"),
            ("request_id", "request_id"),
            ("event_id", "event_id"),
        ] {
            let places = messages::id_places(sample, id);
            let checked = check_values(db, tables, id, &places).await;
            let list: Vec<String> = places.iter().map(|p| p.place.clone()).collect();
            if list.is_empty() {
                ids.note(&format!(
                    "{key}: not found in any message sampled (by name): the default places stay"
                ));
            } else {
                ids.set_list(key, &list, &places_note(sample, &places, &checked));
            }
        }
    } else {
        ids.note("no message sampled: the defaults stay (header, JSON body, key)");
    }
    vec![k, ids]
}

/// `""` unless the trace topic holds idemguard trace events.
fn trace_topic_value(trace: &Option<Result<TopicSample, String>>) -> (String, String) {
    match trace {
        Some(Ok(s)) => {
            let events = s.messages.iter().filter(|m| m.trace_event).count();
            if events > 0 {
                (
                    s.topic.clone(),
                    format!(
                        "{events} of {} message(s) sampled are idemguard trace events",
                        s.messages.len()
                    ),
                )
            } else if s.messages.is_empty() {
                (
                    s.topic.clone(),
                    "exists, empty: kept (idemguard's services write it)".into(),
                )
            } else {
                (String::new(), format!("none of the {} message(s) sampled on {} is an idemguard trace event: no trace topic", s.messages.len(), s.topic))
            }
        }
        Some(Err(e)) => (String::new(), format!("not read ({e}): no trace topic")),
        None => (String::new(), "none configured".into()),
    }
}

fn places_note(sample: &TopicSample, places: &[IdPlace], checked: &str) -> String {
    if places.is_empty() {
        return "not found in any message sampled (by name)".into();
    }
    let found: Vec<String> = places
        .iter()
        .map(|p| format!("{} in {} of {}", p.place, p.found_in, sample.messages.len()))
        .collect();
    format!("{}{checked}", found.join("; "))
}

/// Whether the first place's example values are rows the database knows.
async fn check_values(
    db: Option<&Database>,
    tables: Option<&DatabaseSide>,
    id: &str,
    places: &[IdPlace],
) -> String {
    let (Some(db), Some(tables), Some(first)) = (db, tables, places.first()) else {
        return String::new();
    };
    let (logical, column) = match id {
        "order_no" => ("order_record", "order_no"),
        "request_id" => ("idempotency_record", "request_id"),
        _ => ("payment_flow", "event_id"),
    };
    let Some((table, col)) = tables
        .guess(logical)
        .and_then(|g| Some((g.table.clone()?, g.physical(column)?)))
    else {
        return String::new();
    };
    let mut known = 0;
    for v in &first.examples {
        known += usize::from(has_value(db, &table, &col, v).await);
    }
    format!(
        "; {known} of {} example value(s) are in {table}.{col}",
        first.examples.len()
    )
}

/// True when the text column holds `value` (bounded: one indexed lookup, or a deadline).
pub async fn has_value(db: &Database, table: &str, column: &str, value: &str) -> bool {
    let sql = schema::statement(db, "profile_has_value", table, column);
    let q = sqlx::query(&sql)
        .bind(value.to_string())
        .fetch_optional(&db.pool);
    matches!(
        tokio::time::timeout(Duration::from_secs(2), q).await,
        Ok(Ok(Some(_)))
    )
}

/// `[foreign_locks]`: the sampled patterns that look like locks, with `{orderNo}` /
/// `{requestId}` where the database knows the part replaced.
async fn lock_section(
    r: &KeySample,
    db: Option<&Database>,
    tables: Option<&DatabaseSide>,
) -> Section {
    let mut s = Section::new("foreign_locks");
    s.note(&format!(
        "{} key(s) sampled on {} ({}); patterns with their count, type and value:",
        r.keys_seen,
        r.node,
        if r.complete {
            "the whole keyspace"
        } else {
            "the SCAN stopped at its bound"
        }
    ));
    let mut patterns = Vec::new();
    for p in r.patterns.iter().take(40) {
        let shape: Vec<String> = p
            .examples
            .iter()
            .map(|e| {
                format!(
                    "{} {} (ttl {} ms)",
                    e.redis_type,
                    e.format.name(),
                    e.pttl_ms
                )
            })
            .collect();
        let lock = p.is_lock();
        let placeholder = if lock {
            id_placeholder(p, db, tables).await
        } else {
            None
        };
        let pattern = match &placeholder {
            Some((ph, _)) => p.glob.replacen('*', ph, 1),
            None => p.glob.clone(),
        };
        let verdict = match (&placeholder, lock) {
            (Some((_, why)), _) => format!("a lock: {why}"),
            (None, true) => "a lock; its `*` is no orderNo or requestId the database knows: listed, not read by a trace".into(),
            (None, false) => "not a lock".into(),
        };
        s.note(&format!(
            "  {pattern}  ×{}  {}  → {verdict}",
            p.count,
            shape.join(", ")
        ));
        if lock {
            patterns.push(pattern);
        }
    }
    if patterns.is_empty() {
        s.note("no key looks like a lock: idemguard's own lock:* stays");
        patterns.push("lock:*".into());
    }
    s.set_list("patterns", &patterns, "the lock patterns above");
    s.set_list(
        "decoders",
        &["idemguard".into(), "redisson".into(), "token".into()],
        "tried in order on each key",
    );
    s
}

/// `{orderNo}` or `{requestId}` when the examples' ID parts are rows the database knows.
async fn id_placeholder(
    p: &keys::KeyPattern,
    db: Option<&Database>,
    tables: Option<&DatabaseSide>,
) -> Option<(&'static str, String)> {
    let (db, tables) = (db?, tables?);
    let candidates = [
        ("{orderNo}", "order_record", "order_no"),
        ("{requestId}", "order_record", "req_id"),
        ("{requestId}", "idempotency_record", "request_id"),
    ];
    for (ph, logical, column) in candidates {
        let Some((t, c)) = tables
            .guess(logical)
            .and_then(|g| Some((g.table.clone()?, g.physical(column)?)))
        else {
            continue;
        };
        let mut known = 0;
        for id in &p.ids {
            known += usize::from(has_value(db, &t, &c, id).await);
        }
        if known > 0 {
            return Some((
                ph,
                format!("{known} of {} example ID(s) are in {t}.{c}", p.ids.len()),
            ));
        }
    }
    None
}

fn logs_section(config: &Config, sample: &LogSample) -> Section {
    let mut s = Section::new("logs");
    s.set_list("files", &config.logs.files, "as configured (logs.files)");
    s.set(
        "topic",
        config.logs.topic.as_str(),
        "as configured (logs.topic)",
    );
    if sample.lines.is_empty() {
        s.note(
            "no JSON line sampled (no log file configured, or none readable): the field names stay",
        );
        for e in &sample.errors {
            s.note(e);
        }
        return s;
    }
    s.note(&format!(
        "{} JSON line(s) sampled ({} not JSON) from {}",
        sample.lines.len(),
        sample.not_json,
        sample.sources.join(", ")
    ));
    for FieldGuess {
        key,
        name,
        found_in,
    } in loglines::guess_fields(sample, &config.logs)
    {
        let note = if name.is_empty() {
            "in no line sampled".to_string()
        } else {
            format!("in {found_in} of {} line(s)", sample.lines.len())
        };
        s.set(key, name.as_str(), &note);
    }
    s
}

/// `[source]` and one `[source.TABLE]` per logical table.
fn source_sections(d: &DatabaseSide) -> Vec<Section> {
    let mut source = Section::new("source");
    match &d.zone {
        Some((offset, why)) => source.set("time_zone", offset_text(*offset).as_str(), why),
        None => source.note("the server's clock could not be read: time_zone stays +00:00"),
    }
    let mut out = vec![source];
    for g in &d.guesses {
        out.push(table_section(g));
    }
    for own in OWN_TABLES {
        let mut s = Section::new(&format!("source.{own}"));
        let exists = d.live.iter().any(|t| t.name.eq_ignore_ascii_case(own));
        s.set(
            "table",
            if exists { "" } else { ABSENT },
            if exists {
                "idemguard's own table exists"
            } else {
                "idemguard's own table: not on this system"
            },
        );
        out.push(s);
    }
    out
}

fn table_section(g: &TableGuess) -> Section {
    let mut s = Section::new(&format!("source.{}", g.logical));
    for n in &g.notes {
        s.note(n);
    }
    let Some(table) = &g.table else {
        s.set("table", ABSENT, "");
        return s;
    };
    s.set("table", table.as_str(), "");
    if g.columns.iter().any(|(l, _)| l == "created_at") {
        let time = match g.time {
            TimeStorage::EpochMs => "epoch_ms",
            TimeStorage::EpochS => "epoch_s",
            TimeStorage::Datetime => "datetime",
            TimeStorage::Timestamptz => "timestamptz",
        };
        s.set("time", time, "from created_at's type");
    }
    if !g.status.is_empty() {
        let kind = if g.status_kind == StatusKind::Integer {
            "integer"
        } else {
            "text"
        };
        s.set("status_kind", kind, "from the status column's type");
        for (name, value) in &g.status {
            s.set(
                &format!("status.{name}"),
                value.as_str(),
                if value.is_empty() { "not seen" } else { "" },
            );
        }
    }
    for (logical, physical) in &g.columns {
        s.set(
            &format!("columns.{logical}"),
            physical.as_str(),
            if physical.is_empty() { "none" } else { "" },
        );
    }
    s
}
