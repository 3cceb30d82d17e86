//! Everything a command prints on stdout goes through here, so that a reader that goes away
//! early — `idemguard doctor --json | head -c 300` — ends the command quietly instead of
//! panicking (`println!` panics on a failed write: exit 101, "failed printing to stdout").
//!
//! The process keeps ignoring SIGPIPE (Rust's default): it also talks to the database, Redis
//! and Kafka over sockets, whose EPIPE must be an error of theirs, not a signal that kills the
//! process. So the pipe's end is seen here, as a write to stdout failing with `BrokenPipe`:
//! what is left to print is dropped and the command ends with the status it has — its work is
//! done; only its reader stopped reading. Any other failure to write (a full disk behind a
//! redirect) is the command's error.

use std::fmt::Display;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout's reader has gone: later writes are dropped without a system call.
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Prints `text` as it is.
pub(crate) fn print(text: impl Display) -> io::Result<()> {
    if READER_GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    match write!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            READER_GONE.store(true, Ordering::Relaxed);
            Ok(())
        }
        written => written,
    }
}

/// Prints `text` and a newline.
pub(crate) fn line(text: impl Display) -> io::Result<()> {
    print(format_args!("{text}\n"))
}

/// Prints `value` as pretty JSON and a newline.
pub(crate) fn json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    Ok(line(serde_json::to_string_pretty(value)?)?)
}
