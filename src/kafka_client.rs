//! Where every librdkafka client idemguard makes begins: the producers (outbox relay, trace,
//! storm, demo), the consumer, the admin clients and the console's readers all start from
//! [`client_config`], so a connection property set once in `[kafka]` — the brokers, TLS, SASL,
//! `[kafka.client]` — reaches every client. Each caller adds only what its role needs (a group,
//! acks, fetch sizes).
//!
//! librdkafka never gives up on a broker it cannot reach: a client with a wrong CA or password
//! retries for ever, logging. [`preflight`] asks the brokers for their metadata once, bounded,
//! with a context that keeps what librdkafka reported, and turns a refusal into one sentence
//! that says which it is and the setting to fix — `serve`, `consume` and `doctor` call it
//! before they rely on the brokers, the console's reads when one failed
//! ([`explain_read_failure`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

use crate::config::KafkaConfig;
use crate::tls::{Backend, Refusal};

/// The settings every client shares: where the brokers are and how to reach them.
/// The client configuration of idemguard's own producers: [`client_config`] with the partitioner
/// `kafka.partitioner` names, so that a key's partition is the one a trace computes for it (a
/// producer left on librdkafka's crc32 under `murmur2_random` put the outbox's payment events
/// and the trace events where a trace did not look). `none` leaves librdkafka's default.
pub fn producer_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut c = client_config(kafka);
    if kafka.partitioner != crate::config::Partitioner::None {
        c.set("partitioner", kafka.partitioner.name());
    }
    c
}

/// How the clients log in to the brokers, read back from what [`client_config`] gives
/// librdkafka: "idemguard (SASL SCRAM-SHA-256)", "by client certificate", or empty (no login).
/// What `serve` and `consume` say as they start and `doctor` reports.
pub fn login(kafka: &KafkaConfig) -> String {
    let c = client_config(kafka);
    match (c.get("sasl.mechanism"), c.get("ssl.certificate.location")) {
        (Some(mechanism), _) => format!(
            "{} (SASL {mechanism})",
            c.get("sasl.username").unwrap_or_default()
        ),
        (None, Some(_)) => "by client certificate".into(),
        (None, None) => String::new(),
    }
}

pub fn client_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &kafka.bootstrap_servers);
    c.set("security.protocol", kafka.security_protocol.as_str());
    if kafka.security_protocol.tls() {
        // librdkafka's own OpenSSL (built in) does not know where Debian, Red Hat or Alpine keep
        // their roots: `probe` looks in the usual places.
        let ca = if kafka.ssl_ca_file.is_empty() {
            "probe"
        } else {
            &kafka.ssl_ca_file
        };
        c.set("ssl.ca.location", ca);
        if !kafka.ssl_cert_file.is_empty() {
            c.set("ssl.certificate.location", &kafka.ssl_cert_file);
            c.set("ssl.key.location", &kafka.ssl_key_file);
        }
        let passphrase = secret(kafka.ssl_key_password(), "kafka.ssl_key_password_file");
        if !passphrase.is_empty() {
            c.set("ssl.key.password", passphrase);
        }
    }
    if kafka.security_protocol.sasl() {
        c.set("sasl.mechanism", kafka.sasl_mechanism.as_str());
        c.set("sasl.username", &kafka.sasl_username);
        c.set(
            "sasl.password",
            secret(kafka.sasl_password(), "kafka.sasl_password_file"),
        );
    }
    for (name, value) in &kafka.client {
        c.set(name, value);
    }
    c
}

/// A secret the configuration check read once already; a file gone since is said in the log
/// (and the broker's refusal then says the rest).
fn secret(read: Result<String, String>, key: &str) -> String {
    read.unwrap_or_else(|e| {
        tracing::error!("{key}: {e}");
        String::new()
    })
}

/// What librdkafka reported while a client tried the brokers (its errors and its warnings).
#[derive(Clone, Default)]
pub struct Reported(Arc<Mutex<Vec<String>>>);

impl Reported {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().expect("reported");
        if lines.len() < 50 {
            lines.push(line);
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().expect("reported").clone()
    }
}

impl ClientContext for Reported {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            self.push(format!("{fac}: {log_message}"));
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.push(format!("{error}: {reason}"));
    }
}

impl ConsumerContext for Reported {}

/// The brokers as the metadata answered: their addresses and each topic's partition count.
pub struct Metadata {
    pub brokers: Vec<String>,
    pub topics: Vec<(String, usize)>,
}

/// A metadata request that failed: the sentence to show, and whether the brokers refused our
/// configuration (TLS, SASL) rather than being out of reach — a service stops at once on a
/// refusal, and waits out an outage.
#[derive(Debug, Clone)]
pub struct Unreachable {
    pub message: String,
    pub refused: bool,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One metadata request within `timeout`. An error says which refusal it was and the setting to
/// fix when librdkafka's reports (or a handshake of our own) show one (see [`crate::tls`]).
pub async fn preflight(kafka: &KafkaConfig, timeout: Duration) -> Result<Metadata, Unreachable> {
    let k = kafka.clone();
    let fetched = tokio::task::spawn_blocking(move || fetch_metadata(&k, timeout))
        .await
        .map_err(|e| Unreachable {
            message: format!("kafka metadata: {e}"),
            refused: false,
        })?;
    match fetched {
        Ok(md) => Ok(md),
        Err((error, reported)) => Err(explain_failure(kafka, &error, &reported).await),
    }
}

fn fetch_metadata(
    kafka: &KafkaConfig,
    timeout: Duration,
) -> Result<Metadata, (String, Vec<String>)> {
    let reported = Reported::default();
    let consumer: BaseConsumer<Reported> = client_config(kafka)
        .set("log_level", "4")
        .set_log_level(RDKafkaLogLevel::Warning)
        .create_with_context(reported.clone())
        .map_err(|e| (format!("kafka client: {e}"), vec![]))?;
    match consumer.fetch_metadata(None, timeout) {
        Ok(md) => Ok(Metadata {
            brokers: md
                .brokers()
                .iter()
                .map(|b| format!("{}:{}", b.host(), b.port()))
                .collect(),
            topics: md
                .topics()
                .iter()
                .map(|t| (t.name().to_string(), t.partitions().len()))
                .collect(),
        }),
        Err(e) => {
            // librdkafka's logs and errors wait on the client's queue until it is polled.
            for _ in 0..5 {
                let _ = consumer.poll(Duration::from_millis(20));
            }
            Err((e.to_string(), reported.lines()))
        }
    }
}

/// The sentence for a failed metadata request: the refusal the reports show, a SASL refusal,
/// a plaintext client on a TLS listener (found by a handshake of our own), else librdkafka's
/// own error with the last thing it reported.
pub async fn explain_failure(kafka: &KafkaConfig, error: &str, reported: &[String]) -> Unreachable {
    let refused = |message: String| Unreachable {
        message,
        refused: true,
    };
    let servers = &kafka.bootstrap_servers;
    let first = servers.split(',').next().unwrap_or(servers).trim();
    let all = reported.join("\n");
    if let Some(mut r) = reported.iter().find_map(|l| Refusal::of_text(l)) {
        // OpenSSL says "certificate verify failed" for an unknown CA and a wrong name alike.
        if r == Refusal::Untrusted {
            let ca = (!kafka.ssl_ca_file.is_empty()).then_some(kafka.ssl_ca_file.as_str());
            if let Some(precise) = crate::tls::certificate_refusal(Backend::Kafka, first, ca).await
            {
                r = precise;
            }
        }
        return refused(format!(
            "kafka {servers}: {}",
            r.explain(Backend::Kafka, first)
        ));
    }
    if let Some(line) = reported
        .iter()
        .find(|l| l.contains("SASL") || l.contains("sasl"))
    {
        let mechanisms = if line.contains("mechanism") {
            format!(
                " (and kafka.sasl_mechanism = \"{}\")",
                kafka.sasl_mechanism.as_str()
            )
        } else {
            String::new()
        };
        return refused(format!(
            "kafka {servers}: the broker refused the SASL login of `{}`: check kafka.sasl_username and its password (kafka.sasl_password or kafka.sasl_password_file){mechanisms} — {}",
            kafka.sasl_username,
            crate::logging::scrub(line)
        ));
    }
    // Plaintext to a TLS listener, or TLS to a plaintext one: found by asking the port.
    let plaintext = !kafka.security_protocol.tls();
    let text = format!("{error}\n{all}");
    if let Some(r) = crate::tls::diagnose(Backend::Kafka, first, &text, plaintext).await {
        return refused(format!(
            "kafka {servers}: {}",
            r.explain(Backend::Kafka, first)
        ));
    }
    let last = reported
        .last()
        .map(|l| format!(" — {l}"))
        .unwrap_or_default();
    Unreachable {
        message: format!(
            "kafka {servers}: {error}{last} (is the broker running? `scripts/stack up` starts the local one)"
        ),
        refused: false,
    }
}

/// The sentence for a read that failed against the brokers: when they refuse our TLS or SASL
/// (asked once more by [`preflight`], within 5 s), that refusal and the setting to fix — a
/// reader's own error says only that a transport failed; otherwise the read's `error` as it was.
pub async fn explain_read_failure(kafka: &KafkaConfig, error: String) -> String {
    match preflight(kafka, Duration::from_secs(5)).await {
        Err(e) if e.refused => e.message,
        _ => error,
    }
}

/// Stops a service whose brokers refuse our TLS or SASL (a configuration to fix, said with the
/// setting); brokers out of reach are only warned about: the services wait them out.
pub async fn stop_on_refusal(kafka: &KafkaConfig) -> anyhow::Result<()> {
    match preflight(kafka, Duration::from_secs(5)).await {
        Err(e) if e.refused => anyhow::bail!("{e}"),
        Err(e) => {
            tracing::warn!(error = %e, "the brokers did not answer; going on, they are retried");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}
