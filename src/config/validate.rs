//! The rules a loaded configuration must meet, checked once at start so that a value that
//! cannot work is refused with its key and where it came from — not discovered at the first
//! request, the first lock or the first message. Backends and their addresses, how each
//! connection is secured, the bounds of statements and batches, the environment's switches,
//! and what may be masked.

use std::time::Duration;

use super::target::{check_redis_url, check_url};
use super::{
    is_secret_property, read_secret_file, redact_urls_in, Config, ConfigError, Dialect, LockMode,
    MaskConfig, SourceProfile, CONSOLE_TABLES, OWN_TABLES,
};

impl Config {
    /// Every rule a loaded configuration must meet; `origin_of` says where a key's value came
    /// from (the file, an environment variable, the defaults), for the error to name it.
    pub(super) fn validate(&self, origin_of: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            origin: origin_of(key),
            key: key.into(),
            message,
        };
        self.validate_connections(&err)?;
        self.validate_security(&err)?;
        self.validate_statement_bounds(&err)?;
        self.validate_limits(&err)?;
        self.source.validate().map_err(|(k, m)| err(&k, m))?;
        self.mask
            .validate(&self.source)
            .map_err(|(k, m)| err(&k, m))?;
        self.validate_environment(&err)
    }

    /// The backends: the database, Redis and its RedLock nodes, Kafka and its topics, and how long
    /// each may take to answer — checked in that order, so the first error named is the same.
    fn validate_connections(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        self.validate_database(err)?;
        self.validate_redis(err)?;
        self.validate_kafka(err)?;
        self.validate_durations(err)
    }

    /// The database URL, its replica's and the actions' (the same kind of database), and the
    /// pool size.
    fn validate_database(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        check_url(
            &self.database.url,
            &["postgres", "postgresql", "mysql", "mariadb"],
        )
        .map_err(|m| err("database.url", m))?;
        if !self.database.replica_url.is_empty() {
            check_url(
                &self.database.replica_url,
                &["postgres", "postgresql", "mysql", "mariadb"],
            )
            .map_err(|m| err("database.replica_url", m))?;
            if Dialect::of_url(&self.database.replica_url) != Dialect::of_url(&self.database.url) {
                return Err(err(
                    "database.replica_url",
                    "the replica must be the same kind of database as database.url".into(),
                ));
            }
        }
        if !self.database.actions_url.is_empty() {
            check_url(
                &self.database.actions_url,
                &["postgres", "postgresql", "mysql", "mariadb"],
            )
            .map_err(|m| err("database.actions_url", m))?;
            if Dialect::of_url(&self.database.actions_url) != Dialect::of_url(&self.database.url) {
                return Err(err(
                    "database.actions_url",
                    "the actions must reach the same kind of database as database.url".into(),
                ));
            }
        }
        if self.database.max_connections == 0 {
            return Err(err("database.max_connections", "must be at least 1".into()));
        }
        Ok(())
    }

    /// The Redis URL, the actions' Redis URL, the RedLock nodes and their number.
    fn validate_redis(&self, err: &dyn Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        check_redis_url(&self.redis.url).map_err(|m| err("redis.url", m))?;
        let actions_url = &self.foreign_locks.actions_redis_url;
        if !actions_url.is_empty() {
            check_redis_url(actions_url).map_err(|m| err("foreign_locks.actions_redis_url", m))?;
        }
        for (i, node) in self.redis.redlock_nodes.iter().enumerate() {
            check_url(node, &["redis", "rediss"])
                .map_err(|m| err("redis.redlock_nodes", format!("node {}: {m}", i + 1)))?;
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
        Ok(())
    }

    /// The Kafka bootstrap servers (host:port, no credentials) and the topic names.
    fn validate_kafka(&self, err: &dyn Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        for server in self.kafka.bootstrap_servers.split(',') {
            let server = server.trim();
            // Credentials go to the client library's SASL settings, never into a server address
            // (which is shown by `doctor` and the console); the message does not echo them.
            if let Some((_, host)) = server.rsplit_once('@') {
                return Err(err(
                    "kafka.bootstrap_servers",
                    format!("`***@{host}` carries a user or password; give host:port only"),
                ));
            }
            let ok = server
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
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
            // The trace topic is optional: a team's system has none (the trace says so).
            let optional = key == "kafka.trace_topic" && topic.is_empty();
            let ok = optional
                || !topic.is_empty()
                    && topic.len() <= 249
                    && topic
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                return Err(err(
                    key,
                    format!("`{topic}` is not a valid Kafka topic name (letters, digits, . _ -)"),
                ));
            }
        }
        Ok(())
    }

    /// The leases, TTLs and refresh periods: each longer than zero.
    fn validate_durations(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        for (key, d) in [
            ("lock.ttl", self.lock.ttl),
            ("lock.fence_ttl", self.lock.fence_ttl),
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
        Ok(())
    }

    /// A secret file every user of the machine may read: refused in production, warned about
    /// elsewhere.
    fn secret_file_kept_private(
        &self,
        key: &str,
        file: &str,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if !super::secrets::readable_by_others(file) {
            return Ok(());
        }
        let what = format!("`{file}` is readable by every user of the machine: chmod 600 it");
        if self.environment.production {
            return Err(err(key, format!("{what} (refused in production)")));
        }
        tracing::warn!(setting = key, "{what}");
        Ok(())
    }

    /// How the connections are secured: every file named is readable, a certificate comes with
    /// its key, a secret has one source, TLS settings have a TLS URL or protocol to apply to,
    /// SASL has its user and password, `[kafka.client]` holds properties librdkafka knows.
    fn validate_security(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let (d, r, k) = (&self.database, &self.redis, &self.kafka);
        for (key, file) in [
            ("database.password_file", &d.password_file),
            ("database.actions_password_file", &d.actions_password_file),
            ("redis.password_file", &r.password_file),
            ("kafka.sasl_password_file", &k.sasl_password_file),
            ("kafka.ssl_key_password_file", &k.ssl_key_password_file),
        ] {
            if !file.is_empty() {
                read_secret_file(file).map_err(|m| err(key, m))?;
                self.secret_file_kept_private(key, file, err)?;
            }
        }
        for (key, file) in [
            ("redis.tls_ca_file", &r.tls_ca_file),
            ("redis.tls_cert_file", &r.tls_cert_file),
            ("redis.tls_key_file", &r.tls_key_file),
            ("kafka.ssl_ca_file", &k.ssl_ca_file),
            ("kafka.ssl_cert_file", &k.ssl_cert_file),
            ("kafka.ssl_key_file", &k.ssl_key_file),
        ] {
            if !file.is_empty() {
                super::secrets::read_bounded_file(file, super::secrets::MAX_CERTIFICATE_FILE_BYTES)
                    .map_err(|m| err(key, m))?;
            }
        }
        for (a, va, b, vb) in [
            (
                "redis.tls_cert_file",
                &r.tls_cert_file,
                "redis.tls_key_file",
                &r.tls_key_file,
            ),
            (
                "kafka.ssl_cert_file",
                &k.ssl_cert_file,
                "kafka.ssl_key_file",
                &k.ssl_key_file,
            ),
        ] {
            if va.is_empty() != vb.is_empty() {
                return Err(err(
                    a,
                    format!("a client certificate needs its key: set {a} and {b} together"),
                ));
            }
        }
        for (a, va, b, vb) in [
            (
                "kafka.sasl_password",
                &k.sasl_password,
                "kafka.sasl_password_file",
                &k.sasl_password_file,
            ),
            (
                "kafka.ssl_key_password",
                &k.ssl_key_password,
                "kafka.ssl_key_password_file",
                &k.ssl_key_password_file,
            ),
        ] {
            if !va.is_empty() && !vb.is_empty() {
                return Err(err(b, format!("{a} is set too: give the secret one way")));
            }
        }
        let redis_tls = r.tls_insecure
            || [&r.tls_ca_file, &r.tls_cert_file]
                .iter()
                .any(|f| !f.is_empty());
        let any_rediss = std::iter::once(&r.url)
            .chain(&r.redlock_nodes)
            .chain(std::iter::once(&self.foreign_locks.actions_redis_url))
            .any(|u| u.starts_with("rediss"));
        if redis_tls && !any_rediss {
            return Err(err(
                "redis.tls_ca_file",
                "redis.tls_* is set but no Redis URL uses TLS: write rediss:// (or rediss+cluster://)".into(),
            ));
        }
        self.validate_kafka_security(err)
    }

    fn validate_kafka_security(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let k = &self.kafka;
        let protocol = k.security_protocol.as_str();
        if !k.security_protocol.tls() {
            for (key, v) in [
                ("kafka.ssl_ca_file", &k.ssl_ca_file),
                ("kafka.ssl_cert_file", &k.ssl_cert_file),
            ] {
                if !v.is_empty() {
                    return Err(err(key, format!("is set but kafka.security_protocol = \"{protocol}\" does not use TLS: set SSL or SASL_SSL")));
                }
            }
        }
        if k.security_protocol.sasl() {
            if k.sasl_username.is_empty() {
                return Err(err(
                    "kafka.sasl_username",
                    format!("kafka.security_protocol = \"{protocol}\" needs the SASL user"),
                ));
            }
            if k.sasl_password.is_empty() && k.sasl_password_file.is_empty() {
                return Err(err("kafka.sasl_password", "the SASL user needs its password: IDEMGUARD_KAFKA__SASL_PASSWORD or kafka.sasl_password_file".into()));
            }
        }
        let mut check = rdkafka::ClientConfig::new();
        for (name, value) in &k.client {
            if let Some(why) = set_elsewhere(name) {
                return Err(err("kafka.client", format!("`{name}` {why}")));
            }
            check.set(name, value);
        }
        check.create_native_config().map_err(|e| {
            // librdkafka's message quotes the value: a secret property's is never shown.
            let mut shown = redact_urls_in(&e.to_string());
            for (name, value) in &k.client {
                if is_secret_property(name) && !value.is_empty() {
                    shown = shown.replace(value.as_str(), "***");
                }
            }
            err("kafka.client", format!("librdkafka refuses it: {shown}"))
        })?;
        Ok(())
    }

    /// Sizes, periods and limits that must be positive or ordered.
    /// How long a statement may take: the services' bound may be off (`0s`), a read's may not.
    fn validate_statement_bounds(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let (least, most) = (Duration::from_millis(100), Duration::from_secs(24 * 3600));
        let s = self.database.statement_timeout;
        if !s.is_zero() && !(least..=most).contains(&s) {
            return Err(err(
                "database.statement_timeout",
                "must be 0s (no bound) or between 100ms and 24h".into(),
            ));
        }
        if !(least..=Duration::from_secs(3600)).contains(&self.database.read_timeout) {
            return Err(err(
                "database.read_timeout",
                "must be between 100ms and 1h: every read of the console, its twins, report \
                 and doctor is bounded"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The bounds of the locks, the idempotency records, the API, the console, the trace, the
    /// logs, the consumer, the retention and the metrics — checked in that order, so the first
    /// error named is the same.
    fn validate_limits(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        self.validate_lock_limits(err)?;
        self.validate_api_limits(err)?;
        self.validate_console_limits(err)?;
        self.validate_pipeline_limits(err)
    }

    /// The lock's TTL, attempts and drift, and an idempotency record kept longer than its lease.
    fn validate_lock_limits(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if self.lock.ttl < Duration::from_millis(30) {
            return Err(err(
                "lock.ttl",
                "must be at least 30ms (the watchdog renews every ttl/3)".into(),
            ));
        }
        if self.lock.acquire_attempts == 0 {
            return Err(err("lock.acquire_attempts", "must be at least 1".into()));
        }
        if !(0.0..0.5).contains(&self.lock.drift_factor) {
            return Err(err("lock.drift_factor", "must be between 0 and 0.5".into()));
        }
        if self.idempotency.retention <= self.idempotency.lease {
            return Err(err(
                "idempotency.retention",
                "must be longer than idempotency.lease".into(),
            ));
        }
        Ok(())
    }

    /// The API's address, its outbox relay, its read timeouts and its connection cap.
    fn validate_api_limits(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if self.api.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(err(
                "api.listen",
                format!(
                    "`{}` is not an address like 127.0.0.1:8080",
                    self.api.listen
                ),
            ));
        }
        if self.api.relay_batch == 0 || self.api.relay_interval.is_zero() {
            return Err(err(
                "api.relay_batch",
                "the relay needs a batch of at least 1 and an interval above zero".into(),
            ));
        }
        if self.api.header_read_timeout.is_zero()
            || self.api.body_read_timeout.is_zero()
            || self.api.idle_timeout.is_zero()
        {
            return Err(err("api.header_read_timeout", "the read timeouts must be above zero: a slow client would hold a connection for ever".into()));
        }
        if self.api.max_connections == 0 || self.api.max_connections > u32::MAX as usize >> 3 {
            return Err(err(
                "api.max_connections",
                "must be between 1 and 536870911".into(),
            ));
        }
        Ok(())
    }

    /// The console's trace margin, forward search and lock-held warning.
    fn validate_console_limits(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if self.console.trace_margin < Duration::from_secs(1)
            || self.console.trace_margin > Duration::from_secs(24 * 3600)
        {
            return Err(err(
                "console.trace_margin",
                "must be between 1s and 24h (a trace reads [t - margin, t + margin] around each \
                 time its database rows carry)"
                    .into(),
            ));
        }
        if self.console.forward_search > Duration::from_secs(7 * 24 * 3600) {
            return Err(err(
                "console.forward_search",
                "must be at most 7days (each hour of it is read from every partition the trace reads)"
                    .into(),
            ));
        }
        if !self.console.lock_held_warning.is_zero()
            && self.console.lock_held_warning < self.lock.ttl
        {
            return Err(err(
                "console.lock_held_warning",
                "must be 0s (10 × lock.ttl) or at least lock.ttl (a lock is held up to its TTL \
                 without renewal)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The trace buffer, the log budgets, the consumer's message sizes and batch, the retention
    /// and the metrics' periods.
    fn validate_pipeline_limits(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if self.trace.buffer == 0 {
            return Err(err("trace.buffer", "must be at least 1".into()));
        }
        let logs = &self.logs;
        if logs.max_line_bytes < 1024
            || logs.max_file_bytes < logs.max_line_bytes as u64
            || logs.max_trace_bytes < logs.max_file_bytes
        {
            return Err(err(
                "logs.max_line_bytes",
                "the log budgets must be ordered: 1024 <= logs.max_line_bytes <= \
                 logs.max_file_bytes <= logs.max_trace_bytes"
                    .into(),
            ));
        }
        for (key, bytes) in [
            (
                "consumer.max_message_bytes",
                self.consumer.max_message_bytes,
            ),
            (
                "consumer.dlq_max_message_bytes",
                self.consumer.dlq_max_message_bytes,
            ),
        ] {
            if !(1_000..=100_000_000).contains(&bytes) {
                return Err(err(key, "must be between 1000 and 100000000 bytes".into()));
            }
        }
        if self.consumer.batch_size == 0 {
            return Err(err("consumer.batch_size", "must be at least 1".into()));
        }
        if self.retention.interval.is_zero() || self.retention.outbox_sent.is_zero() {
            return Err(err(
                "retention.interval",
                "retention.interval and retention.outbox_sent must be longer than zero".into(),
            ));
        }
        let m = &self.metrics;
        if m.refresh_interval.is_zero()
            || m.leak_check_interval.is_zero()
            || m.leak_window.is_zero()
        {
            return Err(err(
                "metrics.leak_check_interval",
                "metrics.refresh_interval, leak_check_interval and leak_window must be longer than zero".into(),
            ));
        }
        if self.retention.batch == 0 {
            return Err(err("retention.batch", "must be at least 1".into()));
        }
        Ok(())
    }

    /// In production every connection is TLS with the server verified, or named in
    /// `environment.allow_unverified`: a server that declines TLS must never be sent a password
    /// in cleartext because a URL left out `sslmode`.
    fn validate_verified_in_production(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        const KEY: &str = "environment.allow_unverified";
        const NAMES: [&str; 3] = ["database", "redis", "kafka"];
        if let Some(bad) = self
            .environment
            .allow_unverified
            .iter()
            .find(|n| !NAMES.contains(&n.as_str()))
        {
            return Err(err(
                KEY,
                format!("`{bad}` is not one of {}", NAMES.join(", ")),
            ));
        }
        if !self.environment.production {
            return Ok(());
        }
        for (name, key, verification) in crate::tls::connections(self) {
            let allowed = self.environment.allow_unverified.iter().any(|n| n == name);
            let why = match verification {
                crate::tls::Verification::Verified { .. } => continue,
                _ if allowed => continue,
                crate::tls::Verification::Plaintext => "not TLS".to_string(),
                crate::tls::Verification::Unverified(why) => why,
            };
            return Err(err(
                &key,
                format!(
                    "{why}, and environment.production = true: a server that declines TLS would be sent its password in cleartext. Set {}, or accept it by name: {KEY} = [\"{name}\"]",
                    crate::tls::verified_setting(name)
                ),
            ));
        }
        Ok(())
    }

    /// What the environment allows (production refuses the fault switches), its colour, the
    /// table names.
    fn validate_environment(
        &self,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
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
        self.validate_verified_in_production(err)?;
        const COLORS: [&str; 6] = ["green", "yellow", "red", "blue", "magenta", "cyan"];
        if !COLORS.contains(&self.environment.color.as_str()) {
            return Err(err(
                "environment.color",
                format!(
                    "`{}` is not one of {}",
                    self.environment.color,
                    COLORS.join(", ")
                ),
            ));
        }
        for (logical, physical) in self.tables.pairs() {
            let ok = !physical.is_empty()
                && physical.len() <= 64
                && physical
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && physical
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(err(
                    &format!("tables.{logical}"),
                    format!(
                        "`{physical}` is not a plain SQL identifier (letters, digits, underscores)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The columns a trace is linked by (and actions act on): never masked, or a trace could not
/// say which order it shows.
pub const UNMASKABLE_COLUMNS: [&str; 6] = [
    "request_id",
    "req_id",
    "order_no",
    "event_id",
    "source_event_no",
    "payment_event_id",
];

impl MaskConfig {
    pub(super) fn validate(&self, source: &SourceProfile) -> Result<(), (String, String)> {
        for (key, names) in [
            ("mask.columns", &self.columns),
            ("mask.production_columns", &self.production_columns),
        ] {
            for name in names {
                check_masked_column(source, name).map_err(|m| (key.to_string(), m))?;
            }
        }
        for (key, pointers) in [
            ("mask.kafka_json", &self.kafka_json),
            ("mask.log_json", &self.log_json),
        ] {
            if let Some(p) = pointers.iter().find(|p| !p.starts_with('/')) {
                return Err((
                    key.to_string(),
                    format!("`{p}` is not a JSON pointer (they start with `/`, e.g. `/userId`)"),
                ));
            }
        }
        Ok(())
    }
}

/// `name` (`column` or `table.column`) names a logical column of the source profile that may be
/// masked.
fn check_masked_column(source: &SourceProfile, name: &str) -> Result<(), String> {
    let (table, column) = match name.split_once('.') {
        Some((t, c)) => (Some(t), c),
        None => (None, name),
    };
    if UNMASKABLE_COLUMNS.contains(&column) {
        return Err(format!(
            "`{name}`: {column} links a trace together and cannot be masked (mask the columns \
             that carry customer data: user_id, amount, response_body…)"
        ));
    }
    let tables: Vec<&str> = match table {
        Some(t) if source.table(t).is_none() => {
            return Err(format!(
                "`{name}`: there is no table `{t}` in the source profile"
            ))
        }
        Some(t) => vec![t],
        None => CONSOLE_TABLES.iter().chain(&OWN_TABLES).copied().collect(),
    };
    let known = tables.iter().any(|t| {
        source
            .table(t)
            .is_some_and(|t| t.columns.contains_key(column))
    });
    if known {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a column of the source profile (a column is masked by its logical \
             name, as in [source.*.columns]: user_id, amount, response_body…)"
        ))
    }
}

/// Why a `[kafka.client]` property cannot be set there, if it cannot: a `[kafka]` key or
/// idemguard's own clients set it. Names are compared as librdkafka reads them, aliases resolved:
/// librdkafka applies a client's properties in no fixed order, so a second value under an alias
/// (`max.partition.fetch.bytes` beside `fetch.message.max.bytes`) would win in one client and
/// lose in the next.
fn set_elsewhere(name: &str) -> Option<String> {
    let property = librdkafka_name(name);
    let alias = if property == name {
        String::new()
    } else {
        format!(" (librdkafka's alias of `{property}`)")
    };
    if let Some((_, key)) = KAFKA_OWN_PROPERTIES
        .iter()
        .find(|(p, _)| librdkafka_name(p) == property)
    {
        return Some(format!("{alias} is set by {key}: set it there"));
    }
    KAFKA_CLIENTS_OWN_PROPERTIES
        .iter()
        .find(|(p, _)| librdkafka_name(p) == property)
        .map(|(_, why)| {
            format!("{alias} is set by idemguard's own clients ({why}): it cannot be changed")
        })
}

/// librdkafka's aliases (its CONFIGURATION.md, "Alias for"): (alias, the property it sets).
const LIBRDKAFKA_ALIASES: [(&str, &str); 11] = [
    ("bootstrap.servers", "metadata.broker.list"),
    ("max.in.flight", "max.in.flight.requests.per.connection"),
    ("sasl.mechanism", "sasl.mechanisms"),
    ("max.partition.fetch.bytes", "fetch.message.max.bytes"),
    ("linger.ms", "queue.buffering.max.ms"),
    ("retries", "message.send.max.retries"),
    ("compression.type", "compression.codec"),
    ("acks", "request.required.acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
    ("enable.auto.commit", "auto.commit.enable"),
    (
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.id",
    ),
];

fn librdkafka_name(name: &str) -> &str {
    LIBRDKAFKA_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, property)| property)
}

/// The properties idemguard's consumers, producers and readers set for what they guarantee, with
/// why: refused in `[kafka.client]` rather than silently overridden. `client.id` is not among
/// them: it names `consume`'s and `serve`'s clients for the broker's quotas and logs.
const KAFKA_CLIENTS_OWN_PROPERTIES: [(&str, &str); 20] = [
    (
        "group.id",
        "kafka.consumer_group for consume; readers never join a group",
    ),
    (
        "enable.auto.commit",
        "offsets are committed only after the database commit",
    ),
    (
        "enable.auto.offset.store",
        "offsets are committed only after the database commit",
    ),
    (
        "auto.offset.reset",
        "where a consumer or reader starts is decided per client",
    ),
    (
        "enable.partition.eof",
        "a window read stops at a partition's end",
    ),
    ("heartbeat.interval.ms", "the consumer's group membership"),
    (
        "topic.metadata.refresh.interval.ms",
        "the consumer's view of new partitions",
    ),
    (
        "acks",
        "payment, DLQ and redrive messages are acknowledged by every in-sync replica",
    ),
    (
        "enable.idempotence",
        "the payment producer never writes a message twice",
    ),
    (
        "message.timeout.ms",
        "a publish that is not acknowledged in time is reported, not retried forever",
    ),
    ("linger.ms", "the trace producer's batching"),
    ("queued.min.messages", "the readers' bounded prefetch"),
    (
        "queued.max.messages.kbytes",
        "the readers' bounded prefetch",
    ),
    ("fetch.max.bytes", "the readers' bounded fetches"),
    ("fetch.message.max.bytes", "the readers' bounded fetches"),
    ("fetch.wait.max.ms", "a window read's latency"),
    ("fetch.queue.backoff.ms", "a window read's latency"),
    ("fetch.error.backoff.ms", "a window read's latency"),
    ("reconnect.backoff.ms", "a window read's latency"),
    (
        "debug",
        "the readers count their requests from librdkafka's protocol lines",
    ),
];

/// The librdkafka properties `[kafka]`'s own keys set: refused in `[kafka.client]`, so each has
/// one place (and `doctor` reports what is really used).
pub const KAFKA_OWN_PROPERTIES: [(&str, &str); 11] = [
    ("partitioner", "kafka.partitioner"),
    ("bootstrap.servers", "kafka.bootstrap_servers"),
    ("security.protocol", "kafka.security_protocol"),
    ("sasl.mechanism", "kafka.sasl_mechanism"),
    ("sasl.mechanisms", "kafka.sasl_mechanism"),
    ("sasl.username", "kafka.sasl_username"),
    ("sasl.password", "kafka.sasl_password"),
    ("ssl.ca.location", "kafka.ssl_ca_file"),
    ("ssl.certificate.location", "kafka.ssl_cert_file"),
    ("ssl.key.location", "kafka.ssl_key_file"),
    ("ssl.key.password", "kafka.ssl_key_password"),
];

#[cfg(test)]
mod tests {
    use super::super::load::load_with;
    use super::super::Partitioner;
    use super::*;

    #[test]
    fn bad_url_is_refused_naming_key_and_file() {
        let e = load_with(Some("[database]\nurl = \"sqlite://foo\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "database.url");
        assert!(e.origin.ends_with("test.toml"));
        assert!(e.to_string().contains("expected postgres://"), "{e}");
    }

    /// The trace's window margin and the producers' partitioner: defaults, bounds, names.
    #[test]
    fn trace_reading_settings_are_validated() {
        let c = load_with(None, &[]).unwrap();
        assert_eq!(c.console.trace_margin, Duration::from_secs(600));
        assert_eq!(c.kafka.partitioner, Partitioner::ConsistentRandom);
        for bad in ["0s", "500ms", "2days"] {
            let toml = format!("[console]\ntrace_margin = \"{bad}\"\n");
            let e = load_with(Some(&toml), &[]).unwrap_err();
            assert_eq!(e.key, "console.trace_margin", "{bad}");
            assert!(e.message.contains("between 1s and 24h"), "{e}");
        }
        let c = load_with(None, &[("IDEMGUARD_KAFKA__PARTITIONER", "murmur2_random")]).unwrap();
        assert_eq!(c.kafka.partitioner, Partitioner::Murmur2Random);
        let e = load_with(Some("[kafka]\npartitioner = \"murmur2\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "kafka.partitioner");
    }

    /// `[kafka.client]`: quoted or dotted names, values as text; a property a `[kafka]` key or
    /// idemguard's own clients set (under its name or a librdkafka alias) and one librdkafka does
    /// not know are refused, naming the key.
    #[test]
    fn kafka_client_properties_are_passed_as_written_and_checked() {
        let c = load_with(
            Some("[kafka.client]\n\"client.id\" = \"prod\"\nsocket.keepalive.enable = true\n"),
            &[],
        )
        .unwrap();
        assert_eq!(c.kafka.client["client.id"], "prod");
        assert_eq!(c.kafka.client["socket.keepalive.enable"], "true");
        let c = load_with(
            None,
            &[("IDEMGUARD_KAFKA__CLIENT", "{ \"client.id\" = \"env\" }")],
        )
        .unwrap();
        assert_eq!(c.kafka.client["client.id"], "env");
        let e = load_with(Some("[kafka.client]\n\"sasl.password\" = \"x\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "kafka.client");
        assert!(e.message.contains("kafka.sasl_password"), "{e}");
        let e = load_with(
            Some("[kafka.client]\nmetadata.broker.list = \"x:9092\"\n"),
            &[],
        )
        .unwrap_err();
        assert!(e.message.contains("kafka.bootstrap_servers"), "{e}");
        let e =
            load_with(Some("[kafka.client]\nmax.partition.fetch.bytes = 1\n"), &[]).unwrap_err();
        assert_eq!(e.key, "kafka.client");
        assert!(
            e.message.contains("alias of `fetch.message.max.bytes`")
                && e.message.contains("bounded fetches"),
            "{e}"
        );
        let e = load_with(
            Some("[kafka.client]\n\"queue.buffering.max.ms\" = 5\n"),
            &[],
        )
        .unwrap_err();
        assert!(e.message.contains("batching"), "{e}");
        let c = load_with(Some("[kafka.client]\n\"fetch.min.bytes\" = 1\n"), &[]).unwrap();
        assert_eq!(c.kafka.client["fetch.min.bytes"], "1");
        let e = load_with(Some("[kafka.client]\n\"no.such.property\" = \"x\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "kafka.client");
        assert!(e.message.contains("no.such.property"), "{e}");
    }

    /// TLS and SASL settings that cannot work are refused at start, naming the key; a password
    /// file's content is never in the message.
    #[test]
    fn security_settings_that_cannot_work_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("pw");
        std::fs::write(&secret, "Fil3Secret\n").unwrap();
        let pw = secret.display().to_string();
        let missing = dir.path().join("absent").display().to_string();
        for (env, key) in [
            (
                vec![("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")],
                "kafka.sasl_username",
            ),
            (
                vec![
                    ("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "SASL_SSL"),
                    ("IDEMGUARD_KAFKA__SASL_USERNAME", "u"),
                ],
                "kafka.sasl_password",
            ),
            (
                vec![
                    ("IDEMGUARD_KAFKA__SASL_PASSWORD", "x"),
                    ("IDEMGUARD_KAFKA__SASL_PASSWORD_FILE", pw.as_str()),
                ],
                "kafka.sasl_password_file",
            ),
            (
                vec![("IDEMGUARD_KAFKA__SSL_CA_FILE", pw.as_str())],
                "kafka.ssl_ca_file",
            ),
            (
                vec![("IDEMGUARD_REDIS__TLS_CA_FILE", pw.as_str())],
                "redis.tls_ca_file",
            ),
            (
                vec![
                    ("IDEMGUARD_REDIS__URL", "rediss://h:1"),
                    ("IDEMGUARD_REDIS__TLS_CERT_FILE", pw.as_str()),
                ],
                "redis.tls_cert_file",
            ),
            (
                vec![("IDEMGUARD_DATABASE__PASSWORD_FILE", missing.as_str())],
                "database.password_file",
            ),
        ] {
            let e = load_with(None, &env).unwrap_err();
            assert_eq!(e.key, key, "{env:?}: {e}");
            assert!(!e.to_string().contains("Fil3Secret"), "{e}");
        }
        let c = load_with(
            None,
            &[
                ("IDEMGUARD_DATABASE__URL", "postgres://app@db:5432/orders"),
                ("IDEMGUARD_DATABASE__PASSWORD_FILE", pw.as_str()),
                ("IDEMGUARD_KAFKA__SASL_PASSWORD", "Kafk4Secret"),
                (
                    "IDEMGUARD_KAFKA__CLIENT",
                    "{ \"sasl.oauthbearer.config\" = \"0authSecret\" }",
                ),
            ],
        )
        .unwrap();
        assert_eq!(
            c.database.url_with_password(&c.database.url).unwrap(),
            "postgres://app:Fil3Secret@db:5432/orders"
        );
        // A property this build refuses (OIDC needs curl) is refused without its secret value.
        let e = load_with(
            None,
            &[(
                "IDEMGUARD_KAFKA__CLIENT",
                "{ \"sasl.oauthbearer.client.secret\" = \"0idcSecret\" }",
            )],
        )
        .unwrap_err();
        assert_eq!(e.key, "kafka.client");
        assert!(!e.to_string().contains("0idcSecret"), "{e}");
        let shown = c.to_redacted_toml();
        for s in ["Fil3Secret", "Kafk4Secret", "0authSecret"] {
            assert!(!shown.contains(s), "{shown}");
            assert!(
                c.secrets().contains(&s.to_string()),
                "{s} is scrubbed from logs"
            );
        }
    }

    #[test]
    fn fault_switches_are_refused_in_production() {
        let c = load_with(
            Some(
                "[idempotency]\nenabled = false\nfast_path = false\n[lock]\nrequest_lock = false\n",
            ),
            &[],
        )
        .unwrap();
        assert!(!c.idempotency.enabled && !c.idempotency.fast_path && !c.lock.request_lock);
        let e = load_with(
            Some("[environment]\nproduction = true\n[idempotency]\nenabled = false\n"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "idempotency.enabled");
        assert!(e.message.contains("fault-injection"), "{e}");
        let e = load_with(
            None,
            &[
                ("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true"),
                ("IDEMGUARD_LOCK__REQUEST_LOCK", "false"),
            ],
        )
        .unwrap_err();
        assert_eq!(e.key, "lock.request_lock");
    }

    #[test]
    fn production_refuses_connections_without_verified_tls_unless_named() {
        let prod = [("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true")];
        let e = load_with(None, &prod).unwrap_err();
        assert_eq!(e.key, "database.url");
        assert!(e.message.contains("sslmode=prefer does not verify"), "{e}");
        assert!(
            e.message.contains(r#"allow_unverified = ["database"]"#),
            "{e}"
        );
        let verified = "postgres://u@db.example:5432/orders?sslmode=verify-full";
        let e = load_with(None, &[prod[0], ("IDEMGUARD_DATABASE__URL", verified)]).unwrap_err();
        assert_eq!(e.key, "redis.url");
        assert!(e.message.starts_with("not TLS"), "{e}");
        let e = load_with(
            None,
            &[
                prod[0],
                ("IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED", "database,redis"),
            ],
        )
        .unwrap_err();
        assert_eq!(e.key, "kafka.security_protocol");
        let all = (
            "IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED",
            "database,redis,kafka",
        );
        load_with(None, &[prod[0], all]).unwrap();
        let e = load_with(None, &[("IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED", "db")]).unwrap_err();
        assert_eq!(e.key, "environment.allow_unverified");
    }

    #[test]
    fn table_names_must_be_identifiers() {
        let e = load_with(
            Some("[tables]\norder_record = \"orders; drop table x\"\n"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "tables.order_record");
    }
}
