//! `idemguard doctor`: one row per configured service — the database (version, migrations),
//! each Redis node (PING, version, role), Kafka (metadata, each configured topic and its
//! partitions) — with its latency. A failing service gets its own row with host:port, the error
//! and a hint. All checks run at once, each with its own timeout, so one dead service never hides
//! the others.

mod profile;
mod security;

use std::time::{Duration, Instant};

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
            let mut rows = check_database(&c, "database", &c.database.url).await;
            if c.source.is_foreign() {
                rows.extend(check_profile(&c).await);
            }
            rows
        }));
    }
    if !config.database.replica_url.is_empty() {
        let c = config.clone();
        checks.push(tokio::spawn(async move {
            check_database(&c, "database replica", &c.database.replica_url).await
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
            let c = config.clone();
            checks.push(tokio::spawn(
                async move { check_redis(&c, &name, &url).await },
            ));
        }
    }
    for (i, node) in config.redis.redlock_nodes.iter().enumerate() {
        let (c, url) = (config.clone(), node.clone());
        checks.push(tokio::spawn(async move {
            check_redis(&c, &format!("redlock node {}", i + 1), &url).await
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
    let mut c = config.for_reads();
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

/// The database's row, then how its connection is secured.
async fn check_database(config: &Config, service: &str, url: &str) -> Vec<CheckRow> {
    let started = Instant::now();
    let (row, secured) = check_database_row(config, service, url).await;
    let mut rows = vec![row];
    if let Some(secured) = secured {
        rows.push(security::database(config, service, url, &secured, started).await);
    }
    rows
}

async fn check_database_row(
    config: &Config,
    service: &str,
    url: &str,
) -> (CheckRow, Option<String>) {
    let started = Instant::now();
    let target = redact_url(url);
    let mut c = config.for_reads();
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
        let secured: String = sqlx::query_scalar(db.sql("connection_security"))
            .fetch_one(&db.pool)
            .await?;
        db.pool.close().await;
        anyhow::Ok((version, schema, secured))
    };
    let (outcome, secured) = match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Ok(Ok((version, schema, secured))) => (Ok(Ok((version, schema))), Some(secured)),
        Ok(Err(e)) => (Ok(Err(e)), None),
        Err(e) => (Err(e), None),
    };
    let row = match outcome {
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
    };
    (row, secured)
}

/// A Redis node's row (PING, version, role), then how its connection is secured.
async fn check_redis(config: &Config, service: &str, url: &str) -> Vec<CheckRow> {
    let started = Instant::now();
    let target = host_port(url);
    let hint =
        format!("redis node {target} did not answer (is it running? `scripts/stack status`)");
    let access = crate::lock::RedisAccess::of(&config.redis);
    let attempt = async {
        let client = access.client(url)?;
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
        // An ACL that does not allow it leaves the user unsaid.
        let user: String = redis::cmd("ACL")
            .arg("WHOAMI")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        Ok::<_, redis::RedisError>((
            pong,
            info_field(&server, "redis_version"),
            info_field(&replication, "role"),
            user,
        ))
    };
    let row = match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Err(_) => CheckRow::fail(service, &target, started, "no answer within 5s", hint),
        // A node that refuses our user or password is up: "is it running?" would mislead.
        Ok(Err(e)) if crate::lock::is_permission(&e) => {
            let hint = format!(
                "redis node {target} refused the user or password of the URL (check its ACL)"
            );
            CheckRow::fail(service, &target, started, e.to_string(), hint)
        }
        Ok(Err(e)) => match crate::lock::refusal(&target, url, &e).await {
            Some(why) => CheckRow::fail(service, &target, started, e.to_string(), why),
            None => CheckRow::fail(service, &target, started, e.to_string(), hint),
        },
        Ok(Ok((pong, version, role, user))) => {
            let row = CheckRow::ok(
                service,
                &target,
                started,
                format!("{pong}; redis {version}; role {role}"),
            );
            let client = (!config.redis.tls_cert_file.is_empty()).then_some((
                config.redis.tls_cert_file.as_str(),
                config.redis.tls_key_file.as_str(),
            ));
            let endpoint = security::Endpoint {
                backend: crate::tls::Backend::Redis,
                addr: &target,
                client,
                verification: security::redis_verification(url, &config.redis),
                user: &user,
            };
            return vec![
                row,
                security::endpoint_row(config, service, &target, started, endpoint).await,
            ];
        }
    };
    vec![row]
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
    let (brokers, found) = match crate::kafka_client::preflight(&config.kafka, CHECK_TIMEOUT).await
    {
        Ok(md) => (md.brokers, md.topics),
        Err(e) => {
            let hint = if e.refused {
                "the brokers refused our TLS or SASL settings (above)".to_string()
            } else {
                format!("is the broker running on {servers}? `scripts/stack up` starts one")
            };
            return vec![CheckRow::fail("kafka", servers, started, e.message, hint)];
        }
    };
    let mut rows = vec![CheckRow::ok(
        "kafka",
        servers.clone(),
        started,
        format!("{} broker(s): {}", brokers.len(), brokers.join(", ")),
    )];
    rows.push(kafka_security(config, started).await);
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

/// How the Kafka clients are secured: the protocol's TLS and verification, the first bootstrap
/// server's certificate, the SASL user.
async fn kafka_security(config: &Config, started: Instant) -> CheckRow {
    let k = &config.kafka;
    let first = k.bootstrap_servers.split(',').next().unwrap_or("").trim();
    let client = (!k.ssl_cert_file.is_empty())
        .then_some((k.ssl_cert_file.as_str(), k.ssl_key_file.as_str()));
    let user = crate::kafka_client::login(k);
    let endpoint = security::Endpoint {
        backend: crate::tls::Backend::Kafka,
        addr: first,
        client,
        verification: security::kafka_verification(k),
        user: &user,
    };
    security::endpoint_row(config, "kafka", &k.bootstrap_servers, started, endpoint).await
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

/// The closing line of `doctor --strict` when a row is a warning (a plaintext or unverified
/// connection in production, an insecure Redis, a partitioning that disagrees).
pub fn warnings(rows: &[CheckRow]) -> Option<String> {
    let warned: Vec<String> = rows
        .iter()
        .filter(|r| r.ok && r.warning)
        .map(|r| format!("{} ({})", r.service, r.target))
        .collect();
    (!warned.is_empty()).then(|| {
        format!(
            "--strict: {} warning(s): {}",
            warned.len(),
            warned.join(", ")
        )
    })
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
        // An unverified connection is said in red on a terminal (NO_COLOR respected).
        let red = r.detail.contains("NOT VERIFIED")
            && std::io::IsTerminal::is_terminal(&std::io::stdout())
            && std::env::var_os("NO_COLOR").is_none();
        let (on, off) = if red {
            ("\x1b[31m", "\x1b[0m")
        } else {
            ("", "")
        };
        out.push_str(&format!(
            "{on}{:<w_service$}  {:<w_target$}  {:<6}  {:>7.1}ms  {}{off}\n",
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
