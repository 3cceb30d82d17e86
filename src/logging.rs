//! Where log lines go, and what they may contain. Every line passes through one writer that
//! - removes the configuration's secrets: idemguard shows URLs only through
//!   [`crate::config::redact_url`], but a library can log one on its own (sqlx warns about an
//!   unrecognised connect parameter — `?sslpassword=…` — with its value);
//! - goes to stderr, or to a file while the console owns the terminal ([`to_file`]): a line
//!   written over the console's screen stays there and corrupts its titles and rows;
//! - in text form, shows every field and message through [`crate::untrusted::escape`]
//!   ([`EscapedFields`]): a value quoted from a Kafka header, a row or a lock (a DLQ reason, an
//!   operator action's key) can neither forge a line with `\n` nor act on the terminal that
//!   reads the log. JSON lines are escaped by the JSON writer.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::Config;

/// The secrets [`scrub`] removes, longest first.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());
/// Set while the console owns the terminal.
static FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Installs the subscriber: `IDEMGUARD_LOG` (default `warn,idemguard=info`; sqlx's statement
/// lines only when it names `sqlx`), text or JSON,
/// ANSI colours only when asked (when stderr is a terminal that no console will take over).
pub fn init(json: bool, ansi: bool) {
    use tracing_subscriber::EnvFilter;
    let asked = std::env::var("IDEMGUARD_LOG").unwrap_or_default();
    let mut filter = EnvFilter::try_from_env("IDEMGUARD_LOG")
        .unwrap_or_else(|_| EnvFilter::new("warn,idemguard=info"));
    // sqlx's statement lines quote the SQL (a read ended by its bound logs one as "slow"): not
    // in idemguard's output unless asked for by name.
    if !asked.contains("sqlx") {
        if let Ok(quiet) = "sqlx::query=error".parse() {
            filter = filter.add_directive(quiet);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(Lines);
    if json {
        builder.json().init();
    } else {
        builder.fmt_fields(EscapedFields).init();
    }
}

/// The text log's fields, like the default formatter writes them (`message key="text" n=5`),
/// each value through [`crate::untrusted::escape`].
pub struct EscapedFields;

impl<'a> MakeVisitor<Writer<'a>> for EscapedFields {
    type Visitor = EscapedVisitor<'a>;
    fn make_visitor(&self, writer: Writer<'a>) -> EscapedVisitor<'a> {
        EscapedVisitor {
            writer,
            first: true,
            result: Ok(()),
        }
    }
}

pub struct EscapedVisitor<'a> {
    writer: Writer<'a>,
    first: bool,
    result: std::fmt::Result,
}

impl EscapedVisitor<'_> {
    fn field(&mut self, field: &Field, value: &str, quoted: bool) {
        if self.result.is_err() {
            return;
        }
        let value = crate::untrusted::escape(value);
        let sep = if self.first { "" } else { " " };
        self.first = false;
        let name = field.name().trim_start_matches("r#");
        self.result = match (name, quoted) {
            ("message", _) => write!(self.writer, "{sep}{value}"),
            (_, true) => write!(
                self.writer,
                "{sep}{name}=\"{}\"",
                value.replace('"', "\\\"")
            ),
            (_, false) => write!(self.writer, "{sep}{name}={value}"),
        };
    }
}

impl Visit for EscapedVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, value, true);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.field(field, &format!("{value:?}"), false);
    }
}

impl VisitOutput<std::fmt::Result> for EscapedVisitor<'_> {
    fn finish(self) -> std::fmt::Result {
        self.result
    }
}

impl VisitFmt for EscapedVisitor<'_> {
    fn writer(&mut self) -> &mut dyn std::fmt::Write {
        &mut self.writer
    }
}

/// From now on, log lines and [`scrub`]bed texts never contain the secrets of `config`'s URLs.
pub fn hide_secrets_of(config: &Config) {
    let mut secrets = config.secrets();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    *SECRETS.write().unwrap_or_else(|e| e.into_inner()) = secrets;
}

/// `text` with every secret of the configuration replaced by `***`, and any other URL that
/// carries a password shown redacted.
pub fn scrub(text: &str) -> String {
    let secrets = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    let mut out = crate::config::redact_urls_in(text);
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

/// The console's log file: `console.log_file`, else `$XDG_STATE_HOME/idemguard/console.log`
/// (`~/.local/state/…`), else `idemguard-console.log` in the temporary directory.
pub fn console_log_path(config: &Config) -> PathBuf {
    if !config.console.log_file.is_empty() {
        return PathBuf::from(&config.console.log_file);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        });
    match state {
        Some(dir) => dir.join("idemguard").join("console.log"),
        None => std::env::temp_dir().join("idemguard-console.log"),
    }
}

/// While the returned guard lives, log lines are appended to `path` instead of stderr. The file
/// is its owner's only ([`crate::private_file`]): a trace's lines name orders and customers.
pub fn to_file(path: &Path) -> io::Result<FileGuard> {
    let file = crate::private_file::open(path, true)?;
    *FILE.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
    Ok(FileGuard(()))
}

/// Sends log lines back to stderr when dropped.
pub struct FileGuard(());

impl FileGuard {
    /// Log lines go to the file until the process ends: what the process logs while it winds
    /// down after the console belongs to the console's log, not to the shell it returned to.
    pub fn keep_until_exit(self) {
        std::mem::forget(self);
    }
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        *FILE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Makes one [`Line`] per event.
struct Lines;

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

/// One event, collected whole (a secret is never split across two writes), scrubbed and written
/// where logs go when the event is done.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = scrub(&String::from_utf8_lossy(&self.0));
        let mut file = FILE.lock().unwrap_or_else(|e| e.into_inner());
        match file.as_mut() {
            Some(f) => {
                let _ = f.write_all(text.as_bytes());
            }
            None => {
                let _ = io::stderr().write_all(text.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSource;

    #[test]
    fn secrets_of_every_url_are_scrubbed_as_written_and_decoded() {
        let env = [
            (
                "IDEMGUARD_DATABASE__URL",
                "postgres://root:pg%40pass@h/db?sslpassword=ssl-secret&application_name=x",
            ),
            ("IDEMGUARD_REDIS__URL", "redis://:redis-secret@h:6379"),
            (
                "IDEMGUARD_REDIS__REDLOCK_NODES",
                "redis://a:1?Token=node-token,redis://b:2,redis://c:3",
            ),
        ];
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = Config::load(&ConfigSource { file: None, env }).unwrap();
        hide_secrets_of(&config);
        let line =
            "WARN ignoring unrecognized connect parameter key=sslpassword value=ssl-secret; \
                    auth pg@pass / pg%40pass; redis-secret; node-token; application_name=x";
        let clean = scrub(line);
        for secret in [
            "ssl-secret",
            "pg@pass",
            "pg%40pass",
            "redis-secret",
            "node-token",
        ] {
            assert!(!clean.contains(secret), "{secret} in {clean}");
        }
        assert!(clean.contains("application_name=x"), "{clean}");
    }
}
