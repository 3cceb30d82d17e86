//! The log side of a suggested profile: the field names of time, message, level, service and
//! the IDs in a bounded sample of the configured JSON-lines files (the newest few, their first
//! lines) and of the shipped-logs topic. The conventions are the trace's own
//! ([`logs::TIME_FIELDS`] …): what is suggested here is what the trace would read anyway, made
//! explicit and checked against the lines.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

use crate::config::LogsConfig;
use crate::console::read::logs;
use crate::profile::messages::id_names;

/// Files sampled per glob (the newest first), lines and bytes per file.
pub const FILES_PER_GLOB: usize = 3;
pub const LINES_PER_FILE: usize = 200;
pub const BYTES_PER_FILE: u64 = 256 * 1024;

/// The JSON lines read, and from where.
#[derive(Debug, Clone, Default)]
pub struct LogSample {
    pub lines: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Lines that were not JSON objects.
    pub not_json: usize,
    pub sources: Vec<String>,
    pub errors: Vec<String>,
}

/// The newest files of each glob, their first lines; blocking.
pub fn sample_files(globs: &[String]) -> LogSample {
    let mut out = LogSample::default();
    for pattern in globs {
        let mut paths: Vec<(std::time::SystemTime, PathBuf)> = match glob::glob(pattern) {
            Ok(p) => p
                .flatten()
                .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
                .collect(),
            Err(e) => {
                out.errors.push(format!("logs.files {pattern:?}: {e}"));
                continue;
            }
        };
        paths.sort_by_key(|p| std::cmp::Reverse(p.0));
        for (_, path) in paths.into_iter().take(FILES_PER_GLOB) {
            match read_head(&path) {
                Ok(raw) => {
                    out.sources.push(path.display().to_string());
                    for line in raw {
                        out.add(line.as_bytes());
                    }
                }
                Err(e) => out.errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
    out
}

fn read_head(path: &std::path::Path) -> std::io::Result<Vec<String>> {
    // Only a regular file (a FIFO would block for ever, a device never end): the trace's rule.
    let file = match logs::open_regular(path)? {
        Ok((file, _)) => file,
        Err(why) => return Err(std::io::Error::other(why)),
    };
    let reader: Box<dyn Read> = match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => Box::new(flate2::read::MultiGzDecoder::new(file)),
        _ => Box::new(file),
    };
    let mut lines = Vec::new();
    let mut bounded = BufReader::new(reader.take(BYTES_PER_FILE));
    let mut buf = Vec::new();
    while lines.len() < LINES_PER_FILE {
        buf.clear();
        if bounded.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        lines.push(String::from_utf8_lossy(&buf).into_owned());
    }
    Ok(lines)
}

impl LogSample {
    pub fn add(&mut self, raw: &[u8]) {
        match serde_json::from_slice::<serde_json::Value>(raw) {
            Ok(serde_json::Value::Object(map)) => self.lines.push(map),
            _ => self.not_json += 1,
        }
    }

    /// How many lines carry each top-level field with a string or number.
    fn field_counts(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for l in &self.lines {
            for (k, v) in l {
                if v.is_string() || v.is_number() {
                    *out.entry(k.as_str()).or_default() += 1;
                }
            }
        }
        out
    }
}

/// One field's guess: the name and in how many of the lines it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldGuess {
    /// The `[logs]` key (`time_field` …).
    pub key: &'static str,
    /// "" when no line has one.
    pub name: String,
    pub found_in: usize,
}

/// The `[logs]` field names the sample supports: for each, the first of the configured name and
/// the conventions that the lines carry (the IDs by their names, as the messages' are).
pub fn guess_fields(sample: &LogSample, configured: &LogsConfig) -> Vec<FieldGuess> {
    let counts = sample.field_counts();
    let by_convention = |key: &'static str, own: &str, names: &[&str]| {
        let found = std::iter::once(own)
            .chain(names.iter().copied())
            .find_map(|n| counts.get(n).map(|c| (n.to_string(), *c)));
        let (name, found_in) = found.unwrap_or_default();
        FieldGuess {
            key,
            name,
            found_in,
        }
    };
    let by_id = |key: &'static str, own: &str, id: &str| {
        let named = |n: &str| {
            let norm: String = n
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_lowercase();
            id_names(id).contains(&norm.as_str())
        };
        let found = counts.get_key_value(own).or_else(|| {
            counts
                .iter()
                .filter(|(n, _)| named(n))
                .max_by_key(|(_, c)| **c)
        });
        let (name, found_in) = found.map(|(n, c)| (n.to_string(), *c)).unwrap_or_default();
        FieldGuess {
            key,
            name,
            found_in,
        }
    };
    vec![
        by_convention("time_field", &configured.time_field, logs::TIME_FIELDS),
        by_convention(
            "message_field",
            &configured.message_field,
            logs::MESSAGE_FIELDS,
        ),
        by_convention("level_field", &configured.level_field, logs::LEVEL_FIELDS),
        by_convention(
            "service_field",
            &configured.service_field,
            logs::SERVICE_FIELDS,
        ),
        by_id("order_no_field", &configured.order_no_field, "order_no"),
        by_id(
            "request_id_field",
            &configured.request_id_field,
            "request_id",
        ),
        by_id("event_id_field", &configured.event_id_field, "event_id"),
    ]
}
