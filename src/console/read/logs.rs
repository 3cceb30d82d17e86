//! Logs as a trace source: a team's services write JSON lines that carry orderNo,
//! requestId and eventId (the article's §6.5: "string the whole chain together with one ID"),
//! and have no idemguard trace topic. The lines of one trace are read from files (globs; rotated
//! and gzip-compressed files included) and/or the Kafka topic the logs are shipped to, within the
//! same bounded time windows as the topics ([`crate::console::read::window`]), and shown in the
//! timeline with their service, level and message.
//!
//! Read-only and bounded: a file is streamed line by line and only the lines of the trace are
//! kept (at most [`LINES_KEPT`]). The files are other systems' and may be anything: only regular
//! files are read — a symlink to one followed once; a FIFO (which would block the read for
//! ever), a device (`/dev/zero` never ends), a directory or a symlink to a symlink is skipped —
//! each file once by its identity (device and inode: a `**` glob through a symlink loop names
//! one file dozens of times), at most `logs.max_file_bytes` of each and `logs.max_trace_bytes`
//! of all, a line never held beyond `logs.max_line_bytes` (a 1.5 GB line in a 6 MB `.gz` cost
//! 1.5 GB), and a line that is not UTF-8 read with its bad bytes replaced — that line only (one
//! `\xff` used to end the file's read, losing every later line). What was skipped, and why, is
//! said in the trace ([`Skipped`]). The field names of the common encoders are read without
//! configuration ([`TIME_FIELDS`] …, the configured names first); a line that names a traced ID
//! but cannot be placed (not JSON, no readable time, outside the windows) is counted with the
//! reason ([`Unplaced`]) and said in the trace.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, LogsConfig};
use crate::console::read::bounded::TOPIC_READ_DEADLINE;
use crate::console::read::kafka;
use crate::console::read::sources::blocking;
use crate::console::read::window::{TimeWindow, TopicPlan, WindowBasis};
use crate::stream::partitioner::Partitioner;

/// Lines one trace keeps: a runaway service logging the same ID in a loop cannot exhaust the
/// console.
pub const LINES_KEPT: usize = 5_000;

/// The field names of the common JSON encoders, tried after the configured one: logback's
/// (`@timestamp`, `message`), zap's and pino's (`ts`, `msg`), Go's slog (`time`), structlog's
/// (`event`), Google Cloud's `severity`. A line is read whichever its service uses.
pub const TIME_FIELDS: &[&str] = &["@timestamp", "timestamp", "ts", "time"];
pub const MESSAGE_FIELDS: &[&str] = &["message", "msg", "event"];
pub const LEVEL_FIELDS: &[&str] = &["level", "severity"];
pub const SERVICE_FIELDS: &[&str] = &["service", "app", "application", "appName", "service_name"];

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
    /// Lines that name a traced ID but could not be placed in the timeline, by reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unplaced: Vec<Unplaced>,
    /// Files, and parts of files, not read, by reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// What a read of the log files did not read, for one reason: said, never in silence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub reason: String,
    /// How many files (or lines, for a line too long) it applies to.
    pub count: u64,
    /// The first (`file` or `file:line`).
    pub first: String,
}

/// Lines that name a traced ID but are not shown, for one reason: counted and said, never
/// dropped in silence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unplaced {
    pub reason: String,
    pub lines: u64,
    /// Where the first such line is (`file:line`).
    pub first: String,
    /// For lines outside the windows: the earliest and latest of their times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<(i64, i64)>,
}

/// Why a line naming a traced ID is not shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Unplaceable {
    NotJson,
    NoTime,
    UnreadableTime,
    OutsideWindows(i64),
}

impl Unplaceable {
    /// The order the reasons are said in.
    fn rank(self) -> u8 {
        match self {
            Unplaceable::NotJson => 0,
            Unplaceable::NoTime => 1,
            Unplaceable::UnreadableTime => 2,
            Unplaceable::OutsideWindows(_) => 3,
        }
    }

    fn reason(self, f: &LogsConfig) -> String {
        let names = std::iter::once(f.time_field.as_str())
            .chain(TIME_FIELDS.iter().copied())
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            Unplaceable::NotJson => "not a JSON object (logs are read as JSON lines)".into(),
            Unplaceable::NoTime => format!("no time field (looked for {names}): set logs.time_field"),
            Unplaceable::UnreadableTime => format!("a time that is neither epoch ms/s nor RFC 3339 (fields {names})"),
            Unplaceable::OutsideWindows(_) => "outside the trace's windows (a wrong source.time_zone, or console.trace_margin too narrow?)".into(),
        }
    }
}

/// The lines a read keeps, and the lines it counts as unplaced.
#[derive(Default)]
struct Kept {
    lines: Vec<LogLine>,
    unplaced: std::collections::BTreeMap<u8, Unplaced>,
}

impl Kept {
    fn keep(&mut self, f: &LogsConfig, parsed: Parsed, source: impl FnOnce() -> String) {
        match parsed {
            Parsed::Line(l) => {
                if self.lines.len() < LINES_KEPT {
                    self.lines.push(LogLine {
                        source: source(),
                        ..l
                    });
                }
            }
            Parsed::Unplaced(why) => {
                let u = self.unplaced.entry(why.rank()).or_insert_with(|| Unplaced {
                    reason: why.reason(f),
                    lines: 0,
                    first: source(),
                    times: None,
                });
                u.lines += 1;
                if let Unplaceable::OutsideWindows(ms) = why {
                    let (lo, hi) = u.times.unwrap_or((ms, ms));
                    u.times = Some((lo.min(ms), hi.max(ms)));
                }
            }
            Parsed::Other => {}
        }
    }
}

/// What one line is to a trace.
enum Parsed {
    Line(LogLine),
    Unplaced(Unplaceable),
    /// Names no traced ID.
    Other,
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
    let (_, windows) =
        crate::console::read::bounded::trace_windows(config, rows, unknown_id_window);
    read_logs(config, ids, &windows).await
}

fn read_all(config: &Config, ids: &[String], windows: &[TimeWindow]) -> LogRead {
    let ids: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    let mut out = LogRead::default();
    let mut kept = Kept::default();
    let mut files = FileWalk::new(&config.logs);
    for pattern in &config.logs.files {
        let paths = match glob::glob(pattern) {
            Ok(p) => p,
            Err(e) => {
                out.errors.push(format!("logs.files {pattern:?}: {e}"));
                continue;
            }
        };
        for (n, path) in paths.flatten().enumerate() {
            if n == PATHS_PER_GLOB {
                let why = format!("more than {PATHS_PER_GLOB} paths match {pattern:?}");
                files.skip(why, &path.display());
                break;
            }
            let read = |file: &Path, lines: &mut FileLines| {
                read_file(&config.logs, file, lines, &ids, windows, &mut kept)
            };
            match files.read(&path, read) {
                Ok(true) => out.files_read += 1,
                Ok(false) => {}
                Err(e) => out.errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
    if !config.logs.topic.is_empty() {
        if let Err(e) = read_topic(config, &ids, windows, &mut kept) {
            out.errors.push(format!("{e:#}"));
        }
    }
    out.lines = kept.lines;
    out.unplaced = kept.unplaced.into_values().collect();
    out.skipped = files.skipped.into_values().collect();
    out.lines.sort_by_key(|l| l.at_ms);
    out.lines.truncate(LINES_KEPT);
    out
}

/// Paths one glob may name: a glob over a huge tree (or a symlink loop) is cut, and said.
const PATHS_PER_GLOB: usize = 10_000;

/// The files one trace reads: each regular file once, within the byte budgets of `[logs]`, and
/// what it skipped.
struct FileWalk {
    /// (device, inode) of every file read.
    seen: HashSet<(u64, u64)>,
    /// Bytes the trace may still read.
    left: u64,
    max_file: u64,
    max_line: usize,
    skipped: BTreeMap<String, Skipped>,
}

impl FileWalk {
    fn new(c: &LogsConfig) -> FileWalk {
        FileWalk {
            seen: HashSet::new(),
            left: c.max_trace_bytes,
            max_file: c.max_file_bytes,
            max_line: c.max_line_bytes,
            skipped: BTreeMap::new(),
        }
    }

    fn skip(&mut self, reason: String, at: &dyn std::fmt::Display) {
        let s = self
            .skipped
            .entry(reason.clone())
            .or_insert_with(|| Skipped {
                reason,
                count: 0,
                first: at.to_string(),
            });
        s.count += 1;
    }

    /// Reads `path` with `read` when it is a regular file not read yet and the trace's budget
    /// is not spent (true), else says why not (false).
    fn read(
        &mut self,
        path: &Path,
        read: impl FnOnce(&Path, &mut FileLines) -> std::io::Result<()>,
    ) -> std::io::Result<bool> {
        let (file, identity) = match open_regular(path)? {
            Ok(opened) => opened,
            Err(why) => {
                self.skip(why, &path.display());
                return Ok(false);
            }
        };
        if !self.seen.insert(identity) {
            let why = "the same file as one already read (a symlink, or globs that overlap)";
            self.skip(why.into(), &path.display());
            return Ok(false);
        }
        if self.left == 0 {
            let why = "the trace's log budget is spent (logs.max_trace_bytes)";
            self.skip(why.into(), &path.display());
            return Ok(false);
        }
        let reader: Box<dyn Read> = match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Box::new(flate2::read::MultiGzDecoder::new(file)),
            _ => Box::new(file),
        };
        let budget = self.max_file.min(self.left);
        let mut lines = FileLines::new(reader, budget, self.max_line);
        let result = read(path, &mut lines);
        self.left -= lines.read;
        if lines.cut {
            let why = if budget < self.max_file {
                "read only up to the trace's log budget (logs.max_trace_bytes)"
            } else {
                "read only its first logs.max_file_bytes"
            };
            self.skip(why.into(), &path.display());
        }
        if let Some(first) = lines.first_too_long {
            let why = format!("lines longer than logs.max_line_bytes ({})", self.max_line);
            self.skip(why.clone(), &format!("{}:{first}", path.display()));
            if let Some(s) = self.skipped.get_mut(&why) {
                s.count += lines.too_long - 1;
            }
        }
        result.map(|()| true)
    }
}

/// A log file opened for reading, and its identity (device, inode).
pub type OpenedFile = (std::fs::File, (u64, u64));

/// `path` opened for reading when it is a regular file, or a symlink to one (followed once),
/// with its identity; else why it is not read. Opened without blocking and checked on the open
/// file itself: a FIFO put in its place meanwhile is never waited on.
pub fn open_regular(path: &Path) -> std::io::Result<Result<OpenedFile, String>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let link = std::fs::symlink_metadata(path)?;
    let target: PathBuf = if link.file_type().is_symlink() {
        let to = std::fs::read_link(path)?;
        let to = path.parent().map_or(to.clone(), |dir| dir.join(&to));
        match std::fs::symlink_metadata(&to) {
            Ok(m) if m.file_type().is_symlink() => {
                return Ok(Err("a symlink to a symlink (one link is followed)".into()))
            }
            Ok(_) => to,
            Err(e) => return Ok(Err(format!("a symlink to nothing readable ({e})"))),
        }
    } else {
        path.to_path_buf()
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&target)?;
    let m = file.metadata()?;
    if !m.file_type().is_file() {
        return Ok(Err(format!("not a regular file ({})", kind_of(&m))));
    }
    Ok(Ok((file, (m.dev(), m.ino()))))
}

/// What a file that is not a regular file is.
fn kind_of(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// The lines of one file, within its byte budget, a line never held beyond `max_line` bytes.
pub struct FileLines {
    reader: BufReader<Box<dyn Read>>,
    budget: u64,
    max_line: usize,
    /// Bytes read so far.
    read: u64,
    /// The budget ended the read before the end of the file.
    cut: bool,
    /// Lines longer than `max_line`, and the number of the first.
    too_long: u64,
    first_too_long: Option<u64>,
    /// Lines returned or skipped so far.
    number: u64,
}

impl FileLines {
    fn new(reader: Box<dyn Read>, budget: u64, max_line: usize) -> FileLines {
        FileLines {
            reader: BufReader::new(reader),
            budget,
            max_line,
            read: 0,
            cut: false,
            too_long: 0,
            first_too_long: None,
            number: 0,
        }
    }

    /// The next line (without its newline) into `buf`, with its number; `None` at the end of
    /// the file or of the budget. A line longer than `max_line` is counted and skipped.
    fn next_line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<Option<u64>> {
        loop {
            buf.clear();
            let mut long = false;
            let mut any = false;
            loop {
                if self.read >= self.budget {
                    self.cut = self.reader.fill_buf().is_ok_and(|b| !b.is_empty());
                    return Ok(None);
                }
                let avail = self.reader.fill_buf()?;
                if avail.is_empty() {
                    if !any {
                        return Ok(None);
                    }
                    break;
                }
                any = true;
                let allowed = avail.len().min((self.budget - self.read) as usize);
                let chunk = &avail[..allowed];
                let (part, used, newline) = match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => (&chunk[..i], i + 1, true),
                    None => (chunk, chunk.len(), false),
                };
                if !long && buf.len() + part.len() > self.max_line {
                    long = true;
                    buf.clear();
                }
                if !long {
                    buf.extend_from_slice(part);
                }
                self.reader.consume(used);
                self.read += used as u64;
                if newline {
                    break;
                }
            }
            self.number += 1;
            if !long {
                return Ok(Some(self.number));
            }
            self.too_long += 1;
            self.first_too_long.get_or_insert(self.number);
        }
    }
}

/// The lines of one file: each as text (bytes that are not UTF-8 replaced, in that line only).
fn read_file(
    fields: &LogsConfig,
    path: &Path,
    lines: &mut FileLines,
    ids: &BTreeSet<&str>,
    windows: &[TimeWindow],
    out: &mut Kept,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(n) = lines.next_line(&mut buf)? {
        let line = String::from_utf8_lossy(&buf);
        let source = || format!("{}:{n}", path.display());
        out.keep(
            fields,
            parse_line(fields, line.as_bytes(), ids, windows),
            source,
        );
    }
    Ok(())
}

/// The logs topic, in the trace's windows, every partition (log shippers key by host, not ID).
fn read_topic(
    config: &Config,
    ids: &BTreeSet<&str>,
    windows: &[TimeWindow],
    out: &mut Kept,
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
    kafka::read_windows(config, &plan, TOPIC_READ_DEADLINE, &cancel, |m| {
        let Some(payload) = rdkafka::Message::payload(m) else {
            return;
        };
        let source = || {
            let (p, o) = (rdkafka::Message::partition(m), rdkafka::Message::offset(m));
            format!("{} p{p}@{o}", config.logs.topic)
        };
        out.keep(
            &config.logs,
            parse_line(&config.logs, payload, ids, windows),
            source,
        );
    })?;
    Ok(())
}

/// The first of the configured field and the conventions that the line has.
fn field<'v>(
    v: &'v serde_json::Value,
    configured: &str,
    conventions: &[&str],
) -> Option<&'v serde_json::Value> {
    std::iter::once(configured)
        .chain(conventions.iter().copied())
        .find_map(|name| v.get(name).filter(|x| !x.is_null()))
}

/// What a JSON line is to a trace: one of its lines (named and inside a window), a line that
/// names a traced ID but cannot be placed (and why), or another line.
fn parse_line(f: &LogsConfig, raw: &[u8], ids: &BTreeSet<&str>, windows: &[TimeWindow]) -> Parsed {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(raw) else {
        let named = ids.iter().any(|id| contains(raw, id.as_bytes()));
        return if named {
            Parsed::Unplaced(Unplaceable::NotJson)
        } else {
            Parsed::Other
        };
    };
    let text = |x: Option<&serde_json::Value>| match x? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let (order_no, request_id, event_id) = (
        text(v.get(&f.order_no_field)),
        text(v.get(&f.request_id_field)),
        text(v.get(&f.event_id_field)),
    );
    let named = [&order_no, &request_id, &event_id]
        .iter()
        .any(|id| id.as_deref().is_some_and(|i| ids.contains(i)));
    if !named {
        return Parsed::Other;
    }
    let Some(time) = field(&v, &f.time_field, TIME_FIELDS) else {
        return Parsed::Unplaced(Unplaceable::NoTime);
    };
    let Some(at_ms) = time_ms(time) else {
        return Parsed::Unplaced(Unplaceable::UnreadableTime);
    };
    if !windows
        .iter()
        .any(|w| (w.from_ms..=w.to_ms).contains(&at_ms))
    {
        return Parsed::Unplaced(Unplaceable::OutsideWindows(at_ms));
    }
    Parsed::Line(LogLine {
        at_ms,
        service: text(field(&v, &f.service_field, SERVICE_FIELDS)),
        level: text(field(&v, &f.level_field, LEVEL_FIELDS)),
        message: text(field(&v, &f.message_field, MESSAGE_FIELDS)).unwrap_or_default(),
        order_no,
        request_id,
        event_id,
        source: String::new(),
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Epoch ms from epoch ms or seconds (a number, or digits; below 10^11 it is seconds) or RFC
/// 3339 text, UTC (`Z`, or no zone) or with an offset (`+08:00`, `+0800`: logback's).
fn time_ms(v: &serde_json::Value) -> Option<i64> {
    let number = |x: f64| {
        Some(if x < 1e11 {
            (x * 1000.0) as i64
        } else {
            x as i64
        })
    };
    match v {
        serde_json::Value::Number(n) => number(n.as_f64()?),
        serde_json::Value::String(s) if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') => {
            number(s.parse().ok()?)
        }
        serde_json::Value::String(s) => {
            let (clock, offset_ms) = split_offset(s.trim())?;
            let t = humantime::parse_rfc3339_weak(clock).ok()?;
            let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
            Some(d.as_millis() as i64 - offset_ms)
        }
        _ => None,
    }
}

/// `2026-12-01T10:00:00.123+08:00` → (`2026-12-01T10:00:00.123`, 8 h); `…Z` or no zone: UTC.
fn split_offset(s: &str) -> Option<(&str, i64)> {
    if let Some(clock) = s.strip_suffix('Z').or_else(|| s.strip_suffix('z')) {
        return Some((clock, 0));
    }
    let time_at = s.find(['T', ' '])?;
    let Some(at) = s[time_at..].rfind(['+', '-']).map(|i| time_at + i) else {
        return Some((s, 0));
    };
    let (clock, zone) = s.split_at(at);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits: String = zone[1..].chars().filter(char::is_ascii_digit).collect();
    if digits.len() != 4 && digits.len() != 2 {
        return None;
    }
    let h: i64 = digits[..2].parse().ok()?;
    let m: i64 = digits.get(2..).map_or(Some(0), |m| m.parse().ok())?;
    Some((clock, sign * (h * 3_600_000 + m * 60_000)))
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
        // logback's `@timestamp`, with its offset.
        assert_eq!(
            time_ms(&serde_json::json!("2025-12-01T16:00:00.000+08:00")),
            Some(ms)
        );
        assert_eq!(
            time_ms(&serde_json::json!("2025-12-01T03:00:00-0500")),
            Some(ms)
        );
        assert_eq!(time_ms(&serde_json::json!("1764576000000")), Some(ms));
    }

    fn fields() -> LogsConfig {
        crate::config::Config::defaults().logs
    }

    /// zap's `ts`/`msg` and logback's `@timestamp`/`message` are read without configuration;
    /// a line naming the order without a usable time, or outside the windows, is counted.
    #[test]
    fn the_common_conventions_are_read_and_unplaced_lines_counted() {
        let ids = BTreeSet::from(["ORD1"]);
        let windows = [TimeWindow {
            from_ms: 1_000_000,
            to_ms: 2_000_000,
        }];
        let mut kept = Kept::default();
        let f = fields();
        let lines = [
            r#"{"ts": 1500, "msg": "zap line", "level": "info", "orderNo": "ORD1"}"#,
            r#"{"@timestamp": "1970-01-01T08:25:00.000+08:00", "message": "logback line", "severity": "WARN", "orderNo": "ORD1"}"#,
            r#"{"msg": "no time", "orderNo": "ORD1"}"#,
            r#"{"ts": 99999999, "msg": "later", "orderNo": "ORD1"}"#,
            r#"{"ts": 1500, "msg": "other order", "orderNo": "ORD2"}"#,
            "plain text naming ORD1",
        ];
        for (i, l) in lines.iter().enumerate() {
            kept.keep(&f, parse_line(&f, l.as_bytes(), &ids, &windows), || {
                format!("f:{}", i + 1)
            });
        }
        let messages: Vec<(&str, Option<&str>)> = kept
            .lines
            .iter()
            .map(|l| (l.message.as_str(), l.level.as_deref()))
            .collect();
        assert_eq!(
            messages,
            [("zap line", Some("info")), ("logback line", Some("WARN"))]
        );
        let unplaced: Vec<(u64, &str)> = kept
            .unplaced
            .values()
            .map(|u| (u.lines, u.first.as_str()))
            .collect();
        assert_eq!(unplaced, [(1, "f:6"), (1, "f:3"), (1, "f:4")]);
    }
}
