//! `doctor`'s "how is it secured" rows: for the database, each Redis node and Kafka — plaintext,
//! or TLS with its protocol version, whether and against what the server was verified (what the
//! driver that just connected was told to check), the server certificate's subject and days to
//! expiry, and the authenticated user. In a production environment a plaintext or unverified
//! connection is a warning (`doctor --strict` fails on it); an insecure Redis always is.

use std::time::{Duration, Instant};

use super::CheckRow;
use crate::config::{host_port, Config, Dialect};
pub use crate::tls::{database_verification, kafka_verification, redis_verification, Verification};
use crate::tls::{inspect, Backend, PeerCertificate, Probe};

/// How long the certificate probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The server's certificate as a probe of `addr` sees it (with our client certificate, if any).
pub async fn peer(
    backend: Backend,
    addr: &str,
    client: Option<(&str, &str)>,
) -> Option<PeerCertificate> {
    let read = |p: &str| {
        crate::config::read_bounded_file(p, crate::config::MAX_CERTIFICATE_FILE_BYTES).ok()
    };
    let client = client.and_then(|(c, k)| Some((read(c)?, read(k)?)));
    match inspect(backend, addr, client, PROBE_TIMEOUT).await {
        Ok(cert) | Err(Probe::Handshake(cert)) => Some(cert),
        Err(_) => None,
    }
}

/// What one connection showed: the check its settings asked for, the TLS version the session
/// reports ("" when it reports none), the server's certificate, the authenticated user.
pub struct Secured<'a> {
    pub verification: &'a Verification,
    pub tls_version: &'a str,
    pub cert: Option<&'a PeerCertificate>,
    pub user: &'a str,
}

/// The row: `service security`, its detail, a warning where the environment asks for one.
pub fn row(
    config: &Config,
    service: &str,
    target: &str,
    started: Instant,
    seen: Secured<'_>,
) -> CheckRow {
    let Secured {
        verification,
        tls_version,
        cert,
        user,
    } = seen;
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
            Verification::Plaintext => "production: encrypt it (docs/production.md)",
            _ => "verify the server: a CA file and a mode that checks it (docs/production.md)",
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

/// A connection whose session reports no TLS version (Redis, Kafka): its settings' check, the
/// address to probe for the certificate (with our client certificate, if any), the user.
pub struct Endpoint<'a> {
    pub backend: Backend,
    pub addr: &'a str,
    pub client: Option<(&'a str, &'a str)>,
    pub verification: Verification,
    pub user: &'a str,
}

/// The row of an [`Endpoint`]: the certificate probed unless the connection is plaintext.
pub async fn endpoint_row(
    config: &Config,
    service: &str,
    target: &str,
    started: Instant,
    e: Endpoint<'_>,
) -> CheckRow {
    let cert = match e.verification {
        Verification::Plaintext => None,
        _ => peer(e.backend, e.addr, e.client).await,
    };
    let seen = Secured {
        verification: &e.verification,
        tls_version: "",
        cert: cert.as_ref(),
        user: e.user,
    };
    row(config, service, target, started, seen)
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
        Secured {
            verification: &verification,
            tls_version: version,
            cert: cert.as_ref(),
            user,
        },
    )
}
