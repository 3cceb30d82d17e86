//! Configuration: the documented defaults (`config/default.toml`, compiled in), then an optional
//! file, then `IDEMGUARD_<SECTION>__<KEY>` environment variables.
//!
//! The defaults file is also the list of valid keys: a key it does not contain is refused with
//! the nearest valid name, so a typo can never silently fall back to a default. Every error names
//! where the bad value came from (the file or the environment variable) and the key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The documented defaults, compiled in so the binary works from any directory.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "IDEMGUARD_CONFIG";
/// Prefix of per-key overrides: `IDEMGUARD_DATABASE__URL`.
pub const ENV_PREFIX: &str = "IDEMGUARD_";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub environment: EnvironmentConfig,
    pub database: DatabaseConfig,
    pub redis: RedisConfig,
    pub kafka: KafkaConfig,
    pub lock: LockConfig,
    pub instance: InstanceConfig,
    pub idempotency: IdempotencyConfig,
    pub api: ApiConfig,
    pub consumer: ConsumerConfig,
    pub console: ConsoleConfig,
    pub trace: TraceConfig,
    pub retention: RetentionConfig,
    pub tables: TableNames,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    pub name: String,
    pub color: String,
    pub production: bool,
    pub allow_actions: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    pub url: String,
    pub replica_url: String,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    pub queries_dir: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    pub url: String,
    pub redlock_nodes: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub payment_topic: String,
    pub dlq_topic: String,
    pub trace_topic: String,
    pub consumer_group: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    Single,
    Redlock,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockConfig {
    pub mode: LockMode,
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    pub max_renewals: u32,
    pub acquire_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    pub drift_factor: f64,
    /// Fault-injection switch: false = the order service takes no request lock.
    pub request_lock: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    #[serde(with = "humantime_serde")]
    pub heartbeat_ttl: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyConfig {
    /// Fault-injection switch: false = no idempotency record, requests go straight to the order
    /// flow (the database layer is the only defense left).
    pub enabled: bool,
    pub biz_type: String,
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    pub retry_after_secs: u32,
    pub fast_path: bool,
    #[serde(with = "humantime_serde")]
    pub fast_path_ttl: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    pub listen: String,
    #[serde(with = "humantime_serde")]
    pub relay_interval: Duration,
    pub relay_batch: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    #[serde(with = "humantime_serde")]
    pub dedup_ttl: Duration,
    pub dedup_memory_entries: usize,
    pub batch_size: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    #[serde(with = "humantime_serde")]
    pub stuck_threshold: Duration,
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    pub operator: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    pub enabled: bool,
    pub buffer: usize,
    #[serde(with = "humantime_serde")]
    pub delivery_timeout: Duration,
}

/// How the running services delete what is past its retention (src/db/retention.rs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    pub batch: u32,
    #[serde(with = "humantime_serde")]
    pub outbox_sent: Duration,
}

/// Physical table names. Every SQL file refers to tables as `{{logical_name}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableNames {
    pub idempotency_record: String,
    pub order_record: String,
    pub inventory: String,
    pub stock_movement: String,
    pub payment_flow: String,
    pub outbox: String,
    pub points_ledger: String,
    pub notification: String,
    pub processed_event: String,
    pub ops_audit: String,
}

impl TableNames {
    /// (logical name, physical name) pairs, for templating SQL.
    pub fn pairs(&self) -> [(&'static str, &str); 10] {
        [
            ("idempotency_record", &self.idempotency_record),
            ("order_record", &self.order_record),
            ("inventory", &self.inventory),
            ("stock_movement", &self.stock_movement),
            ("payment_flow", &self.payment_flow),
            ("outbox", &self.outbox),
            ("points_ledger", &self.points_ledger),
            ("notification", &self.notification),
            ("processed_event", &self.processed_event),
            ("ops_audit", &self.ops_audit),
        ]
    }
}

/// A configuration error: where the value came from, the key, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file path, `environment variable IDEMGUARD_…`, or `built-in defaults`.
    pub origin: String,
    /// Dotted key, e.g. `database.url`; empty when the whole file is unreadable.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "config error in {}: {}", self.origin, self.message)
        } else {
            write!(f, "config error in {}: key `{}`: {}", self.origin, self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// `--config FILE`; falls back to `$IDEMGUARD_CONFIG`.
    pub file: Option<PathBuf>,
    /// Environment variables to apply (normally `std::env::vars()`).
    pub env: Vec<(String, String)>,
}

impl ConfigSource {
    /// The process's environment, with the file from `--config` or `$IDEMGUARD_CONFIG`.
    pub fn from_process(file: Option<PathBuf>) -> Self {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let file = file.or_else(|| {
            env.iter().find(|(k, _)| k == CONFIG_ENV).filter(|(_, v)| !v.is_empty()).map(|(_, v)| PathBuf::from(v))
        });
        ConfigSource { file, env }
    }
}

impl Config {
    /// Load the layered configuration and validate it.
    pub fn load(source: &ConfigSource) -> Result<Config, ConfigError> {
        let mut origins: BTreeMap<String, String> = BTreeMap::new();
        let defaults: toml::Table = DEFAULT_TOML.parse().map_err(|e: toml::de::Error| ConfigError {
            origin: "built-in defaults".into(),
            key: String::new(),
            message: e.to_string(),
        })?;
        let mut merged = defaults.clone();

        if let Some(path) = &source.file {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                origin: origin.clone(),
                key: String::new(),
                message: format!("cannot read the file: {e}"),
            })?;
            let file: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
                origin: origin.clone(),
                key: String::new(),
                message: format!("not valid TOML: {}", e.message()),
            })?;
            overlay(&defaults, &mut merged, &file, "", &origin, &mut origins)?;
        }

        for (name, value) in &source.env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else { continue };
            if !rest.contains("__") {
                continue; // IDEMGUARD_CONFIG and other non-override variables
            }
            let key = rest.split("__").map(|s| s.to_ascii_lowercase()).collect::<Vec<_>>().join(".");
            let origin = format!("environment variable {name}");
            let existing = lookup(&defaults, &key).ok_or_else(|| ConfigError {
                origin: origin.clone(),
                key: key.clone(),
                message: unknown_key_message(&defaults, &key),
            })?;
            let parsed = parse_env_value(value, existing);
            set(&mut merged, &key, parsed);
            origins.insert(key, origin);
        }

        let config: Config = serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|e| {
            let key = e.path().to_string();
            let origin = origin_of(&origins, &key);
            ConfigError { origin, key, message: e.into_inner().message().to_string() }
        })?;
        config.validate(&origins)?;
        Ok(config)
    }

    /// Defaults only (tests, and tools that need no file).
    pub fn defaults() -> Config {
        Config::load(&ConfigSource::default()).expect("the built-in defaults are valid")
    }

    fn validate(&self, origins: &BTreeMap<String, String>) -> Result<(), ConfigError> {
        let err = |key: &str, message: String| ConfigError { origin: origin_of(origins, key), key: key.into(), message };

        check_url(&self.database.url, &["postgres", "postgresql", "mysql", "mariadb"])
            .map_err(|m| err("database.url", m))?;
        if !self.database.replica_url.is_empty() {
            check_url(&self.database.replica_url, &["postgres", "postgresql", "mysql", "mariadb"])
                .map_err(|m| err("database.replica_url", m))?;
            if Dialect::of_url(&self.database.replica_url) != Dialect::of_url(&self.database.url) {
                return Err(err("database.replica_url", "the replica must be the same kind of database as database.url".into()));
            }
        }
        if self.database.max_connections == 0 {
            return Err(err("database.max_connections", "must be at least 1".into()));
        }
        check_url(&self.redis.url, &["redis", "rediss"]).map_err(|m| err("redis.url", m))?;
        for (i, node) in self.redis.redlock_nodes.iter().enumerate() {
            check_url(node, &["redis", "rediss"]).map_err(|m| err("redis.redlock_nodes", format!("node {}: {m}", i + 1)))?;
        }
        if self.lock.mode == LockMode::Redlock && self.redis.redlock_nodes.len() < 3 {
            return Err(err(
                "lock.mode",
                format!(
                    "redlock needs at least 3 nodes in redis.redlock_nodes, {} given",
                    self.redis.redlock_nodes.len()
                ),
            ));
        }
        for server in self.kafka.bootstrap_servers.split(',') {
            let server = server.trim();
            let ok = server.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(err(
                    "kafka.bootstrap_servers",
                    format!("`{server}` is not host:port (expected e.g. 127.0.0.1:9092)"),
                ));
            }
        }
        for (key, topic) in [
            ("kafka.payment_topic", &self.kafka.payment_topic),
            ("kafka.dlq_topic", &self.kafka.dlq_topic),
            ("kafka.trace_topic", &self.kafka.trace_topic),
        ] {
            let ok = !topic.is_empty()
                && topic.len() <= 249
                && topic.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                return Err(err(key, format!("`{topic}` is not a valid Kafka topic name (letters, digits, . _ -)")));
            }
        }
        for (key, d) in [
            ("lock.ttl", self.lock.ttl),
            ("instance.heartbeat_ttl", self.instance.heartbeat_ttl),
            ("idempotency.lease", self.idempotency.lease),
            ("idempotency.retention", self.idempotency.retention),
            ("consumer.dedup_ttl", self.consumer.dedup_ttl),
            ("console.refresh", self.console.refresh),
        ] {
            if d.is_zero() {
                return Err(err(key, "must be longer than zero".into()));
            }
        }
        if self.lock.ttl < Duration::from_millis(30) {
            return Err(err("lock.ttl", "must be at least 30ms (the watchdog renews every ttl/3)".into()));
        }
        if self.lock.acquire_attempts == 0 {
            return Err(err("lock.acquire_attempts", "must be at least 1".into()));
        }
        if !(0.0..0.5).contains(&self.lock.drift_factor) {
            return Err(err("lock.drift_factor", "must be between 0 and 0.5".into()));
        }
        if self.idempotency.retention <= self.idempotency.lease {
            return Err(err("idempotency.retention", "must be longer than idempotency.lease".into()));
        }
        if self.api.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(err("api.listen", format!("`{}` is not an address like 127.0.0.1:8080", self.api.listen)));
        }
        if self.api.relay_batch == 0 || self.api.relay_interval.is_zero() {
            return Err(err("api.relay_batch", "the relay needs a batch of at least 1 and an interval above zero".into()));
        }
        if self.trace.buffer == 0 {
            return Err(err("trace.buffer", "must be at least 1".into()));
        }
        if self.consumer.batch_size == 0 {
            return Err(err("consumer.batch_size", "must be at least 1".into()));
        }
        if self.retention.interval.is_zero() || self.retention.outbox_sent.is_zero() {
            return Err(err("retention.interval", "retention.interval and retention.outbox_sent must be longer than zero".into()));
        }
        if self.retention.batch == 0 {
            return Err(err("retention.batch", "must be at least 1".into()));
        }
        // The fault-injection switches exist to show the database as the last line; a production
        // environment must never run with a line of defense switched off.
        if self.environment.production {
            for (key, on) in [
                ("idempotency.enabled", self.idempotency.enabled),
                ("idempotency.fast_path", self.idempotency.fast_path),
                ("lock.request_lock", self.lock.request_lock),
            ] {
                if !on {
                    return Err(err(key, "is a fault-injection switch and may not be off when environment.production = true".into()));
                }
            }
        }
        const COLORS: [&str; 6] = ["green", "yellow", "red", "blue", "magenta", "cyan"];
        if !COLORS.contains(&self.environment.color.as_str()) {
            return Err(err("environment.color", format!("`{}` is not one of {}", self.environment.color, COLORS.join(", "))));
        }
        for (logical, physical) in self.tables.pairs() {
            let ok = !physical.is_empty()
                && physical.len() <= 64
                && physical.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && physical.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(err(
                    &format!("tables.{logical}"),
                    format!("`{physical}` is not a plain SQL identifier (letters, digits, underscores)"),
                ));
            }
        }
        Ok(())
    }

    /// The database dialect of `database.url`.
    pub fn dialect(&self) -> Dialect {
        Dialect::of_url(&self.database.url)
    }

    /// The effective configuration as TOML, passwords replaced by `***`.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        shown.database.url = redact_url(&shown.database.url);
        shown.database.replica_url = redact_url(&shown.database.replica_url);
        shown.redis.url = redact_url(&shown.redis.url);
        shown.redis.redlock_nodes = shown.redis.redlock_nodes.iter().map(|u| redact_url(u)).collect();
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render configuration: {e}"))
    }

    /// The operator's name for audit rows: `console.operator`, else `$USER`, else `unknown`.
    pub fn operator(&self) -> String {
        if !self.console.operator.is_empty() {
            return self.console.operator.clone();
        }
        std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "unknown".into())
    }
}

/// The two SQL dialects idemguard speaks. The SQL itself lives in `queries/<dialect>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    pub fn of_url(url: &str) -> Dialect {
        if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            Dialect::Mysql
        } else {
            Dialect::Postgres
        }
    }

    /// Directory name under `queries/`.
    pub fn dir(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::Mysql => "MySQL/MariaDB",
        })
    }
}

/// A URL with its password replaced by `***`; anything unparsable is shown as `<unparsable url>`
/// rather than risking a password in a log.
pub fn redact_url(raw: &str) -> String {
    if raw.is_empty() {
        return String::new();
    }
    match url::Url::parse(raw) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "<unparsable url>".into(),
    }
}

/// `host:port` of a URL, for error rows and hints.
pub fn host_port(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(u) => format!("{}:{}", u.host_str().unwrap_or("?"), u.port_or_known_default().map_or("?".into(), |p| p.to_string())),
        Err(_) => "<unparsable url>".into(),
    }
}

fn check_url(raw: &str, schemes: &[&str]) -> Result<(), String> {
    let u = url::Url::parse(raw).map_err(|e| format!("`{}` is not a URL: {e}", redact_url(raw)))?;
    if !schemes.contains(&u.scheme()) {
        return Err(format!(
            "`{}` has scheme `{}`; expected {}",
            redact_url(raw),
            u.scheme(),
            schemes.iter().map(|s| format!("{s}://")).collect::<Vec<_>>().join(" or ")
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{}` has no host", redact_url(raw)));
    }
    Ok(())
}

/// Lays `file` over `merged`, refusing keys the defaults do not have.
fn overlay(
    defaults: &toml::Table,
    merged: &mut toml::Table,
    file: &toml::Table,
    prefix: &str,
    origin: &str,
    origins: &mut BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (k, v) in file {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        let Some(default) = lookup(defaults, &key) else {
            return Err(ConfigError { origin: origin.into(), key: key.clone(), message: unknown_key_message(defaults, &key) });
        };
        match (default, v) {
            (toml::Value::Table(_), toml::Value::Table(sub)) => overlay(defaults, merged, sub, &key, origin, origins)?,
            (toml::Value::Table(_), _) => {
                return Err(ConfigError { origin: origin.into(), key, message: "is a section: write it as [section]".into() })
            }
            _ => {
                set(merged, &key, v.clone());
                origins.insert(key, origin.into());
            }
        }
    }
    Ok(())
}

fn lookup<'a>(table: &'a toml::Table, dotted: &str) -> Option<&'a toml::Value> {
    let mut parts = dotted.split('.');
    let mut current = table.get(parts.next()?)?;
    for p in parts {
        current = current.as_table()?.get(p)?;
    }
    Some(current)
}

fn set(table: &mut toml::Table, dotted: &str, value: toml::Value) {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut current = table;
    for p in parts {
        current = current
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .as_table_mut()
            .expect("sections are tables");
    }
    current.insert(last.to_string(), value);
}

/// An environment value takes the type of the default it replaces: strings stay strings
/// (a URL is never parsed as TOML), numbers and booleans are parsed, lists are comma-separated
/// or a TOML array.
fn parse_env_value(raw: &str, default: &toml::Value) -> toml::Value {
    let as_toml = || format!("v = {raw}").parse::<toml::Table>().ok().and_then(|mut t| t.remove("v"));
    match default {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Array(_) => {
            if raw.trim_start().starts_with('[') {
                if let Some(v) = as_toml() {
                    return v;
                }
            }
            toml::Value::Array(
                raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| toml::Value::String(s.into())).collect(),
            )
        }
        _ => as_toml().unwrap_or_else(|| toml::Value::String(raw.to_string())),
    }
}

fn origin_of(origins: &BTreeMap<String, String>, key: &str) -> String {
    // The most specific key that was set, else the section, else the defaults.
    let mut k = key.to_string();
    loop {
        if let Some(o) = origins.get(&k) {
            return o.clone();
        }
        match k.rfind('.') {
            Some(i) => k.truncate(i),
            None => return "built-in defaults".into(),
        }
    }
}

fn unknown_key_message(defaults: &toml::Table, key: &str) -> String {
    let mut all = Vec::new();
    collect_keys(defaults, "", &mut all);
    let best = all.iter().map(|k| (strsim::levenshtein(k, key), k)).min();
    match best {
        Some((d, k)) if d <= 3 => format!("unknown setting (did you mean `{k}`?)"),
        _ => "unknown setting (config/default.toml lists every valid key)".into(),
    }
}

fn collect_keys(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        if let toml::Value::Table(t) = v {
            collect_keys(t, &key, out);
        } else {
            out.push(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_with(file_text: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = file_text.map(|t| {
            let p = dir.path().join("test.toml");
            std::fs::write(&p, t).unwrap();
            p
        });
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::load(&ConfigSource { file, env })
    }

    #[test]
    fn defaults_load_and_validate() {
        let c = Config::defaults();
        assert_eq!(c.lock.ttl, Duration::from_secs(30));
        assert_eq!(c.idempotency.retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(c.dialect(), Dialect::Postgres);
    }

    #[test]
    fn local_file_points_at_the_stack() {
        let c = load_with(Some(include_str!("../config/local.toml")), &[]).unwrap();
        assert_eq!(c.redis.redlock_nodes.len(), 5);
        assert_eq!(c.kafka.bootstrap_servers, "127.0.0.1:9092");
    }

    #[test]
    fn typo_key_is_refused_with_suggestion() {
        let e = load_with(Some("[database]\nurll = \"postgres://x@h/db\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "database.urll");
        assert!(e.origin.ends_with("test.toml"), "{e}");
        assert!(e.message.contains("did you mean `database.url`"), "{e}");
    }

    #[test]
    fn bad_url_is_refused_naming_key_and_file() {
        let e = load_with(Some("[database]\nurl = \"sqlite://foo\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "database.url");
        assert!(e.origin.ends_with("test.toml"));
        assert!(e.to_string().contains("expected postgres://"), "{e}");
    }

    #[test]
    fn bad_duration_names_the_key() {
        let e = load_with(Some("[lock]\nttl = \"3 fortnights\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "lock.ttl");
        assert!(e.origin.ends_with("test.toml"));
    }

    #[test]
    fn environment_overrides_file_and_is_named_in_errors() {
        let c = load_with(
            Some("[lock]\nttl = \"10s\"\n"),
            &[("IDEMGUARD_LOCK__TTL", "2s"), ("IDEMGUARD_REDIS__REDLOCK_NODES", "redis://a:1, redis://b:2,redis://c:3")],
        )
        .unwrap();
        assert_eq!(c.lock.ttl, Duration::from_secs(2));
        assert_eq!(c.redis.redlock_nodes, vec!["redis://a:1", "redis://b:2", "redis://c:3"]);

        let e = load_with(None, &[("IDEMGUARD_DATABASE__MAX_CONNECTIONS", "lots")]).unwrap_err();
        assert_eq!(e.origin, "environment variable IDEMGUARD_DATABASE__MAX_CONNECTIONS");
        assert_eq!(e.key, "database.max_connections");

        let e = load_with(None, &[("IDEMGUARD_DATABSE__URL", "postgres://h/d")]).unwrap_err();
        assert_eq!(e.key, "databse.url");
        assert!(e.message.contains("did you mean `database.url`"), "{e}");
    }

    #[test]
    fn passwords_are_never_shown() {
        let c = load_with(None, &[("IDEMGUARD_DATABASE__URL", "postgres://app:s3cret@db:5432/orders")]).unwrap();
        let shown = c.to_redacted_toml();
        assert!(!shown.contains("s3cret"));
        assert!(shown.contains("app:***@db"));
        let e = load_with(None, &[("IDEMGUARD_DATABASE__URL", "ftp://app:s3cret@db/x")]).unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn fault_switches_are_refused_in_production() {
        let c = load_with(Some("[idempotency]\nenabled = false\nfast_path = false\n[lock]\nrequest_lock = false\n"), &[]).unwrap();
        assert!(!c.idempotency.enabled && !c.idempotency.fast_path && !c.lock.request_lock);
        let e = load_with(Some("[environment]\nproduction = true\n[idempotency]\nenabled = false\n"), &[]).unwrap_err();
        assert_eq!(e.key, "idempotency.enabled");
        assert!(e.message.contains("fault-injection"), "{e}");
        let e = load_with(None, &[("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true"), ("IDEMGUARD_LOCK__REQUEST_LOCK", "false")]).unwrap_err();
        assert_eq!(e.key, "lock.request_lock");
    }

    #[test]
    fn table_names_must_be_identifiers() {
        let e = load_with(Some("[tables]\norder_record = \"orders; drop table x\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "tables.order_record");
    }

    #[test]
    fn unreadable_toml_names_the_file() {
        let e = load_with(Some("[database\nurl="), &[]).unwrap_err();
        assert!(e.origin.ends_with("test.toml"));
        assert!(e.message.starts_with("not valid TOML"));
    }
}
