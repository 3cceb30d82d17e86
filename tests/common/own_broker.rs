//! An Apache Kafka broker of the test's own, for faults that must not touch the stack's shared
//! broker (other tests run against it at the same time): SIGKILL, then a restart on the same
//! data. One KRaft node (broker and controller in one JVM) from the stack's jars
//! (`.stack/kafka/libs`, which `scripts/stack up` installs), formatted with Kafka's StorageTool
//! into a temporary directory, on two free loopback ports (PLAINTEXT and CONTROLLER), with a
//! small heap. The JVM is killed and reaped when the [`OwnBroker`] is dropped — the test passed
//! or panicked — and dies with the test process if that is killed first (PR_SET_PDEATHSIG).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

/// How long a start (JVM, log recovery, the controller's election, the broker unfenced) may
/// take: about 4 s on an idle machine, and the suite runs on two busy cores.
const START_BOUND: Duration = Duration::from_secs(90);
/// The broker's heap: a test broker holds a few hundred small events.
const HEAP: &str = "-Xmx512m";

/// A running (or killed) single-node Kafka broker whose data lives as long as this value.
pub struct OwnBroker {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// How many times it was started.
    starts: u32,
}

impl OwnBroker {
    /// Formats a fresh data directory and starts the broker on it; returns once it answers
    /// metadata requests. Panics, naming `scripts/stack up`, when the jars or java are missing.
    pub async fn start() -> OwnBroker {
        let libs = libs();
        let dir = tempfile::Builder::new()
            .prefix("igt-kafka-")
            .tempdir()
            .expect("a temporary directory for the broker");
        let (port, controller) = free_ports();
        write_config(dir.path(), port, controller);
        format_storage(dir.path(), &libs);
        let mut broker = OwnBroker {
            dir,
            port,
            child: None,
            starts: 0,
        };
        broker.launch().await;
        broker
    }

    /// Where clients reach it (`kafka.bootstrap_servers`).
    pub fn bootstrap_servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no controlled shutdown, no flush, sockets closed by the kernel. Returns once the
    /// JVM is reaped; its data directory stays for [`OwnBroker::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same data and ports (after [`OwnBroker::kill`]); returns
    /// once it answers. It recovers its logs from an unclean shutdown first.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the broker is still running");
        self.launch().await;
    }

    /// Creates `names` with `partitions` partitions each (replication 1). Nothing to remove at
    /// the end: the topics go with the data directory.
    pub async fn create_topics(&self, names: &[&str], partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap_servers())
            .set("log_level", "3")
            .create()
            .expect("an admin client of the test's broker");
        let topics: Vec<NewTopic> = names
            .iter()
            .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
        let created = admin
            .create_topics(&topics, &opts)
            .await
            .unwrap_or_else(|e| panic!("the test's broker created no topic: {e}{}", self.tail()));
        for r in created {
            r.unwrap_or_else(|(t, e)| panic!("the test's broker: topic {t}: {e}"));
        }
    }

    /// The last lines of its log (server.log), for a failure message.
    pub fn tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "\n--- last lines of {}/server.log ---\n{}",
            self.dir.path().display(),
            lines[from..].join("\n")
        )
    }

    /// Starts the JVM on the formatted directory and waits (bounded) until it answers.
    async fn launch(&mut self) {
        self.starts += 1;
        let dir = self.dir.path();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("stdout.log"))
            .expect("the broker's stdout.log");
        let mut jvm = kafka_java(dir, &libs());
        jvm.arg("kafka.Kafka")
            .arg(dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        // SAFETY: prctl is async-signal-safe and touches nothing of the parent's. The signal is
        // tied to the thread that forks, which is the test's own (or its runtime's worker): both
        // outlive the broker, which Drop kills first.
        unsafe {
            jvm.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.child = Some(
            jvm.spawn()
                .expect("java starts (scripts/stack up installs it)"),
        );
        self.until_answering().await;
    }

    /// Until a metadata request names the broker; panics with its log when it exited or the
    /// bound passed.
    async fn until_answering(&mut self) {
        let started = Instant::now();
        let servers = self.bootstrap_servers();
        loop {
            let exited = self.child.as_mut().and_then(|c| c.try_wait().unwrap());
            if let Some(status) = exited {
                panic!(
                    "the test's broker exited ({status}) during start {}{}",
                    self.starts,
                    self.tail()
                );
            }
            if answers(&servers).await {
                return;
            }
            if started.elapsed() > START_BOUND {
                self.kill();
                panic!(
                    "the test's broker on {servers} did not answer within {START_BOUND:?} (start {}){}",
                    self.starts,
                    self.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The stack's Kafka jars; a missing directory fails the test with the command that installs it.
fn libs() -> PathBuf {
    let libs = Path::new(env!("CARGO_MANIFEST_DIR")).join(".stack/kafka/libs");
    let has_kafka = std::fs::read_dir(&libs)
        .map(|d| {
            d.flatten()
                .any(|f| f.file_name().to_string_lossy().starts_with("kafka_2.13-"))
        })
        .unwrap_or(false);
    assert!(
        has_kafka,
        "no Kafka jars in {} (kafka_2.13-*.jar): run scripts/stack up",
        libs.display()
    );
    libs
}

/// The JVM of the broker and of StorageTool: a small heap, the serial collector and the client
/// compiler only (cheap on two shared cores; a test broker carries little), the directory's
/// logging configuration, the stack's class path.
fn kafka_java(dir: &Path, libs: &Path) -> Command {
    let mut c = Command::new("java");
    c.args([
        "-Xms64m",
        HEAP,
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
    ])
    .arg("-Djava.awt.headless=true")
    .arg(format!(
        "-Dlog4j2.configurationFile={}",
        dir.join("log4j2.properties").display()
    ))
    .arg("-cp")
    .arg(libs.join("*"));
    c
}

/// Two distinct loopback ports free now (the broker binds them a moment later; a restart binds
/// them again).
fn free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    let (a, b) = (bind(), bind());
    let port = |l: &std::net::TcpListener| l.local_addr().unwrap().port();
    (port(&a), port(&b))
}

/// server.properties and log4j2.properties. The stack's broker's settings for one node, its
/// listeners reduced to PLAINTEXT and CONTROLLER; the broker's session with its controller is
/// short, so that after a SIGKILL the restarted broker is not kept fenced for the old session's
/// 9 s.
fn write_config(dir: &Path, port: u16, controller: u16) {
    let data = dir.join("data");
    let properties = format!(
        "process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
num.network.threads=2
num.io.threads=2
",
        data = data.display()
    );
    let log4j = format!(
        "status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = warn
",
        log = dir.join("server.log").display()
    );
    for (name, text) in [
        ("server.properties", properties),
        ("log4j2.properties", log4j),
    ] {
        std::fs::File::create(dir.join(name))
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .unwrap_or_else(|e| panic!("the broker's {name}: {e}"));
    }
}

/// `StorageTool format --standalone` with a fresh cluster ID (a random UUID, URL-safe base64,
/// as `StorageTool random-uuid` prints one).
fn format_storage(dir: &Path, libs: &Path) {
    use base64::Engine;
    let id =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes());
    let out = kafka_java(dir, libs)
        .args([
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "-t",
            &id,
            "-c",
        ])
        .arg(dir.join("server.properties"))
        .stdin(Stdio::null())
        .output()
        .expect("java starts (scripts/stack up installs it)");
    assert!(
        out.status.success(),
        "StorageTool format failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// True when a metadata request to `servers` names a broker within 3 s.
async fn answers(servers: &str) -> bool {
    let port_open = tokio::net::TcpStream::connect(servers).await.is_ok();
    if !port_open {
        return false;
    }
    let servers = servers.to_string();
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = match ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("log_level", "0")
            .create()
        {
            Ok(c) => c,
            Err(_) => return false,
        };
        c.fetch_metadata(None, Duration::from_secs(3))
            .map(|m| !m.brokers().is_empty())
            .unwrap_or(false)
    })
    .await
    .unwrap_or(false)
}
