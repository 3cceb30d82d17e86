//! `doctor`'s "how is it secured" rows: for the database, each Redis node and Kafka — plaintext,
//! or TLS with its protocol version, whether and against what the server was verified (what the
//! driver that just connected was told to check), the server certificate's subject and days to
//! expiry, and the authenticated user. In a production environment a plaintext or unverified
//! connection is a warning (`doctor --strict` fails on it); an insecure Redis always is.

use std::time::{Duration, Instant};

use super::CheckRow;
use crate::config::{host_port, Config, Dialect, KafkaConfig, RedisConfig};
use crate::tls::{inspect, Backend, PeerCertificate, Probe};

/// How long the certificate probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What the connection's settings make the driver check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    Plaintext,
    /// TLS without checking who answers: the reason (the setting that says so).
    Unverified(String),
    Verified {
        against: String,
        host_checked: bool,
    },
}

/// The database URL's TLS mode: `sslmode` / `ssl-mode` and the CA file it names.
pub fn database_verification(url: &str, tls_version: &str) -> Verification {
    let u = url::Url::parse(url).ok();
    let param = |names: &[&str]| {
        u.as_ref().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| names.contains(&k.as_ref()))
                .map(|(_, v)| v.into_owned())
        })
    };
    if tls_version.is_empty() {
        return Verification::Plaintext;
    }
    let mode = param(&["sslmode", "ssl-mode"])
        .unwrap_or_else(|| "prefer".into())
        .to_ascii_lowercase();
    let against = match param(&["sslrootcert", "ssl-ca"]) {
        Some(ca) => format!("{ca} and the platform's roots"),
        None => "the platform's roots".into(),
    };
    let key = match Dialect::of_url(url) {
        Dialect::Postgres => "sslmode",
        Dialect::Mysql => "ssl-mode",
    };
    match mode.as_str() {
        "verify-full" | "verify_identity" => Verification::Verified {
            against,
            host_checked: true,
        },
        "verify-ca" | "verify_ca" => Verification::Verified {
            against,
            host_checked: false,
        },
        other => Verification::Unverified(format!("{key}={other} does not verify the server")),
    }
}

pub fn redis_verification(url: &str, redis: &RedisConfig) -> Verification {
    if !url.starts_with("rediss") {
        Verification::Plaintext
    } else if redis.tls_insecure {
        Verification::Unverified("redis.tls_insecure = true".into())
    } else {
        Verification::Verified {
            against: or_platform(&redis.tls_ca_file),
            host_checked: true,
        }
    }
}

pub fn kafka_verification(kafka: &KafkaConfig) -> Verification {
    let client = |name: &str| kafka.client.get(name).map(String::as_str);
    if !kafka.security_protocol.tls() {
        Verification::Plaintext
    } else if client("enable.ssl.certificate.verification") == Some("false") {
        Verification::Unverified("enable.ssl.certificate.verification = false".into())
    } else {
        Verification::Verified {
            against: or_platform(&kafka.ssl_ca_file),
            host_checked: client("ssl.endpoint.identification.algorithm") != Some("none"),
        }
    }
}

fn or_platform(ca: &str) -> String {
    if ca.is_empty() {
        "the platform's roots".into()
    } else {
        ca.to_string()
    }
}

/// The server's certificate as a probe of `addr` sees it (with our client certificate, if any).
pub async fn peer(
    backend: Backend,
    addr: &str,
    client: Option<(&str, &str)>,
) -> Option<PeerCertificate> {
    let client = client.and_then(|(c, k)| Some((std::fs::read(c).ok()?, std::fs::read(k).ok()?)));
    match inspect(backend, addr, client, PROBE_TIMEOUT).await {
        Ok(cert) | Err(Probe::Handshake(cert)) => Some(cert),
        Err(_) => None,
    }
}

/// The row: `service security`, its detail, a warning where the environment asks for one.
pub fn row(
    config: &Config,
    service: &str,
    target: &str,
    started: Instant,
    verification: &Verification,
    tls_version: &str,
    cert: Option<&PeerCertificate>,
    user: &str,
) -> CheckRow {
    let mut parts = Vec::new();
    let weak = match verification {
        Verification::Plaintext => {
            parts.push("plaintext (not encrypted)".to_string());
            true
        }
        Verification::Unverified(why) => {
            parts.push(format!(
                "{} NOT VERIFIED ({why}): anyone in the path can pose as the server",
                version(tls_version, cert)
            ));
            true
        }
        Verification::Verified {
            against,
            host_checked,
        } => {
            let host = if *host_checked {
                "host name checked"
            } else {
                "host name NOT checked"
            };
            parts.push(format!(
                "{}, verified against {against} ({host})",
                version(tls_version, cert)
            ));
            false
        }
    };
    if let Some(c) = cert.filter(|_| *verification != Verification::Plaintext) {
        parts.push(format!(
            "server {}, expires in {} days",
            c.subject, c.days_left
        ));
    }
    if !user.is_empty() {
        parts.push(format!("user {user}"));
    }
    let detail = parts.join("; ");
    let service = format!("{service} security");
    let insecure =
        matches!(verification, Verification::Unverified(why) if why.contains("tls_insecure"));
    if insecure || (weak && config.environment.production) {
        let hint = match verification {
            Verification::Plaintext => "production: encrypt it (README \"Connecting to production\")",
            _ => "verify the server: a CA file and a mode that checks it (README \"Connecting to production\")",
        };
        CheckRow::warn(service, target, started, detail, hint)
    } else {
        CheckRow::ok(service, target, started, detail)
    }
}

fn version(tls_version: &str, cert: Option<&PeerCertificate>) -> String {
    let v = if tls_version.is_empty() {
        cert.map(|c| c.protocol.as_str()).unwrap_or("")
    } else {
        tls_version
    };
    if v.is_empty() {
        "TLS".into()
    } else {
        v.to_string()
    }
}

/// The database's row: the session's TLS version and user (`connection_security.sql`), the
/// URL's mode, the certificate the server presents.
pub async fn database(
    config: &Config,
    service: &str,
    url: &str,
    version_user: &str,
    started: Instant,
) -> CheckRow {
    let (version, user) = version_user.split_once('|').unwrap_or(("", version_user));
    let verification = database_verification(url, version);
    let backend = match Dialect::of_url(url) {
        Dialect::Postgres => Backend::Postgres,
        Dialect::Mysql => Backend::Mysql,
    };
    let cert = if version.is_empty() {
        None
    } else {
        peer(backend, &host_port(url), None).await
    };
    let target = crate::config::redact_url(url);
    row(
        config,
        service,
        &target,
        started,
        &verification,
        version,
        cert.as_ref(),
        user,
    )
}
