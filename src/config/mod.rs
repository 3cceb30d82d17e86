//! Configuration: the schema every part of idemguard reads — one struct per `[section]` of
//! `config/default.toml`, with the values they hold (lock mode, dialect, partitioner, lock
//! decoders) defined here, below every layer that uses them, so that the configuration imports
//! from no other module.
//!
//! How it is filled and checked lives beside it, one concept per file: `load.rs` (defaults, file,
//! environment, and where each value came from), `validate.rs` (what a loaded configuration must
//! meet), `profile.rs` (the source profile), `target.rs` (what `redis.url` names), `redact.rs`
//! (what is shown of a URL or a secret), `secrets.rs` (password files, the secrets the log writer
//! scrubs), `operator.rs` (the operator's name). Their public items are re-exported here:
//! `crate::config::X` is the one path to each.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod load;
mod operator;
mod profile;
mod redact;
mod secrets;
mod target;
mod validate;

pub use load::{ConfigSource, CONFIG_ENV, CONTEXT_ENV, DEFAULT_CONTEXT, DEFAULT_TOML, ENV_PREFIX};
pub use profile::{
    SourceProfile, SourceTable, StatusKind, TimeStorage, ABSENT, CONSOLE_TABLES, OWN_TABLES,
};
pub use redact::{host_port, is_secret_property, redact_url, redact_urls_in};
pub use secrets::{
    read_bounded_file, read_secret_file, MAX_CERTIFICATE_FILE_BYTES, MAX_SECRET_FILE_BYTES,
};
pub use target::RedisTarget;
pub use validate::{KAFKA_OWN_PROPERTIES, UNMASKABLE_COLUMNS};

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
    pub metrics: MetricsConfig,
    pub tables: TableNames,
    pub source: SourceProfile,
    pub foreign_locks: ForeignLocksConfig,
    pub kafka_ids: KafkaIdsConfig,
    pub logs: LogsConfig,
    pub mask: MaskConfig,
    /// The context of the file this configuration is (`--context`); `None` when the file has no
    /// `[contexts]`.
    #[serde(skip)]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    pub name: String,
    pub color: String,
    pub production: bool,
    /// In production, the connections accepted without verified TLS: `database`, `redis`,
    /// `kafka`.
    pub allow_unverified: Vec<String>,
    pub allow_actions: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    pub url: String,
    pub replica_url: String,
    /// The actions' own credentials; empty = `url`.
    pub actions_url: String,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// The server-side bound of every statement of the services' sessions (`0s`: none).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// The bound of every statement of the read faces' sessions (console, its twins, report,
    /// doctor), server-side and client-side: [`Config::for_reads`].
    #[serde(with = "humantime_serde")]
    pub read_timeout: Duration,
    pub queries_dir: String,
    // Credentials kept off the command line (docs/production.md); TLS is set by
    // the URLs' own parameters (sslmode, sslrootcert… / ssl-mode, ssl-ca…).
    /// A file holding the password of `url` and `replica_url`, for URLs that carry none.
    pub password_file: String,
    /// A file holding the password of `actions_url`, when it carries none.
    pub actions_password_file: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// One node (`redis://…`) or a Redis Cluster by its seed nodes
    /// (`redis+cluster://host:port,host:port`): read it through [`RedisTarget::parse`].
    pub url: String,
    pub redlock_nodes: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    // How every `rediss://` connection (main, cluster, RedLock nodes) is secured.
    /// PEM file of the CA(s) the servers are verified against (intermediates may be included);
    /// empty: the platform's roots.
    pub tls_ca_file: String,
    /// Client certificate and key (PEM) for mutual TLS; both or neither.
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// Accept any server certificate (no verification): only when asked for by name; `doctor`
    /// says so in red.
    pub tls_insecure: bool,
    /// A file holding the password of every Redis URL that carries none (the URL names the
    /// ACL user).
    pub password_file: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub payment_topic: String,
    pub dlq_topic: String,
    pub trace_topic: String,
    pub consumer_group: String,
    /// How the producers of the payment and trace topics pick a partition for a key, so the
    /// console reads only the partition of an order (`none`: read every partition).
    pub partitioner: Partitioner,
    // How every librdkafka client reaches the brokers (src/kafka_client.rs).
    pub security_protocol: KafkaSecurityProtocol,
    pub sasl_mechanism: SaslMechanism,
    pub sasl_username: String,
    pub sasl_password: String,
    pub sasl_password_file: String,
    pub ssl_ca_file: String,
    pub ssl_cert_file: String,
    pub ssl_key_file: String,
    pub ssl_key_password: String,
    pub ssl_key_password_file: String,
    /// Any other librdkafka property, passed as written (`kcat -X`): `[kafka.client]`.
    #[serde(deserialize_with = "client_properties")]
    pub client: BTreeMap<String, String>,
}

/// How the producers of the payment and trace topics choose a partition for a keyed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    /// librdkafka's default: `crc32(key) % partitions`.
    ConsistentRandom,
    /// The Java client's default (librdkafka `murmur2_random`):
    /// `(murmur2(key) & 0x7fffffff) % partitions`.
    Murmur2Random,
    /// Unknown: the partition of a key cannot be computed; every partition is read.
    None,
}

// The partition of a key (`partition_of`) is computed with the hashes, in stream/partitioner.rs.
impl Partitioner {
    /// How configuration names it.
    pub fn name(self) -> &'static str {
        match self {
            Partitioner::ConsistentRandom => "consistent_random",
            Partitioner::Murmur2Random => "murmur2_random",
            Partitioner::None => "none",
        }
    }
}

/// `kafka.security_protocol`, librdkafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum KafkaSecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl KafkaSecurityProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaSecurityProtocol::Plaintext => "PLAINTEXT",
            KafkaSecurityProtocol::Ssl => "SSL",
            KafkaSecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            KafkaSecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn tls(self) -> bool {
        matches!(
            self,
            KafkaSecurityProtocol::Ssl | KafkaSecurityProtocol::SaslSsl
        )
    }

    pub fn sasl(self) -> bool {
        matches!(
            self,
            KafkaSecurityProtocol::SaslPlaintext | KafkaSecurityProtocol::SaslSsl
        )
    }
}

/// `kafka.sasl_mechanism`, librdkafka's `sasl.mechanism` (used with the SASL protocols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// `[kafka.client]` as librdkafka names its properties: `"socket.keepalive.enable" = true` and
/// the unquoted `socket.keepalive.enable = true` (a nested table to TOML) both give
/// `socket.keepalive.enable`; numbers and booleans become their text.
fn client_properties<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    fn flatten(
        prefix: &str,
        table: &toml::Table,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        for (k, v) in table {
            let name = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => flatten(&name, t, out)?,
                toml::Value::String(s) => drop(out.insert(name, s.clone())),
                toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                    drop(out.insert(name, v.to_string()))
                }
                _ => {
                    return Err(format!(
                        "`{name}`: a property is a string, number or boolean"
                    ))
                }
            }
        }
        Ok(())
    }
    let table = toml::Table::deserialize(d)?;
    let mut out = BTreeMap::new();
    flatten("", &table, &mut out).map_err(serde::de::Error::custom)?;
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    Single,
    Redlock,
}

impl LockMode {
    /// How configuration, output and JSON name it.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Single => "single",
            LockMode::Redlock => "redlock",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// How long a fence counter outlives the last lock taken or renewed on its key.
    #[serde(with = "humantime_serde")]
    pub fence_ttl: Duration,
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
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    #[serde(with = "humantime_serde")]
    pub dedup_ttl: Duration,
    pub dedup_memory_entries: usize,
    /// Messages per batch when the consumer keeps up (and the first batch after a start).
    pub batch_size: usize,
    /// Ceiling of the adaptive batch: a full batch doubles the next one up to this size; a batch
    /// that comes up short returns to `batch_size`. At or below `batch_size`: fixed batches.
    pub batch_size_max: usize,
    /// Write the points and notification sinks of a batch as two concurrent transactions.
    pub concurrent_sinks: bool,
    /// Run a batch's offset commit (still only after its database commit) while the next batch
    /// is received and looked up; its answer is awaited before that batch writes anything, and
    /// a refusal ends `consume`. Off: each commit is awaited right after its batch.
    pub async_offset_commit: bool,
    /// A payment message larger than this (key, payload and headers) is poison, kept only as
    /// an excerpt: its payload is never copied whole.
    pub max_message_bytes: usize,
    /// The largest message the DLQ topic takes (its `max.message.bytes`): the DLQ producer's
    /// `message.max.bytes`, and what a record of a poison message is cut to fit.
    pub dlq_max_message_bytes: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    #[serde(with = "humantime_serde")]
    pub stuck_threshold: Duration,
    /// A trace reads each topic only in `[t − margin, t + margin]` around the times its
    /// database rows carry (`console/read/window.rs`).
    #[serde(with = "humantime_serde")]
    pub trace_margin: Duration,
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    pub operator: String,
    pub log_file: String,
    /// Where `:report` writes; empty: the user's data directory (see
    /// `console::report::report_dir`).
    pub report_dir: String,
    /// A step whose time the rows do not carry (the payment of an order whose table has only
    /// `created_at`) is searched this far forward from the last time they do carry.
    #[serde(with = "humantime_serde")]
    pub forward_search: Duration,
    /// A lock value held longer than this is flagged `held_long`; 0s: 10 × `lock.ttl`.
    #[serde(with = "humantime_serde")]
    pub lock_held_warning: Duration,
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

/// The Prometheus exposition of `serve` and `consume` (src/metrics/).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of `/metrics`; empty: no exposition.
    pub listen: String,
    /// How often `serve` counts PROCESSING records and unpublished outbox rows.
    #[serde(with = "humantime_serde")]
    pub refresh_interval: Duration,
    /// How often `serve` runs the leak queries, over the rows created in the last `leak_window`.
    #[serde(with = "humantime_serde")]
    pub leak_check_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub leak_window: Duration,
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

/// Which Redis keys are locks, and how their values are read: idemguard's own, Redisson's
/// hashes, other tools' plain tokens (`src/lock/formats.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForeignLocksConfig {
    /// SCAN MATCH patterns listed as locks, in order.
    pub patterns: Vec<String>,
    /// Decoders tried in order on each key: `idemguard`, `redisson`, `token`.
    pub decoders: Vec<Decoder>,
    /// The Redis the console's actions (release scripts) connect to, with their own
    /// credentials; empty: `redis.url`.
    pub actions_redis_url: String,
}

/// One way a lock's value can be read, as `foreign_locks.decoders` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decoder {
    Idemguard,
    Redisson,
    Token,
}

impl Decoder {
    /// Every decoder, in the default order.
    pub const ALL: [Decoder; 3] = [Decoder::Idemguard, Decoder::Redisson, Decoder::Token];
}

/// Where a topic's messages carry the orderNo, requestId and eventId: each a list of places
/// tried in order, `header:NAME`, `json:/POINTER` (into the JSON body) or `key`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicIds {
    pub order_no: Vec<String>,
    pub request_id: Vec<String>,
    pub event_id: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaIdsConfig {
    /// The payment topic and its DLQ.
    pub payment: TopicIds,
}

/// JSON-lines logs as a trace source (`src/console/read/logs.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsConfig {
    /// File globs; rotated and `.gz` files included when a glob matches them.
    pub files: Vec<String>,
    /// A Kafka topic the logs are shipped to; empty: none.
    pub topic: String,
    pub time_field: String,
    pub service_field: String,
    pub level_field: String,
    pub message_field: String,
    pub order_no_field: String,
    pub request_id_field: String,
    pub event_id_field: String,
    /// Bytes read of one file at most (decompressed), of all files of one trace, and the
    /// longest line kept (`src/console/read/logs.rs`).
    pub max_file_bytes: u64,
    pub max_trace_bytes: u64,
    pub max_line_bytes: usize,
}

/// Fields masked in every face (`src/mask.rs`): what operators of a payment system need not see.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskConfig {
    /// Database columns by their logical name (`user_id`: in every table that has one) or as
    /// `table.column` (`notification.body`).
    pub columns: Vec<String>,
    /// JSON pointers into the payment topic's message bodies (`/pay_no`).
    pub kafka_json: Vec<String>,
    /// JSON pointers into the log lines read as a trace source (`/message`).
    pub log_json: Vec<String>,
    /// Columns masked as well when `environment.production = true`.
    pub production_columns: Vec<String>,
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
            write!(
                f,
                "config error in {}: key `{}`: {}",
                self.origin, self.key, self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The configuration the operator's actions run with: the Redis of
    /// `foreign_locks.actions_redis_url` (their own credentials, allowed the release scripts)
    /// when set, so the console itself can read as a read-only ACL user.
    pub fn for_actions(&self) -> Config {
        let mut c = self.clone();
        if !c.foreign_locks.actions_redis_url.is_empty() {
            c.redis.url = c.foreign_locks.actions_redis_url.clone();
        }
        c
    }

    /// The configuration the read faces run with — the console, `trace`, `locks`, `stuck`,
    /// `report`, `doctor` (`profile suggest`, with its own `--deadline`): every statement of
    /// their sessions bounded by `database.read_timeout` instead of the services'
    /// `database.statement_timeout`, so a read behind a locked table gives up (and leaves no
    /// statement queued on the lock) in seconds.
    pub fn for_reads(&self) -> Config {
        let mut c = self.clone();
        c.database.statement_timeout = c.database.read_timeout;
        c
    }

    /// The database dialect of `database.url`.
    pub fn dialect(&self) -> Dialect {
        Dialect::of_url(&self.database.url)
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
