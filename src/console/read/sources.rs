//! The four sources every face of the console reads — the database, Redis, the trace topic and
//! the payment topic — named once, with where they point (passwords hidden), how long one round
//! of a read may take, and how a face says how each answered ([`BackendStatus`]).
//!
//! The TUI's collectors and the one-shot CLI twins both depend on this file; neither depends on
//! the other.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{host_port, redact_url, Config};
use crate::db::Database;

/// One database or Redis round of a read may take this long before its source counts as down.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections the console's database pool may hold (reads only).
pub const DB_CONNECTIONS: u32 = 4;

/// The environment the sources belong to, as every document and report names it.
#[derive(Debug, Clone, Serialize)]
pub struct EnvironmentInfo {
    pub name: String,
    pub color: String,
    pub production: bool,
    /// The config file's context these sources are (`--context`), when it has contexts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

impl EnvironmentInfo {
    pub fn of(config: &Config) -> EnvironmentInfo {
        EnvironmentInfo {
            name: config.environment.name.clone(),
            color: config.environment.color.clone(),
            production: config.environment.production,
            context: config.context.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendId {
    Database,
    Redis,
    TraceTopic,
    PaymentTopic,
    /// Read by the DLQ view only (not one of the sources every view polls: not in [`ALL`]).
    ///
    /// [`ALL`]: BackendId::ALL
    DlqTopic,
}

impl BackendId {
    pub const ALL: [BackendId; 4] = [
        BackendId::Database,
        BackendId::Redis,
        BackendId::TraceTopic,
        BackendId::PaymentTopic,
    ];

    /// In a production environment, how this backend's connection falls short: "PLAINTEXT" or
    /// "UNVERIFIED" (the console's health line says so in red); `None` otherwise.
    pub fn insecurity(self, config: &Config) -> Option<&'static str> {
        use crate::tls::Verification;
        if !config.environment.production {
            return None;
        }
        let v = match self {
            BackendId::Database => crate::tls::configured_database(&config.database.url),
            BackendId::Redis => crate::tls::redis_verification(&config.redis.url, &config.redis),
            BackendId::TraceTopic | BackendId::PaymentTopic | BackendId::DlqTopic => {
                crate::tls::kafka_verification(&config.kafka)
            }
        };
        match v {
            Verification::Plaintext => Some("PLAINTEXT"),
            Verification::Unverified(_) => Some("UNVERIFIED"),
            Verification::Verified { .. } => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendId::Database => "database",
            BackendId::Redis => "redis",
            BackendId::TraceTopic => "trace topic",
            BackendId::PaymentTopic => "payment topic",
            BackendId::DlqTopic => "dlq topic",
        }
    }

    /// Where it points, passwords hidden.
    pub fn target(self, config: &Config) -> String {
        match self {
            BackendId::Database => redact_url(if config.database.replica_url.is_empty() {
                &config.database.url
            } else {
                &config.database.replica_url
            }),
            BackendId::Redis => {
                let mut t = host_port(&config.redis.url);
                if !config.redis.redlock_nodes.is_empty() {
                    t.push_str(&format!(
                        " + {} redlock nodes",
                        config.redis.redlock_nodes.len()
                    ));
                }
                t
            }
            BackendId::TraceTopic => format!(
                "{} {}",
                config.kafka.bootstrap_servers, config.kafka.trace_topic
            ),
            BackendId::PaymentTopic => format!(
                "{} {}",
                config.kafka.bootstrap_servers, config.kafka.payment_topic
            ),
            BackendId::DlqTopic => format!(
                "{} {}",
                config.kafka.bootstrap_servers, config.kafka.dlq_topic
            ),
        }
    }
}

/// How one source answered a one-shot read (the `backends` of a headless document).
#[derive(Debug, Clone, Serialize)]
pub struct BackendStatus {
    pub name: &'static str,
    pub target: String,
    pub ok: bool,
    pub error: Option<String>,
    pub latency_ms: f64,
}

impl BackendStatus {
    /// `b` answered (`error` = `None`) or failed, `started` being when its read began.
    pub fn of(
        config: &Config,
        b: BackendId,
        started: Instant,
        error: Option<String>,
    ) -> BackendStatus {
        BackendStatus {
            name: b.name(),
            target: b.target(config),
            ok: error.is_none(),
            error,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        }
    }

    pub fn is(&self, b: BackendId) -> bool {
        self.name == b.name()
    }
}

/// A database pool for the console's reads (the replica when one is configured), small and
/// bounded by [`POLL_TIMEOUT`].
pub async fn connect_database(config: &Config) -> anyhow::Result<Database> {
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

/// Runs a blocking read (a topic read to its end) on a blocking thread.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow::anyhow!("reader thread failed: {e}"))?
}
