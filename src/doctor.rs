//! `idemguard doctor`: one row per configured service — the database (version, migrations),
//! each Redis node (PING, version, role), Kafka (metadata, each configured topic and its
//! partitions) — with its latency. A failing service gets its own row with host:port, the error
//! and a hint. All checks run at once, each with its own timeout, so one dead service never hides
//! the others.

mod profile;

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;

use crate::config::{host_port, redact_url, Config};
use crate::db::{migrate, Database};

/// How long one check may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize)]
pub struct CheckRow {
    pub service: String,
    pub target: String,
    pub ok: bool,
    pub latency_ms: f64,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Works, but something relied on does not hold (a time zone, a partitioner): `ok` stays
    /// true, the row says what and how to fix it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warning: bool,
}

impl CheckRow {
    fn ok(
        service: impl Into<String>,
        target: impl Into<String>,
        started: Instant,
        detail: impl Into<String>,
    ) -> CheckRow {
        CheckRow {
            service: service.into(),
            target: target.into(),
            ok: true,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
            detail: detail.into(),
            hint: None,
            warning: false,
        }
    }
    fn warn(
        service: impl Into<String>,
        target: impl Into<String>,
        started: Instant,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> CheckRow {
        CheckRow {
            detail: crate::logging::scrub(&detail.into()),
            hint: Some(hint.into()),
            warning: true,
            ..CheckRow::ok(service, target, started, "")
        }
    }
    fn fail(
        service: impl Into<String>,
        target: impl Into<String>,
        started: Instant,
        error: impl Into<String>,
        hint: impl Into<String>,
    ) -> CheckRow {
        CheckRow {
            service: service.into(),
            target: target.into(),
            ok: false,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
            // A driver's error text could quote a connect parameter; the secrets never show.
            detail: crate::logging::scrub(&error.into()),
            hint: Some(hint.into()),
            warning: false,
        }
    }
}

/// Run every check. The rows come back in a stable order: database, redis, redlock nodes, kafka.
pub async fn run(config: &Config) -> Vec<CheckRow> {
    let mut checks: Vec<tokio::task::JoinHandle<Vec<CheckRow>>> = Vec::new();
    {
        let c = config.clone();
        checks.push(tokio::spawn(async move {
            let mut rows = vec![check_database(&c, "database", &c.database.url).await];
            if c.source.is_foreign() {
                rows.extend(check_profile(&c).await);
            }
            rows
        }));
    }
    if !config.database.replica_url.is_empty() {
        let c = config.clone();
        checks.push(tokio::spawn(async move {
            vec![check_database(&c, "database replica", &c.database.replica_url).await]
        }));
    }
    {
        // A cluster's seeds are checked one by one (each a plain redis:// node).
        let urls = match crate::config::RedisTarget::parse(&config.redis.url) {
            Ok(crate::config::RedisTarget::Cluster { seeds }) => seeds,
            _ => vec![config.redis.url.clone()],
        };
        for (i, url) in urls.into_iter().enumerate() {
            let name = if i == 0 {
                "redis".to_string()
            } else {
                format!("redis seed {}", i + 1)
            };
            checks.push(tokio::spawn(
                async move { vec![check_redis(&name, &url).await] },
            ));
        }
    }
    for (i, node) in config.redis.redlock_nodes.iter().enumerate() {
        let url = node.clone();
        checks.push(tokio::spawn(async move {
            vec![check_redis(&format!("redlock node {}", i + 1), &url).await]
        }));
    }
    {
        let c = config.clone();
        checks.push(tokio::spawn(async move { check_kafka(&c).await }));
    }
    let mut rows = Vec::new();
    for h in checks {
        match h.await {
            Ok(r) => rows.extend(r),
            Err(e) => rows.push(CheckRow::fail(
                "doctor",
                "-",
                Instant::now(),
                format!("check panicked: {e}"),
                "report this as a bug",
            )),
        }
    }
    rows
}

/// The source profile against the database it describes (a team's system: no idemguard schema).
async fn check_profile(config: &Config) -> Vec<CheckRow> {
    let started = Instant::now();
    let mut c = config.clone();
    c.database.max_connections = 1;
    c.database.connect_timeout = CHECK_TIMEOUT;
    let attempt = async {
        let db = Database::connect(&c).await?;
        let rows = profile::check(&c, &db).await;
        db.pool.close().await;
        anyhow::Ok(rows)
    };
    match tokio::time::timeout(CHECK_TIMEOUT * 4, attempt).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => vec![CheckRow::fail(
            "source profile",
            redact_url(&config.database.url),
            started,
            e.to_string(),
            "fix the database row first",
        )],
        Err(_) => vec![CheckRow::fail(
            "source profile",
            redact_url(&config.database.url),
            started,
            "no answer within 20s",
            "is the database overloaded?",
        )],
    }
}

async fn check_database(config: &Config, service: &str, url: &str) -> CheckRow {
    let started = Instant::now();
    let target = redact_url(url);
    let mut c = config.clone();
    c.database.max_connections = 1;
    c.database.connect_timeout = CHECK_TIMEOUT;
    let attempt = async {
        let db = Database::connect_url(&c, url).await?;
        let version = db.server_version().await?;
        let mut conn = db.pool.acquire().await?;
        let schema = migrate::schema_version(&db, &mut conn).await.unwrap_or(0);
        drop(conn);
        if schema > 0 {
            migrate::check_columns(&db).await?;
        }
        db.pool.close().await;
        anyhow::Ok((version, schema))
    };
    match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Err(_) => CheckRow::fail(
            service,
            target,
            started,
            "no answer within 5s",
            format!("is it running on {}? `scripts/stack up`", host_port(url)),
        ),
        Ok(Err(e)) => CheckRow::fail(
            service,
            target,
            started,
            e.to_string(),
            format!("`scripts/stack status`; check the URL ({})", host_port(url)),
        ),
        Ok(Ok((version, schema))) => {
            let short = version
                .split(" on ")
                .next()
                .unwrap_or(&version)
                .trim()
                .to_string();
            if config.source.is_foreign() {
                CheckRow::ok(
                    service,
                    target,
                    started,
                    format!(
                        "{short}; a team's system (source profile): no idemguard schema expected"
                    ),
                )
            } else if schema >= migrate::SCHEMA_VERSION {
                CheckRow::ok(
                    service,
                    target,
                    started,
                    format!("{short}; schema v{schema} applied"),
                )
            } else {
                CheckRow::fail(
                    service,
                    target,
                    started,
                    format!(
                        "{short}; schema not applied (v{schema}, need v{})",
                        migrate::SCHEMA_VERSION
                    ),
                    "run `idemguard migrate`",
                )
            }
        }
    }
}

async fn check_redis(service: &str, url: &str) -> CheckRow {
    let started = Instant::now();
    let target = host_port(url);
    let hint =
        format!("redis node {target} did not answer (is it running? `scripts/stack status`)");
    let attempt = async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        let server: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let replication: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await?;
        anyhow::Ok((
            pong,
            info_field(&server, "redis_version"),
            info_field(&replication, "role"),
        ))
    };
    match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Err(_) => CheckRow::fail(service, target, started, "no answer within 5s", hint),
        // A node that refuses our user or password is up: "is it running?" would mislead.
        Ok(Err(e))
            if e.downcast_ref::<redis::RedisError>()
                .is_some_and(crate::lock::is_permission) =>
        {
            let hint = format!(
                "redis node {target} refused the user or password of the URL (check its ACL)"
            );
            CheckRow::fail(service, target, started, e.to_string(), hint)
        }
        Ok(Err(e)) => CheckRow::fail(service, target, started, e.to_string(), hint),
        Ok(Ok((pong, version, role))) => CheckRow::ok(
            service,
            target,
            started,
            format!("{pong}; redis {version}; role {role}"),
        ),
    }
}

fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(':'))
        })
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "?".into())
}

async fn check_kafka(config: &Config) -> Vec<CheckRow> {
    let started = Instant::now();
    let servers = config.kafka.bootstrap_servers.clone();
    let topics = [
        config.kafka.payment_topic.clone(),
        config.kafka.dlq_topic.clone(),
        config.kafka.trace_topic.clone(),
    ];
    let kafka = config.kafka.clone();
    let metadata = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = crate::kafka_client::client_config(&kafka)
            .set("log_level", "0")
            .create()
            .map_err(|e| e.to_string())?;
        let md = consumer
            .fetch_metadata(None, CHECK_TIMEOUT)
            .map_err(|e| e.to_string())?;
        let brokers = md
            .brokers()
            .iter()
            .map(|b| format!("{}:{}", b.host(), b.port()))
            .collect::<Vec<_>>();
        let topics = md
            .topics()
            .iter()
            .map(|t| (t.name().to_string(), t.partitions().len()))
            .collect::<Vec<_>>();
        Ok::<_, String>((brokers, topics))
    })
    .await;
    let hint = format!("is the broker running on {servers}? `scripts/stack up` starts one");
    let (brokers, found) = match metadata {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return vec![CheckRow::fail("kafka", servers, started, e, hint)],
        Err(e) => {
            return vec![CheckRow::fail(
                "kafka",
                servers,
                started,
                e.to_string(),
                hint,
            )]
        }
    };
    let mut rows = vec![CheckRow::ok(
        "kafka",
        servers.clone(),
        started,
        format!("{} broker(s): {}", brokers.len(), brokers.join(", ")),
    )];
    // An empty name is "none" (no trace topic on a team's system), not a topic to look for.
    for topic in topics.iter().filter(|t| !t.is_empty()) {
        let topic = topic.clone();
        match found.iter().find(|(name, _)| *name == topic) {
            Some((_, n)) if *n > 0 => rows.push(CheckRow::ok(
                format!("topic {topic}"),
                servers.clone(),
                started,
                format!("{n} partitions"),
            )),
            _ => rows.push(CheckRow::fail(
                format!("topic {topic}"),
                servers.clone(),
                started,
                "topic does not exist",
                "`scripts/stack up` creates the topics (3 partitions)",
            )),
        }
    }
    for topic in [&config.kafka.payment_topic, &config.kafka.trace_topic] {
        if !topic.is_empty() && found.iter().any(|(name, n)| name == topic && *n > 1) {
            rows.push(check_partitioning(config, topic).await);
        }
    }
    rows
}

/// Messages sampled per topic for the partitioning row.
const PARTITIONING_SAMPLE: usize = 300;

/// The topic's observed partitioning against `kafka.partitioner`: a trace reads only its
/// order's partition when they agree (and checks what it scans when they do not).
async fn check_partitioning(config: &Config, topic: &str) -> CheckRow {
    let started = Instant::now();
    let (c, t) = (config.clone(), topic.to_string());
    let sample = tokio::task::spawn_blocking(move || {
        crate::profile::messages::sample(&c, &t, PARTITIONING_SAMPLE, CHECK_TIMEOUT)
    })
    .await;
    let service = format!("topic {topic} partitioning");
    let servers = config.kafka.bootstrap_servers.clone();
    let sample = match sample {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return CheckRow::fail(
                service,
                servers,
                started,
                format!("{e:#}"),
                "is the broker answering?",
            )
        }
        Err(e) => {
            return CheckRow::fail(
                service,
                servers,
                started,
                e.to_string(),
                "report this as a bug",
            )
        }
    };
    let observed = crate::profile::messages::partitioning(&sample);
    let configured = config.kafka.partitioner;
    let agrees = observed == crate::profile::messages::Partitioning::Empty
        || observed.partitioner() == configured
        || configured == crate::stream::partitioner::Partitioner::None;
    let detail = format!(
        "{}; kafka.partitioner = {}",
        observed.describe(),
        configured.name()
    );
    if agrees {
        CheckRow::ok(service, servers, started, detail)
    } else {
        CheckRow::warn(
            service,
            servers,
            started,
            detail,
            format!(
                "set kafka.partitioner = \"{}\" (a trace that reads by the configured one finds its partition's messages unkeyed or keyed elsewhere, says so and reads every partition)",
                observed.partitioner().name()
            ),
        )
    }
}

/// The closing line when a check failed: how many, and which services (`None`: all passed).
pub fn failures(rows: &[CheckRow]) -> Option<String> {
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| format!("{} ({})", r.service, r.target))
        .collect();
    (!failed.is_empty()).then(|| format!("{} check(s) failed: {}", failed.len(), failed.join(", ")))
}

/// The rows as a table for people.
pub fn render(rows: &[CheckRow]) -> String {
    let w_service = rows
        .iter()
        .map(|r| r.service.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let w_target = rows
        .iter()
        .map(|r| r.target.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:<w_service$}  {:<w_target$}  {:<6}  {:>9}  DETAIL\n",
        "SERVICE", "TARGET", "STATUS", "LATENCY"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<w_service$}  {:<w_target$}  {:<6}  {:>7.1}ms  {}\n",
            r.service,
            r.target,
            match (r.ok, r.warning) {
                (true, false) => "ok",
                (true, true) => "warn",
                (false, _) => "FAIL",
            },
            r.latency_ms,
            r.detail
        ));
        if let Some(h) = &r.hint {
            out.push_str(&format!(
                "{:<w_service$}  {:<w_target$}  {:<6}  {:>9}  hint: {h}\n",
                "", "", "", ""
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closing_line_names_the_services_that_failed() {
        let t = Instant::now();
        let rows = vec![
            CheckRow::ok(
                "database",
                "postgres://root@127.0.0.1:5432/idemguard",
                t,
                "PostgreSQL 15",
            ),
            CheckRow::fail("redis", "127.0.0.1:6399", t, "refused", "is it running?"),
            CheckRow::fail(
                "topic payment.succeeded",
                "127.0.0.1:9092",
                t,
                "topic does not exist",
                "scripts/stack up",
            ),
        ];
        assert_eq!(
            failures(&rows).as_deref(),
            Some("2 check(s) failed: redis (127.0.0.1:6399), topic payment.succeeded (127.0.0.1:9092)")
        );
        assert_eq!(failures(&rows[..1]), None);
    }
}
