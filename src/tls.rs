//! How a connection to a backend is secured, and why a secured one did not come up.
//!
//! The drivers do the real TLS (sqlx and redis over rustls, librdkafka over OpenSSL); what they
//! say when it fails is a library's sentence ("invalid peer certificate: UnknownIssuer",
//! "certificate verify failed", a reset connection) that names neither the cause in the
//! operator's terms nor the setting to change. [`Refusal`] tells the causes apart from those
//! texts — and, where a server only drops the connection (a plaintext client on a TLS-only
//! Redis or Kafka port), from a TLS handshake of our own ([`speaks_tls`]) — and says which
//! setting of which backend fixes it. [`inspect`] is `doctor`'s look at the certificate a server
//! presents: protocol version, subject, days to expiry.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The backend a connection goes to: it decides the preamble before TLS and the settings named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Mysql,
    Redis,
    Kafka,
}

/// Why a connection that should be secured did not come up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server's certificate does not chain to a CA we trust.
    Untrusted,
    /// The certificate chains, but not for the host name we connected to.
    HostName,
    /// The certificate has expired (or is not valid yet).
    Expired,
    /// We spoke plaintext to a server that accepts only TLS.
    PlaintextRefused,
    /// The server requires a client certificate (mutual TLS) and got none it accepts.
    ClientCertificate,
    /// We asked for TLS and the server offers none.
    NoTls,
}

impl Refusal {
    /// The refusal an error's text shows: rustls's (sqlx, redis), OpenSSL's (librdkafka), the
    /// servers' own (PostgreSQL's pg_hba.conf, MySQL's require_secure_transport).
    pub fn of_text(text: &str) -> Option<Refusal> {
        let t = text.to_ascii_lowercase();
        let any = |needles: &[&str]| needles.iter().any(|n| t.contains(n));
        if any(&[
            "notvalidforname",
            "not valid for name",
            "hostname mismatch",
            "does not match host name",
        ]) {
            Some(Refusal::HostName)
        } else if any(&[
            "certificaterequired",
            "certificate required",
            "peer did not return a certificate",
            "alert bad certificate",
            "badcertificate",
        ]) {
            Some(Refusal::ClientCertificate)
        } else if any(&["expired", "notvalidyet", "not yet valid"]) {
            Some(Refusal::Expired)
        } else if any(&[
            "unknownissuer",
            "unknown issuer",
            "certificate verify failed",
            "unable to get local issuer",
            "self-signed certificate",
            "self signed certificate",
            "badsignature",
        ]) {
            Some(Refusal::Untrusted)
        } else if any(&["no encryption", "insecure transport"]) {
            Some(Refusal::PlaintextRefused)
        } else if any(&[
            "does not support tls",
            "does not support ssl",
            "corrupt message",
            "invalidcontenttype",
            "wrong version number",
            "packet length too long",
        ]) {
            Some(Refusal::NoTls)
        } else {
            None
        }
    }

    /// Says which refusal it is and the setting that fixes it, for `host` on `backend`.
    pub fn explain(self, backend: Backend, host: &str) -> String {
        use Backend::*;
        let (ca, cert, tls_on) = match backend {
            Postgres => (
                "sslrootcert=… in the database URL",
                "sslcert=… and sslkey=… in the database URL",
                "sslmode=verify-full (with sslrootcert=…) in the database URL",
            ),
            Mysql => (
                "ssl-ca=… in the database URL",
                "ssl-cert=… and ssl-key=… in the database URL",
                "ssl-mode=VERIFY_IDENTITY (with ssl-ca=…) in the database URL",
            ),
            Redis => (
                "redis.tls_ca_file",
                "redis.tls_cert_file and redis.tls_key_file",
                "a rediss:// URL (with redis.tls_ca_file)",
            ),
            Kafka => (
                "kafka.ssl_ca_file",
                "kafka.ssl_cert_file and kafka.ssl_key_file",
                "kafka.security_protocol = \"SSL\" or \"SASL_SSL\" (with kafka.ssl_ca_file)",
            ),
        };
        let name_fix = match backend {
            Postgres => "connect by a name the certificate has, or set sslmode=verify-ca to check the CA only",
            Mysql => "connect by a name the certificate has, or set ssl-mode=VERIFY_CA to check the CA only",
            Redis => "write the URL with a name the certificate has",
            Kafka => "list the brokers in kafka.bootstrap_servers by names their certificates have",
        };
        let no_tls_fix = match backend {
            Postgres => "use a TLS endpoint of the server, or sslmode=disable where plaintext is acceptable",
            Mysql => "use a TLS endpoint of the server, or ssl-mode=DISABLED where plaintext is acceptable",
            Redis => "use the server's TLS port, or redis:// where plaintext is acceptable",
            Kafka => "use the brokers' TLS listener, or kafka.security_protocol = \"PLAINTEXT\" where plaintext is acceptable",
        };
        match self {
            Refusal::Untrusted => format!("TLS: the certificate of {host} does not verify against the trusted CAs (unknown issuer): set {ca} to the CA that issued it"),
            Refusal::HostName => {
                let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
                format!("TLS: the certificate of {host} is not valid for the host name `{name}`: {name_fix}")
            }
            Refusal::Expired => format!("TLS: the certificate of {host} has expired or is not valid yet: renew it on the server (or check this machine's clock)"),
            Refusal::PlaintextRefused => format!("{host} refuses unencrypted connections: set {tls_on}"),
            Refusal::ClientCertificate => format!("TLS: {host} requires a client certificate (mutual TLS) and did not accept ours: set {cert}"),
            Refusal::NoTls => format!("TLS: {host} does not speak TLS on this port: {no_tls_fix}"),
        }
    }
}

/// The refusal behind a failed connection: from the error's text, else — when the server only
/// dropped a plaintext connection — from whether the port answers a TLS handshake.
pub async fn diagnose(
    backend: Backend,
    addr: &str,
    error: &str,
    plaintext: bool,
) -> Option<Refusal> {
    if let Some(r) = Refusal::of_text(error) {
        return Some(r);
    }
    let t = error.to_ascii_lowercase();
    let dropped = [
        "reset",
        "broken pipe",
        "closed",
        "eof",
        "disconnected",
        "transport failure",
        "timed out",
        "timeout",
        "deadline has elapsed",
        "did not answer",
    ]
    .iter()
    .any(|n| t.contains(n));
    if plaintext && dropped && speaks_tls(backend, addr).await {
        return Some(Refusal::PlaintextRefused);
    }
    if !plaintext && dropped && speaks_plaintext(backend, addr).await {
        return Some(Refusal::NoTls);
    }
    None
}

/// True when `addr` answers the backend's own plaintext greeting within 2 s (Redis: `PING`;
/// Kafka: an ApiVersions request): a TLS client that got nowhere there met a plaintext port.
/// The databases say so themselves (their TLS request packet is answered "no").
pub async fn speaks_plaintext(backend: Backend, addr: &str) -> bool {
    // Kafka: size 10, ApiVersions (18) v0, correlation id 1, no client id.
    const API_VERSIONS: [u8; 14] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    type Answered = fn(&[u8]) -> bool;
    let (greeting, answered): (&[u8], Answered) = match backend {
        Backend::Redis => (b"PING\r\n", |r| matches!(r.first(), Some(b'+' | b'-'))),
        Backend::Kafka => (&API_VERSIONS, |r| r.get(4..8) == Some(&[0, 0, 0, 1])),
        Backend::Postgres | Backend::Mysql => return false,
    };
    let exchange = async {
        let mut tcp = TcpStream::connect(addr).await.ok()?;
        tcp.write_all(greeting).await.ok()?;
        let mut reply = [0u8; 8];
        let mut got = 0;
        while got < reply.len() {
            match tcp.read(&mut reply[got..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
            if backend == Backend::Redis {
                break;
            }
        }
        Some(answered(&reply[..got]))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), exchange).await,
        Ok(Some(true))
    )
}

/// True when `addr` completes the start of a TLS handshake (a ServerHello and a certificate):
/// the server there speaks TLS, whatever it then thinks of us.
pub async fn speaks_tls(backend: Backend, addr: &str) -> bool {
    matches!(
        inspect(backend, addr, None, Duration::from_secs(3)).await,
        Ok(_) | Err(Probe::Handshake(_))
    )
}

/// The certificate refusal rustls finds for the server at `addr`, verified against `ca` (a PEM
/// file; `None`: the platform's roots) for the host name of `addr`: a client whose library says
/// only "certificate verify failed" (OpenSSL under librdkafka) learns which check failed.
pub async fn certificate_refusal(
    backend: Backend,
    addr: &str,
    ca: Option<&str>,
) -> Option<Refusal> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in CertificateDer::pem_file_iter(path).ok()? {
                roots.add(cert.ok()?).ok()?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let attempt = async {
        let mut tcp = TcpStream::connect(addr).await.ok()?;
        preamble(backend, &mut tcp).await.ok()?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string()).ok()?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        match connector.connect(name, tcp).await {
            Ok(_) => None,
            Err(e) => Refusal::of_text(&e.to_string()),
        }
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .ok()
        .flatten()
}

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
/// `tls_version`: the session's, as the server reports it ("" when plaintext).
pub fn database_verification(url: &str, tls_version: &str) -> Verification {
    if tls_version.is_empty() {
        Verification::Plaintext
    } else {
        configured_database(url)
    }
}

/// What the URL's mode asks for, before any session says what it got (`disable`: plaintext;
/// `prefer`, the default, and `require`: TLS without verification).
pub fn configured_database(url: &str) -> Verification {
    let u = url::Url::parse(url).ok();
    let param = |names: &[&str]| {
        u.as_ref().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| names.contains(&k.as_ref()))
                .map(|(_, v)| v.into_owned())
        })
    };
    let mode = param(&["sslmode", "ssl-mode"])
        .unwrap_or_else(|| "prefer".into())
        .to_ascii_lowercase();
    let against = match param(&["sslrootcert", "ssl-ca"]) {
        Some(ca) => format!("{ca} and the platform's roots"),
        None => "the platform's roots".into(),
    };
    let key = match crate::config::Dialect::of_url(url) {
        crate::config::Dialect::Postgres => "sslmode",
        crate::config::Dialect::Mysql => "ssl-mode",
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
        "disable" | "disabled" => Verification::Plaintext,
        other => Verification::Unverified(format!("{key}={other} does not verify the server")),
    }
}

pub fn redis_verification(url: &str, redis: &crate::config::RedisConfig) -> Verification {
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

pub fn kafka_verification(kafka: &crate::config::KafkaConfig) -> Verification {
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

/// One connection of a configuration: its name in `environment.allow_unverified`, its key, what
/// its settings make the driver check.
pub type Connection = (&'static str, String, Verification);

/// Every connection a configuration makes.
pub fn connections(config: &crate::config::Config) -> Vec<Connection> {
    let db = &config.database;
    let mut out: Vec<Connection> = [
        ("database.url", &db.url),
        ("database.replica_url", &db.replica_url),
        ("database.actions_url", &db.actions_url),
    ]
    .into_iter()
    .filter(|(_, url)| !url.is_empty())
    .map(|(key, url)| ("database", key.to_string(), configured_database(url)))
    .collect();
    let redis = &config.redis;
    out.push((
        "redis",
        "redis.url".into(),
        redis_verification(&redis.url, redis),
    ));
    for url in &redis.redlock_nodes {
        let v = redis_verification(url, redis);
        out.push(("redis", "redis.redlock_nodes".into(), v));
    }
    let kafka = kafka_verification(&config.kafka);
    out.push(("kafka", "kafka.security_protocol".into(), kafka));
    out
}

/// How each connection is secured, one clause per key: what `serve` and `consume` say at start,
/// e.g. "database.url TLS, verified against ca.pem, host checked · redis.url PLAINTEXT ·
/// kafka.security_protocol TLS, verified against ca.pem, host checked, user idemguard (SASL
/// SCRAM-SHA-256)".
pub fn secured_summary(config: &crate::config::Config) -> String {
    let mut clauses: Vec<String> = Vec::new();
    for (name, key, v) in connections(config) {
        let how = match v {
            Verification::Plaintext => "PLAINTEXT".to_string(),
            Verification::Unverified(why) => format!("TLS, UNVERIFIED ({why})"),
            Verification::Verified {
                against,
                host_checked,
            } => {
                let host = if host_checked {
                    "host checked"
                } else {
                    "host NOT checked"
                };
                format!("TLS, verified against {against}, {host}")
            }
        };
        let allowed = config.environment.production
            && config
                .environment
                .allow_unverified
                .iter()
                .any(|n| n == name)
            && !how.starts_with("TLS, verified");
        let note = if allowed {
            " (environment.allow_unverified)"
        } else {
            ""
        };
        // Kafka's login is part of how its connection is secured: which user, which mechanism.
        let login = match crate::kafka_client::login(&config.kafka) {
            l if name == "kafka" && !l.is_empty() => format!(", user {l}"),
            _ => String::new(),
        };
        let clause = format!("{key} {how}{note}{login}");
        if !clauses.contains(&clause) {
            clauses.push(clause);
        }
    }
    clauses.join(" · ")
}

/// The setting that makes a connection (`database`, `redis`, `kafka`) verified TLS.
pub fn verified_setting(name: &str) -> &'static str {
    match name {
        "database" => {
            "sslmode=verify-full (PostgreSQL) or ssl-mode=VERIFY_IDENTITY (MySQL) in the URL"
        }
        "redis" => "a rediss:// URL (with redis.tls_ca_file)",
        _ => "kafka.security_protocol = \"SSL\" or \"SASL_SSL\" (with kafka.ssl_ca_file)",
    }
}

fn or_platform(ca: &str) -> String {
    if ca.is_empty() {
        "the platform's roots".into()
    } else {
        ca.to_string()
    }
}

/// What a server's TLS showed us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// "TLSv1.3", "TLSv1.2"; empty when the handshake did not finish (e.g. a client
    /// certificate was required).
    pub protocol: String,
    /// The subject of the server's certificate (RFC 4514), e.g. "CN=localhost".
    pub subject: String,
    pub days_left: i64,
}

/// A probe that did not see a certificate: no connection, no TLS there, or a handshake refused
/// after the certificate was seen (then `Handshake` carries it).
#[derive(Debug)]
pub enum Probe {
    Unreachable(String),
    NotTls(String),
    Handshake(PeerCertificate),
}

/// The certificate the server at `addr` presents, over the backend's own preamble (PostgreSQL's
/// SSLRequest, MySQL's SSL request packet), with `client` (certificate, key PEM) when the
/// server requires one. Nothing is verified here: the driver that connected verified it.
pub async fn inspect(
    backend: Backend,
    addr: &str,
    client: Option<(Vec<u8>, Vec<u8>)>,
    timeout: Duration,
) -> Result<PeerCertificate, Probe> {
    match tokio::time::timeout(timeout, handshake(backend, addr, client)).await {
        Ok(r) => r,
        Err(_) => Err(Probe::Unreachable(format!(
            "no TLS answer within {timeout:?}"
        ))),
    }
}

async fn handshake(
    backend: Backend,
    addr: &str,
    client: Option<(Vec<u8>, Vec<u8>)>,
) -> Result<PeerCertificate, Probe> {
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| Probe::Unreachable(e.to_string()))?;
    preamble(backend, &mut tcp).await?;
    let seen = Arc::new(Recorder::default());
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(seen.clone());
    let config = match client.and_then(|(c, k)| client_auth(&c, &k)) {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| Probe::NotTls(e.to_string()))?,
        None => builder.with_no_client_auth(),
    };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| Probe::NotTls(e.to_string()))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let result = connector.connect(name, tcp).await;
    let leaf = seen.leaf.lock().expect("recorder").clone();
    let described = leaf.as_deref().map(describe_certificate);
    match (result, described) {
        (Ok(mut tls), Some(mut cert)) => {
            cert.protocol = match tls.get_ref().1.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".into(),
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".into(),
                Some(v) => format!("{v:?}"),
                None => String::new(),
            };
            let _ = tls.shutdown().await;
            Ok(cert)
        }
        (Err(_), Some(cert)) => Err(Probe::Handshake(cert)),
        (Ok(_), None) => Err(Probe::NotTls("no certificate".into())),
        (Err(e), None) => Err(Probe::NotTls(e.to_string())),
    }
}

/// What goes before the TLS handshake: nothing for Redis and Kafka; PostgreSQL's SSLRequest,
/// answered `S`; MySQL's greeting, then an SSL request packet.
async fn preamble(backend: Backend, tcp: &mut TcpStream) -> Result<(), Probe> {
    let io = |e: std::io::Error| Probe::NotTls(e.to_string());
    match backend {
        Backend::Redis | Backend::Kafka => Ok(()),
        Backend::Postgres => {
            tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
                .await
                .map_err(io)?;
            let mut answer = [0u8; 1];
            tcp.read_exact(&mut answer).await.map_err(io)?;
            if answer[0] == b'S' {
                Ok(())
            } else {
                Err(Probe::NotTls("the server does not offer TLS".into()))
            }
        }
        Backend::Mysql => {
            let mut header = [0u8; 4];
            tcp.read_exact(&mut header).await.map_err(io)?;
            let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
            let mut greeting = vec![0u8; len.min(1 << 16)];
            tcp.read_exact(&mut greeting).await.map_err(io)?;
            // protocol(1) version\0 thread(4) auth(8) filler(1) capabilities(2)
            let nul = greeting.iter().skip(1).position(|b| *b == 0).unwrap_or(0) + 1;
            let at = nul + 1 + 4 + 8 + 1;
            let caps = greeting
                .get(at..at + 2)
                .map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
            const CLIENT_SSL: u16 = 0x0800;
            if caps & CLIENT_SSL == 0 {
                return Err(Probe::NotTls("the server does not offer TLS".into()));
            }
            // LONG_PASSWORD | PROTOCOL_41 | SSL | SECURE_CONNECTION, max packet, utf8, filler.
            let flags: u32 = 0x0001 | 0x0200 | 0x0800 | 0x8000;
            let mut packet = vec![32, 0, 0, 1];
            packet.extend_from_slice(&flags.to_le_bytes());
            packet.extend_from_slice(&(1u32 << 24).to_le_bytes());
            packet.push(33);
            packet.extend_from_slice(&[0u8; 23]);
            tcp.write_all(&packet).await.map_err(io)
        }
    }
}

fn client_auth(
    cert: &[u8],
    key: &[u8],
) -> Option<(
    Vec<CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
)> {
    use rustls::pki_types::pem::PemObject;
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key).ok()?;
    Some((chain, key))
}

fn describe_certificate(der: &[u8]) -> PeerCertificate {
    use x509_cert::der::Decode;
    match x509_cert::Certificate::from_der(der) {
        Ok(c) => {
            let not_after = c.tbs_certificate.validity.not_after.to_unix_duration();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            PeerCertificate {
                protocol: String::new(),
                subject: c.tbs_certificate.subject.to_string(),
                days_left: (not_after.as_secs() as i64 - now.as_secs() as i64).div_euclid(86_400),
            }
        }
        Err(e) => PeerCertificate {
            protocol: String::new(),
            subject: format!("<unreadable certificate: {e}>"),
            days_left: 0,
        },
    }
}

/// Accepts any certificate and keeps the server's: the probe reports, the drivers verify.
#[derive(Debug, Default)]
struct Recorder {
    leaf: Mutex<Option<Vec<u8>>>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.leaf.lock().expect("recorder") = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_library_text_is_told_apart() {
        for (text, refusal) in [
            ("error communicating with database: invalid peer certificate: UnknownIssuer", Refusal::Untrusted),
            ("invalid peer certificate: certificate not valid for name \"127.0.0.2\"; certificate is only valid for DnsName(\"localhost\")", Refusal::HostName),
            ("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified", Refusal::Untrusted),
            ("FATAL: no pg_hba.conf entry for host \"127.0.0.1\", user \"x\", database \"y\", no encryption", Refusal::PlaintextRefused),
            ("Connections using insecure transport are prohibited while --require_secure_transport=ON.", Refusal::PlaintextRefused),
            ("received fatal alert: CertificateRequired", Refusal::ClientCertificate),
            ("error occurred while attempting to establish a TLS connection: server does not support TLS", Refusal::NoTls),
            ("invalid peer certificate: Expired", Refusal::Expired),
        ] {
            assert_eq!(Refusal::of_text(text), Some(refusal), "{text}");
        }
        assert_eq!(Refusal::of_text("Connection refused (os error 111)"), None);
    }

    #[test]
    fn each_explanation_names_the_setting_of_its_backend() {
        let e = Refusal::Untrusted.explain(Backend::Redis, "127.0.0.1:6390");
        assert!(
            e.contains("redis.tls_ca_file") && e.contains("unknown issuer"),
            "{e}"
        );
        let e = Refusal::PlaintextRefused.explain(Backend::Postgres, "127.0.0.1:5433");
        assert!(e.contains("sslmode=verify-full"), "{e}");
        let e = Refusal::HostName.explain(Backend::Mysql, "127.0.0.2:3307");
        assert!(e.contains("ssl-mode=VERIFY_CA"), "{e}");
        let e = Refusal::ClientCertificate.explain(Backend::Kafka, "127.0.0.1:9093");
        assert!(e.contains("kafka.ssl_cert_file"), "{e}");
    }
}
