//! The Java side of Kafka as a test peer: the Java payment producer
//! (tests/peers/java-payment-producer, built by `scripts/stack up`) a team's payment service
//! publishes with, and Kafka's own log dump, which says how the broker holds each batch (its
//! codec, the idempotent producer that wrote it). A peer that is not built, or was built from
//! other sources than the tree holds, fails the test with the command that builds it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files `scripts/stack up` hashes into the build's `sources.sha256`, in its order.
const PEER_SOURCES: [&str; 2] = [
    "pom.xml",
    "src/main/java/dev/idemguard/peers/PaymentProducer.java",
];

/// Whether the producer keys a message by its orderNo (the Java partitioner's murmur2 places
/// it) or sends it with no key (the client's sticky partition).
#[derive(Debug, Clone, Copy)]
pub enum Keying {
    ByOrderNo,
    None,
}

/// Where the broker put one message the producer sent (its `line`-th event, from 1).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Acked {
    pub line: usize,
    pub partition: i32,
    pub offset: i64,
}

/// The built Java payment producer.
pub struct JavaPaymentProducer {
    jar: PathBuf,
}

impl JavaPaymentProducer {
    /// The producer `scripts/stack up` built from the sources the tree holds now.
    pub fn built() -> JavaPaymentProducer {
        let src = repo().join("tests/peers/java-payment-producer");
        let out = repo().join(".stack/peers/java-payment-producer");
        let jar = out.join("java-payment-producer.jar");
        assert!(
            jar.is_file(),
            "the Java payment producer is not built ({}): run scripts/stack up",
            jar.display()
        );
        let mut sources = Sha256::new();
        for f in PEER_SOURCES {
            sources.update(std::fs::read(src.join(f)).expect("the peer's sources"));
        }
        let stamp = std::fs::read_to_string(out.join("sources.sha256")).unwrap_or_default();
        assert_eq!(
            stamp.trim(),
            hex::encode(sources.finalize()),
            "{} was built from other sources than tests/peers/java-payment-producer holds: run scripts/stack up",
            jar.display()
        );
        JavaPaymentProducer { jar }
    }

    /// Sends `events` (JSON lines) to `topic` in one run: batches compressed with `codec`
    /// (Kafka's names: gzip, lz4, zstd, ...), keyed as `keying` says; where each went, in order.
    /// Fails the test when the producer exits non-zero.
    pub async fn send(
        &self,
        servers: &str,
        topic: &str,
        codec: &str,
        keying: Keying,
        events: &[String],
    ) -> Vec<Acked> {
        let keyed = match keying {
            Keying::ByOrderNo => "keyed",
            Keying::None => "unkeyed",
        };
        let mut child = tokio::process::Command::new("java")
            .arg("-jar")
            .arg(&self.jar)
            .args([servers, topic, codec, keyed, "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("java runs (scripts/stack up installs it)");
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all((events.join("\n") + "\n").as_bytes())
            .await
            .unwrap();
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("the Java payment producer finished within 60s")
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "the Java payment producer ({codec}, {keyed}) failed, {}: {stderr}{stdout}",
            out.status
        );
        let acked: Vec<Acked> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(acked.len(), events.len(), "{stdout}{stderr}");
        acked
    }
}

/// One record batch as the broker keeps it in its log.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    pub partition: i32,
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    pub codec: String,
    pub records: usize,
    /// -1 for a producer without idempotence.
    pub producer_id: i64,
}

/// Every batch of `topic` in the stack's broker's log files, read by Kafka's DumpLogSegments
/// (the stack's jars, its data directory): what the producer really wrote, not what it was
/// asked to.
pub fn batches_on_broker(topic: &str) -> Vec<StoredBatch> {
    let kafka = repo().join(".stack/kafka");
    let mut logs: Vec<PathBuf> = glob::glob(&format!("{}/data/{topic}-*/*.log", kafka.display()))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    logs.sort();
    assert!(
        !logs.is_empty(),
        "no log file of {topic} under {}/data",
        kafka.display()
    );
    let files: Vec<String> = logs.iter().map(|p| p.display().to_string()).collect();
    let out = std::process::Command::new("java")
        .arg("-cp")
        .arg(kafka.join("libs/*"))
        .args(["org.apache.kafka.tools.DumpLogSegments", "--files"])
        .arg(files.join(","))
        .output()
        .expect("java runs Kafka's DumpLogSegments (scripts/stack up)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "DumpLogSegments: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut partition = -1;
    let mut batches = Vec::new();
    for line in text.lines() {
        if let Some(file) = line.strip_prefix("Dumping ") {
            // .../data/<topic>-<partition>/<base offset>.log
            let dir = Path::new(file).parent().unwrap().file_name().unwrap();
            let dir = dir.to_string_lossy();
            partition = dir[dir.rfind('-').unwrap() + 1..].parse().unwrap();
        } else if line.starts_with("baseOffset:") {
            // `name: value` pairs, space-separated.
            let words: Vec<&str> = line.split_whitespace().collect();
            let field = |name: &str| {
                let at = words.iter().position(|w| *w == format!("{name}:"));
                at.map(|i| words[i + 1].to_string())
                    .unwrap_or_else(|| panic!("no {name} in: {line}"))
            };
            batches.push(StoredBatch {
                partition,
                codec: field("compresscodec"),
                records: field("count").parse().unwrap(),
                producer_id: field("producerId").parse().unwrap(),
            });
        }
    }
    batches
}
