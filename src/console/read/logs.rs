//! Logs as a trace source (issue 17): a team's services write JSON lines that carry orderNo,
//! requestId and eventId (the article's §6.5: "string the whole chain together with one ID"),
//! and have no idemguard trace topic. The lines of one trace are read from files (globs; rotated
//! and gzip-compressed files included) and/or the Kafka topic the logs are shipped to, within the
//! same bounded time windows as the topics ([`crate::console::read::window`]), and shown in the
//! timeline with their service, level and message.
//!
//! Read-only and bounded: a file is streamed line by line and only the lines of the trace are
//! kept (at most [`LINES_KEPT`]); a line that is not JSON, or has no time, is skipped.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, LogsConfig};
use crate::console::read::bounded::TOPIC_READ_DEADLINE;
use crate::console::read::sources::blocking;
use crate::console::read::topics;
use crate::console::read::window::{self, TimeWindow, TopicPlan, WindowBasis};
use crate::stream::partitioner::Partitioner;

/// Lines one trace keeps: a runaway service logging the same ID in a loop cannot exhaust the
/// console.
pub const LINES_KEPT: usize = 5_000;

/// One log line of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub at_ms: i64,
    pub service: Option<String>,
    pub level: Option<String>,
    pub message: String,
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    pub event_id: Option<String>,
    /// `file:line`, or `topic pN@offset`.
    pub source: String,
}

/// What a read of the logs found, and what failed (per file or topic).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LogRead {
    pub lines: Vec<LogLine>,
    pub files_read: usize,
    pub errors: Vec<String>,
}

/// The lines naming one of `ids`, inside one of `windows`, from the configured files and topic.
pub async fn read_logs(config: &Config, ids: &[String], windows: &[TimeWindow]) -> LogRead {
    let (c, ids, windows) = (config.clone(), ids.to_vec(), windows.to_vec());
    let read = blocking(move || Ok(read_all(&c, &ids, &windows))).await;
    read.unwrap_or_else(|e| LogRead {
        errors: vec![format!("{e:#}")],
        ..LogRead::default()
    })
}

/// The log lines of a traced timeline's IDs, in the windows its database rows name (else
/// `unknown_id_window`), added to it. Nothing is read when no log source is configured.
pub async fn add_to_timeline(
    config: &Config,
    timeline: &mut crate::console::read::timeline::Timeline,
    rows: Option<&crate::console::read::records::TraceRows>,
    unknown_id_window: TimeWindow,
) {
    if !configured(config) {
        return;
    }
    let mut ids: Vec<String> = vec![timeline.query.clone()];
    ids.extend(timeline.order_no.clone());
    ids.extend(timeline.request_id.clone());
    ids.extend(timeline.event_ids.iter().cloned());
    let read = read_for_trace(config, &ids, rows, unknown_id_window).await;
    timeline.add_log_lines(&read, &crate::mask::Mask::of(config));
}

/// True when a log file glob or a shipped-logs topic is configured.
pub fn configured(config: &Config) -> bool {
    !config.logs.files.is_empty() || !config.logs.topic.is_empty()
}

/// The lines naming one of `ids`, in the windows `rows` name (else `unknown_id_window`): what
/// the one-shot trace and the TUI's logs collector both read.
pub async fn read_for_trace(
    config: &Config,
    ids: &[String],
    rows: Option<&crate::console::read::records::TraceRows>,
    unknown_id_window: TimeWindow,
) -> LogRead {
    let times = rows.map(window::row_times).unwrap_or_default();
    let windows = if times.is_empty() {
        vec![unknown_id_window]
    } else {
        window::windows_around(&times, config.console.trace_margin)
    };
    read_logs(config, ids, &windows).await
}

fn read_all(config: &Config, ids: &[String], windows: &[TimeWindow]) -> LogRead {
    let ids: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    let mut out = LogRead::default();
    for pattern in &config.logs.files {
        let paths = match glob::glob(pattern) {
            Ok(p) => p,
            Err(e) => {
                out.errors.push(format!("logs.files {pattern:?}: {e}"));
                continue;
            }
        };
        for path in paths.flatten() {
            match read_file(&config.logs, &path, &ids, windows, &mut out.lines) {
                Ok(()) => out.files_read += 1,
                Err(e) => out.errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
    if !config.logs.topic.is_empty() {
        if let Err(e) = read_topic(config, &ids, windows, &mut out.lines) {
            out.errors.push(format!("{e:#}"));
        }
    }
    out.lines.sort_by_key(|l| l.at_ms);
    out.lines.truncate(LINES_KEPT);
    out
}

/// One file, gzip-compressed when it ends in `.gz`.
fn read_file(
    fields: &LogsConfig,
    path: &Path,
    ids: &BTreeSet<&str>,
    windows: &[TimeWindow],
    out: &mut Vec<LogLine>,
) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    let reader: Box<dyn Read> = match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => Box::new(flate2::read::MultiGzDecoder::new(file)),
        _ => Box::new(file),
    };
    for (n, line) in BufReader::new(reader).lines().enumerate() {
        let line = line?;
        let source = || format!("{}:{}", path.display(), n + 1);
        if let Some(l) = parse_line(fields, line.as_bytes(), ids, windows, source) {
            if out.len() < LINES_KEPT {
                out.push(l);
            }
        }
    }
    Ok(())
}

/// The logs topic, in the trace's windows, every partition (log shippers key by host, not ID).
fn read_topic(
    config: &Config,
    ids: &BTreeSet<&str>,
    windows: &[TimeWindow],
    out: &mut Vec<LogLine>,
) -> anyhow::Result<()> {
    let plan = TopicPlan {
        topic: config.logs.topic.clone(),
        basis: WindowBasis::DatabaseTimes,
        windows: windows.to_vec(),
        keys: Vec::new(),
        partitioner: Partitioner::None,
        known_partitions: Vec::new(),
    };
    let cancel = CancellationToken::new();
    topics::read_windows(config, &plan, TOPIC_READ_DEADLINE, &cancel, |m| {
        let Some(payload) = rdkafka::Message::payload(m) else {
            return;
        };
        let source = || {
            let (p, o) = (rdkafka::Message::partition(m), rdkafka::Message::offset(m));
            format!("{} p{p}@{o}", config.logs.topic)
        };
        if let Some(l) = parse_line(&config.logs, payload, ids, windows, source) {
            if out.len() < LINES_KEPT {
                out.push(l);
            }
        }
    })?;
    Ok(())
}

/// A JSON line that names one of `ids` inside one of `windows`.
fn parse_line(
    f: &LogsConfig,
    raw: &[u8],
    ids: &BTreeSet<&str>,
    windows: &[TimeWindow],
    source: impl FnOnce() -> String,
) -> Option<LogLine> {
    let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let text = |name: &str| match v.get(name)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let (order_no, request_id, event_id) = (
        text(&f.order_no_field),
        text(&f.request_id_field),
        text(&f.event_id_field),
    );
    let named = [&order_no, &request_id, &event_id]
        .iter()
        .any(|id| id.as_deref().is_some_and(|i| ids.contains(i)));
    let at_ms = time_ms(v.get(&f.time_field)?)?;
    let inside = windows
        .iter()
        .any(|w| (w.from_ms..=w.to_ms).contains(&at_ms));
    (named && inside).then(|| LogLine {
        at_ms,
        service: text(&f.service_field),
        level: text(&f.level_field),
        message: text(&f.message_field).unwrap_or_default(),
        order_no,
        request_id,
        event_id,
        source: source(),
    })
}

/// Epoch ms from epoch ms or seconds (a number; below 10^11 it is seconds) or RFC 3339 UTC text.
fn time_ms(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::Number(n) => {
            let x = n.as_f64()?;
            Some(if x < 1e11 {
                (x * 1000.0) as i64
            } else {
                x as i64
            })
        }
        // UTC text (`…Z`, or without a zone), as log shippers write it.
        serde_json::Value::String(s) => {
            let t = humantime::parse_rfc3339_weak(s.trim_end_matches('Z')).ok()?;
            let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
            Some(d.as_millis() as i64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_seconds_millis_and_text_agree() {
        let ms = 1_764_576_000_000i64;
        assert_eq!(time_ms(&serde_json::json!(ms)), Some(ms));
        assert_eq!(time_ms(&serde_json::json!(ms / 1000)), Some(ms));
        assert_eq!(
            time_ms(&serde_json::json!("2025-12-01T08:00:00Z")),
            Some(ms)
        );
    }
}
