//! What the first-contact tests share: the real binary run with an environment only (a new
//! user's `profile suggest`) or with the suggested file, messages produced as a team's
//! producers send them (keyed by the client library's partitioner, keyed through Java's
//! murmur2, or without a key), and the trace document's parts.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use idemguard::stream::partitioner::Partitioner;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::Value as Json;

/// `idemguard [--config FILE] args` with `env` (trace events off); (exit status, stdout, stderr).
pub fn run(
    config: Option<&Path>,
    env: &[(String, String)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.args(args)
        .env_remove("IDEMGUARD_CONFIG")
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .env("IDEMGUARD_LOG", "error");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run idemguard");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `profile suggest --out DIR/profile.toml` under `env`, keys sampled under `redis_match`;
/// the file's path and text.
pub fn suggest(
    dir: &Path,
    env: &[(String, String)],
    redis_match: &str,
) -> (std::path::PathBuf, String) {
    let out = dir.join("profile.toml");
    let path = out.to_str().unwrap();
    let (code, stdout, stderr) = run(
        None,
        env,
        &[
            "profile",
            "suggest",
            "--out",
            path,
            "--redis-match",
            redis_match,
            "--deadline",
            "5s",
        ],
    );
    assert_eq!(code, Some(0), "profile suggest: {stdout}{stderr}");
    let text = std::fs::read_to_string(&out).expect("the suggested profile was written");
    (out, text)
}

/// `doctor --json` with the suggested file: every row ok and no warning (what "doctor clean"
/// means to a new user).
pub fn doctor_is_clean(config: &Path, env: &[(String, String)], profile: &str) {
    let (code, out, err) = run(Some(config), env, &["doctor", "--json"]);
    let rows: Vec<Json> =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("doctor --json: {e}: {out}{err}"));
    let bad: Vec<&Json> = rows
        .iter()
        .filter(|r| r["ok"] != true || r["warning"] == true)
        .collect();
    assert!(
        bad.is_empty(),
        "doctor is not clean on the suggested profile: {bad:#?}\n{profile}"
    );
    assert_eq!(code, Some(0), "{out}{err}");
}

/// `trace ID --json` with the suggested file and `env` on top; the document.
pub fn trace(config: &Path, env: &[(String, String)], id: &str) -> Json {
    let (_, out, err) = run(Some(config), env, &["trace", id, "--json"]);
    serde_json::Deserializer::from_str(&out)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON document: {out}{err}"))
}

pub fn entries<'a>(trace: &'a Json, layer: &str) -> Vec<&'a Json> {
    trace["data"]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["layer"] == layer)
        .collect()
}

/// What the trace says the source profile cannot show: the one `source profile` entry's notes.
pub fn profile_notes(trace: &Json) -> Vec<String> {
    entries(trace, "db")
        .iter()
        .filter(|e| e["source"] == "source profile")
        .flat_map(|e| e["fields"]["notes"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect()
}

pub fn warnings(trace: &Json) -> Vec<String> {
    trace["data"]["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The trace's Kafka copies (the `kafka` entries read from the payment topic).
pub fn kafka_copies(trace: &Json, topic: &str) -> usize {
    entries(trace, "kafka")
        .iter()
        .filter(|e| e["source"].as_str().unwrap_or("").starts_with(topic))
        .count()
}

/// One message as a team's producer sends it.
pub struct Produced {
    pub key: Option<String>,
    /// `None`: the client library's partitioner chooses (librdkafka's consistent_random).
    pub partition: Option<i32>,
    pub body: Json,
    pub at_ms: i64,
}

/// The partition Java's client puts `key` in among 3 (the fixtures' topics have 3).
pub fn murmur2_partition(key: &str) -> i32 {
    Partitioner::Murmur2Random
        .partition_of(key.as_bytes(), 3)
        .unwrap()
}

pub fn crc32_partition(key: &str) -> i32 {
    Partitioner::ConsistentRandom
        .partition_of(key.as_bytes(), 3)
        .unwrap()
}

pub async fn produce(servers: &str, topic: &str, messages: &[Produced]) {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .unwrap();
    for m in messages {
        let payload = m.body.to_string();
        let mut record = FutureRecord::<String, String>::to(topic)
            .payload(&payload)
            .timestamp(m.at_ms);
        if let Some(k) = &m.key {
            record = record.key(k);
        }
        if let Some(p) = m.partition {
            record = record.partition(p);
        }
        producer
            .send(record, Duration::from_secs(10))
            .await
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
    }
}

/// A key prefix of letters only, from a test's unique suffix: the suggestion's key patterns
/// replace parts with digits (IDs), and a test's prefix must stay a prefix.
pub fn letters(tag: &str) -> String {
    tag.chars()
        .map(|c| match c.to_digit(16) {
            Some(d) => (b'g' + d as u8) as char,
            None => c,
        })
        .collect()
}

/// The value of `key` in `[section]` of the suggested TOML.
pub fn value(profile: &str, section: &str, key: &str) -> toml::Value {
    let t: toml::Table =
        toml::from_str(profile).unwrap_or_else(|e| panic!("the suggestion parses: {e}\n{profile}"));
    let mut at = toml::Value::Table(t);
    for part in section.split('.').chain(key.split('.')) {
        at = at
            .get(part)
            .cloned()
            .unwrap_or_else(|| panic!("[{section}] {key} in the suggestion:\n{profile}"));
    }
    at
}

/// What a suggestion of a database needs: its URL; no trace topic, no log file, Redis sampled
/// under a prefix nothing has (the payment topic stays the stack's).
pub fn database_only_env(url: &str) -> Vec<(String, String)> {
    [
        ("IDEMGUARD_DATABASE__URL", url),
        ("IDEMGUARD_KAFKA__TRACE_TOPIC", ""),
        ("IDEMGUARD_LOGS__TOPIC", ""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `profile suggest` of the database at `url` with `args` added; (the file's path, its text,
/// stderr).
pub fn suggest_database(
    dir: &Path,
    url: &str,
    args: &[&str],
) -> (std::path::PathBuf, String, String) {
    let out = dir.join("profile.toml");
    let mut all = vec![
        "profile",
        "suggest",
        "--out",
        out.to_str().unwrap(),
        "--redis-match",
        "igt-nothing-here:*",
        "--deadline",
        "5s",
    ];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run(None, &database_only_env(url), &all);
    assert_eq!(code, Some(0), "profile suggest: {stdout}{stderr}");
    let text = std::fs::read_to_string(&out).expect("the suggested profile was written");
    (out, text, stderr)
}

/// `doctor --json`'s rows about the source profile (its tables, columns and their meaning).
pub fn source_profile_rows(config: &Path, env: &[(String, String)]) -> Vec<Json> {
    let (_, out, err) = run(Some(config), env, &["doctor", "--json"]);
    let rows: Vec<Json> =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("doctor --json: {e}: {out}{err}"));
    rows.into_iter()
        .filter(|r| r["service"] == "source profile")
        .collect()
}

/// The failing rows among `rows`.
pub fn failing(rows: &[Json]) -> Vec<&Json> {
    rows.iter().filter(|r| r["ok"] != true).collect()
}
