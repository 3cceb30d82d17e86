//! The connection side of one Redis node, shared by the node and its batch driver: a lazily
//! opened multiplexed connection, every command bounded by `redis.command_timeout`, and errors
//! that name the node's host:port ([`NodeError`]). Below both `node.rs` and
//! `batch.rs`, so neither reaches into the other for it.
//!
//! `redis.url` may name a Redis Cluster (`redis+cluster://…`, [`RedisTarget`]): the connection is
//! then the redis crate's cluster client, which routes each command to the master of its key's
//! slot and follows MOVED/ASK. Both kinds are one [`RedisConn`], so every script and command
//! runs the same way on either; what a cluster forbids (keys of several slots in one script,
//! pipeline or MULTI) is split by the callers that need it (`batch.rs`, `cluster.rs`).

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, Cmd, Pipeline, RedisError, RedisFuture,
    TlsCertificates, Value,
};

use crate::config::{redact_url, RedisConfig, RedisTarget};
use crate::tls::{Backend, Refusal};

/// How long a failed connect is remembered before the next caller tries again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// A node that could not be reached, or that refused an operation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeError {
    /// host:port of the node.
    pub node: String,
    /// What went wrong, e.g. "refused the connection", "did not answer within 500ms".
    pub problem: String,
    /// True when the node could not be reached (as opposed to answering with an error).
    pub unreachable: bool,
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A refusal's explanation names the node itself: said once.
        if self.problem.contains(&self.node) {
            write!(f, "redis: {}", self.problem)?;
        } else {
            write!(f, "redis node {} {}", self.node, self.problem)?;
        }
        if self.unreachable {
            write!(f, " (is it running? scripts/stack status)")?;
        }
        Ok(())
    }
}

impl std::error::Error for NodeError {}

/// A connection to one node or to a Redis Cluster: the same commands and scripts run on both.
#[derive(Clone)]
pub(crate) enum RedisConn {
    Node(MultiplexedConnection),
    /// One node behind a reconnecting manager (the API's fast path).
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How idemguard reaches every Redis: the command timeout and, from `[redis]`, the TLS files of
/// `rediss://` URLs (CA, client certificate), the insecure switch and the password of the URLs
/// that carry none — read once, when a node is opened, and the same for the main Redis, a
/// cluster's seeds and masters, and each RedLock node.
#[derive(Clone)]
pub struct RedisAccess {
    pub timeout: Duration,
    certificates: Option<TlsCertificates>,
    insecure: bool,
    password: Option<String>,
    /// A file that could not be read: every node opened with this access says so.
    problem: Option<String>,
}

impl RedisAccess {
    pub fn of(config: &RedisConfig) -> RedisAccess {
        let mut access = RedisAccess::plain(config.command_timeout);
        access.insecure = config.tls_insecure;
        let read = |key: &str, path: &str| {
            crate::config::read_bounded_file(path, crate::config::MAX_CERTIFICATE_FILE_BYTES)
                .map_err(|e| format!("{key}: {e}"))
        };
        let certificates = (|| {
            let root_cert = match config.tls_ca_file.as_str() {
                "" => None,
                path => Some(read("redis.tls_ca_file", path)?),
            };
            let client_tls = match config.tls_cert_file.as_str() {
                "" => None,
                path => Some(ClientTlsConfig {
                    client_cert: read("redis.tls_cert_file", path)?,
                    client_key: read("redis.tls_key_file", &config.tls_key_file)?,
                }),
            };
            Ok::<_, String>((root_cert.is_some() || client_tls.is_some()).then_some(
                TlsCertificates {
                    client_tls,
                    root_cert,
                },
            ))
        })();
        match (certificates, config.password()) {
            (Ok(c), Ok(p)) => {
                access.certificates = c;
                access.password = p;
            }
            (Err(e), _) | (_, Err(e)) => access.problem = Some(e),
        }
        access
    }

    /// No TLS files, no password file: the URL alone (tools and tests on the plaintext stack).
    pub fn plain(timeout: Duration) -> RedisAccess {
        RedisAccess {
            timeout,
            certificates: None,
            insecure: false,
            password: None,
            problem: None,
        }
    }

    /// The client of one node's URL, with this access's TLS and password.
    pub fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        let invalid =
            |e: String| RedisError::from((redis::ErrorKind::InvalidClientConfig, "redis", e));
        if let Some(problem) = &self.problem {
            return Err(invalid(problem.clone()));
        }
        let tls = url.starts_with("rediss://");
        let url = if tls && self.insecure && !url.contains('#') {
            format!("{url}#insecure")
        } else {
            url.to_string()
        };
        let mut info = redis::IntoConnectionInfo::into_connection_info(url.as_str())?;
        if let (Some(password), None) = (&self.password, info.redis_settings().password()) {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        match (&self.certificates, tls) {
            (Some(certificates), true) => redis::Client::build_with_tls(info, certificates.clone()),
            _ => redis::Client::open(info),
        }
    }

    /// The cluster client of a cluster's seeds, with this access's TLS and password.
    pub fn cluster(&self, seeds: &[String]) -> redis::RedisResult<ClusterClient> {
        if let Some(problem) = &self.problem {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "redis",
                problem.clone(),
            )));
        }
        let tls = seeds.first().is_some_and(|s| s.starts_with("rediss://"));
        let mut builder = ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout)
            .retries(2);
        let has_password = seeds
            .first()
            .and_then(|s| url::Url::parse(s).ok())
            .is_some_and(|u| u.password().is_some());
        if let (Some(password), false) = (&self.password, has_password) {
            builder = builder.password(password);
        }
        if tls {
            if let Some(certificates) = &self.certificates {
                builder = builder.certs(certificates.clone());
            }
            if self.insecure {
                builder = builder.tls(redis::TlsMode::Insecure);
            }
        }
        builder.build()
    }
}

/// The sentence for a Redis that refused our TLS (or our plaintext): which refusal and the
/// setting to fix; `None` when the error is no such refusal.
pub(crate) async fn refusal(addr: &str, url: &str, e: &RedisError) -> Option<String> {
    let plaintext = !url.starts_with("rediss");
    let text = format!("{e} {:?}", e.detail());
    crate::tls::diagnose(Backend::Redis, addr, &text, plaintext)
        .await
        .map(|r: Refusal| r.explain(Backend::Redis, addr))
}

/// The main Redis for a long-lived user that reconnects on its own (the API's fast path): a
/// connection manager on one node, the cluster client (which reconnects per master) on a
/// cluster.
pub(crate) async fn open_main(url: &str, access: &RedisAccess) -> redis::RedisResult<RedisConn> {
    let invalid =
        |e: String| RedisError::from((redis::ErrorKind::InvalidClientConfig, "redis.url", e));
    let timeout = access.timeout;
    match RedisTarget::parse(url).map_err(invalid)? {
        RedisTarget::Single(url) => {
            let client = access.client(&url)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1);
            let manager = ConnectionManager::new_with_config(client, config).await?;
            Ok(RedisConn::Manager(manager))
        }
        RedisTarget::Cluster { seeds } => {
            let client = access.cluster(&seeds)?;
            Ok(RedisConn::Cluster(client.get_async_connection().await?))
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Node(c) => c.req_packed_command(cmd),
            RedisConn::Manager(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Node(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Node(c) => c.get_db(),
            RedisConn::Manager(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Boxed: both are large and one is made per node, once.
enum Client {
    Node(Box<redis::Client>),
    Cluster(Box<ClusterClient>),
}

/// True for an answer that says who we are may not do this (a wrong password, an ACL without
/// the command): the node is up, so "is it running?" would send the operator the wrong way.
pub(crate) fn is_permission(e: &RedisError) -> bool {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return true;
    }
    let text = e.to_string();
    ["NOPERM", "NOAUTH", "WRONGPASS"]
        .iter()
        .any(|c| e.code() == Some(*c) || text.contains(c))
}

/// The connection side of a node, shared with its batch driver.
pub(crate) struct Conn {
    pub addr: String,
    /// What the URL names: one node or a cluster's seeds.
    pub target: RedisTarget,
    client: Client,
    pub timeout: Duration,
    /// How this node is reached (TLS, password): a cluster's masters are opened with it too.
    pub access: RedisAccess,
    /// The connection and the runtime whose task drives it: a connection opened on a runtime
    /// that has since shut down is dead, so another runtime opens its own.
    slot: Mutex<Option<(tokio::runtime::Id, RedisConn)>>,
    /// Held while connecting; remembers the last failed connect (its problem, and whether the
    /// node was unreachable rather than refusing us).
    connecting: tokio::sync::Mutex<Option<(Instant, String, bool)>>,
    /// Whether the server has `DELEX key IFEQ value` (Redis 8.4+), asked once per node.
    delex: OnceLock<bool>,
}

impl Conn {
    pub fn open(url: &str, access: &RedisAccess) -> Result<Conn, NodeError> {
        let timeout = access.timeout;
        let unusable = |addr: String, e: String| NodeError {
            node: addr,
            problem: format!("has an unusable URL {}: {e}", redact_url(url)),
            unreachable: false,
        };
        let target = RedisTarget::parse(url).map_err(|e| unusable("redis".into(), e))?;
        let addr = target.describe();
        let client = match &target {
            RedisTarget::Single(url) => access.client(url).map(|c| Client::Node(Box::new(c))),
            RedisTarget::Cluster { seeds } => {
                access.cluster(seeds).map(|c| Client::Cluster(Box::new(c)))
            }
        }
        .map_err(|e| unusable(addr.clone(), e.to_string()))?;
        Ok(Conn {
            addr,
            target,
            client,
            timeout,
            access: access.clone(),
            slot: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(None),
            delex: OnceLock::new(),
        })
    }

    /// True once the server is known to have `DELEX … IFEQ`.
    pub fn has_delex(&self) -> bool {
        self.delex.get().copied().unwrap_or(false)
    }

    /// An error reaching this node.
    pub fn error(&self, problem: impl Into<String>) -> NodeError {
        NodeError {
            node: self.addr.clone(),
            problem: problem.into(),
            unreachable: true,
        }
    }

    /// An error this node answered with.
    pub fn refused(&self, problem: impl Into<String>) -> NodeError {
        NodeError {
            node: self.addr.clone(),
            problem: problem.into(),
            unreachable: false,
        }
    }

    /// True when this is a Redis Cluster (its scripts and pipelines must stay in one slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, RedisTarget::Cluster { .. })
    }

    fn describe(&self, e: &RedisError) -> (String, bool) {
        if is_permission(e) {
            (format!("refused us: {e}"), false)
        } else if e.is_connection_refusal() {
            ("refused the connection".into(), true)
        } else if e.is_timeout() {
            (
                format!("did not answer within {}ms", self.timeout.as_millis()),
                true,
            )
        } else if e.is_connection_dropped() || e.is_io_error() {
            (format!("dropped the connection ({e})"), true)
        } else {
            (format!("answered with an error: {e}"), false)
        }
    }

    async fn tls_refusal(&self, e: &RedisError) -> Option<String> {
        match &self.target {
            RedisTarget::Single(url) => refusal(&crate::config::host_port(url), url, e).await,
            RedisTarget::Cluster { seeds } => {
                let text = format!("{e} {:?}", e.detail());
                let first = crate::config::host_port(&seeds[0]);
                Refusal::of_text(&text).map(|r| r.explain(Backend::Redis, &first))
            }
        }
    }

    /// An operation that got no answer within the timeout: a TLS URL on a plaintext port says
    /// so ([`plaintext_port`](Self::plaintext_port)), anything else is a node not answering.
    pub(crate) async fn timed_out(&self) -> NodeError {
        match self.plaintext_port().await {
            Some(why) => self.refused(why),
            None => self.error(format!(
                "did not answer within {}ms",
                self.timeout.as_millis()
            )),
        }
    }

    /// Why a TLS connection got no handshake: the node's port speaks plaintext Redis. `None`
    /// for a plaintext URL, or a port that does not answer `PING` either.
    async fn plaintext_port(&self) -> Option<String> {
        let url = match &self.target {
            RedisTarget::Single(url) => url,
            RedisTarget::Cluster { seeds } => seeds.first()?,
        };
        let addr = crate::config::host_port(url);
        let tls = url.starts_with("rediss");
        (tls && crate::tls::speaks_plaintext(Backend::Redis, &addr).await)
            .then(|| Refusal::NoTls.explain(Backend::Redis, &addr))
    }

    fn cached(&self, runtime: tokio::runtime::Id) -> Option<RedisConn> {
        match &*self.slot.lock().expect("node slot") {
            Some((id, c)) if *id == runtime => Some(c.clone()),
            _ => None,
        }
    }

    /// A new connection, and whether the server has DELEX (asked once). A user whose ACL does
    /// not allow COMMAND just goes without DELEX.
    async fn connect(&self) -> Result<RedisConn, RedisError> {
        let mut conn = match &self.client {
            Client::Node(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                RedisConn::Node(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                )
            }
            Client::Cluster(client) => {
                let config = ClusterConfig::new()
                    .set_connection_timeout(self.timeout)
                    .set_response_timeout(self.timeout);
                RedisConn::Cluster(client.get_async_connection_with_config(config).await?)
            }
        };
        if self.delex.get().is_none() {
            // COMMAND INFO answers [nil] for a command the server does not have.
            let info = redis::cmd("COMMAND")
                .arg("INFO")
                .arg("DELEX")
                .query_async::<Value>(&mut conn)
                .await;
            let known = match info {
                Ok(Value::Array(items)) => items.first().is_some_and(|v| !matches!(v, Value::Nil)),
                Ok(_) => false,
                Err(e) if is_permission(&e) => false,
                Err(e) => return Err(e),
            };
            let _ = self.delex.set(known);
        }
        Ok(conn)
    }

    async fn connection(&self) -> Result<RedisConn, NodeError> {
        let runtime = tokio::runtime::Handle::current().id();
        if let Some(c) = self.cached(runtime) {
            return Ok(c);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(c) = self.cached(runtime) {
            return Ok(c);
        }
        if let Some((at, problem, unreachable)) = last_failure.as_ref() {
            if at.elapsed() < RECONNECT_PAUSE {
                return Err(self.failure(problem.clone(), *unreachable));
            }
        }
        match tokio::time::timeout(self.timeout, self.connect()).await {
            Ok(Ok(conn)) => {
                *self.slot.lock().expect("node slot") = Some((runtime, conn.clone()));
                *last_failure = None;
                Ok(conn)
            }
            Ok(Err(e)) => {
                // A TLS refusal is our configuration, not an outage: said as such, with the
                // setting to fix.
                let (problem, unreachable) = match self.tls_refusal(&e).await {
                    Some(why) => (why, false),
                    None => self.describe(&e),
                };
                *last_failure = Some((Instant::now(), problem.clone(), unreachable));
                Err(self.failure(problem, unreachable))
            }
            Err(_) => {
                // A TLS client on a plaintext port waits for a handshake that never comes.
                let (problem, unreachable) = match self.plaintext_port().await {
                    Some(why) => (why, false),
                    None => (
                        format!(
                            "did not accept a connection within {}ms",
                            self.timeout.as_millis()
                        ),
                        true,
                    ),
                };
                *last_failure = Some((Instant::now(), problem.clone(), unreachable));
                Err(self.failure(problem, unreachable))
            }
        }
    }

    fn failure(&self, problem: String, unreachable: bool) -> NodeError {
        NodeError {
            node: self.addr.clone(),
            problem,
            unreachable,
        }
    }

    /// Forget a connection that failed so the next call opens a new one.
    fn forget(&self) {
        *self.slot.lock().expect("node slot") = None;
    }

    /// Run `f` on this node's connection, the whole of it (connect included) bounded by the
    /// command timeout.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T, NodeError>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let attempt = async {
            let conn = self.connection().await?;
            f(conn).await.map_err(|e| {
                let (problem, unreachable) = self.describe(&e);
                if unreachable || e.is_unrecoverable_error() {
                    self.forget();
                }
                NodeError {
                    node: self.addr.clone(),
                    problem,
                    unreachable,
                }
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => {
                self.forget();
                Err(self.timed_out().await)
            }
        }
    }
}
