//! What the console and its twins leave behind, in a real terminal (tmux) where it matters:
//! - the terminal is restored on every signal that ends the console — SIGHUP (an ssh session
//!   dropped), SIGQUIT, SIGINT, SIGTERM — as on `q`;
//! - nothing is printed onto the shell after `q` (sqlx logs the statements `q` cancelled as they
//!   drop: those lines go to the console's log);
//! - with `NO_COLOR` the selected row is still visible (reverse video, not a colour);
//! - reports and the console's log are their owner's only (0600, in directories made 0700);
//! - `trace` writes nothing on stderr but its own lines (no librdkafka `PartitionEOF` ERROR).
//! - a command whose stdout's reader goes away (`| head -c 300`) ends quietly, never panicking.

use crate::common;
use crate::support::redis_server;
use crate::support::tmux;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use idemguard::config::{Config, Dialect};
use idemguard::contracts::OrderNo;
use idemguard::db::Database;
use redis_server::RedisServer;
use tmux::Terminal;

/// How long the pane may take to show what a step waits for.
const WAIT: Duration = Duration::from_secs(30);

/// A console's world: a fresh database, a private Redis holding one lock, fresh topics, and a
/// directory of its own for the log file and the reports (whose subdirectories do not exist
/// yet: the console creates them).
struct World {
    config: Config,
    db: Database,
    _redis: RedisServer,
    dir: tempfile::TempDir,
    lock_key: String,
}

async fn world() -> World {
    let (mut config, db) = common::migrated_database(Dialect::Postgres).await;
    let redis = RedisServer::start();
    config.redis.url = redis.url();
    let topics = common::fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    let lock_key = format!("lock:order:{}", OrderNo::generate());
    let mut c = redis.conn().await;
    let _: () = redis::cmd("SET")
        .arg(&lock_key)
        .arg("a-plain-token-of-another-client")
        .query_async(&mut c)
        .await
        .unwrap();
    World {
        config,
        db,
        _redis: redis,
        dir: tempfile::tempdir().unwrap(),
        lock_key,
    }
}

impl World {
    fn log_file(&self) -> std::path::PathBuf {
        self.dir.path().join("state/idemguard/console.log")
    }

    fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let c = &self.config;
        let mut env: Vec<(String, String)> = [
            (
                "IDEMGUARD_CONFIG",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml").to_string(),
            ),
            ("IDEMGUARD_DATABASE__URL", c.database.url.clone()),
            ("IDEMGUARD_REDIS__URL", c.redis.url.clone()),
            ("IDEMGUARD_REDIS__REDLOCK_NODES", String::new()),
            (
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
                c.kafka.payment_topic.clone(),
            ),
            ("IDEMGUARD_KAFKA__TRACE_TOPIC", c.kafka.trace_topic.clone()),
            (
                "IDEMGUARD_CONSOLE__LOG_FILE",
                self.log_file().display().to_string(),
            ),
            ("RUST_BACKTRACE", "0".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    /// An interactive shell in a pane, its prompt shown.
    fn shell(&self, extra: &[(&str, &str)]) -> Terminal {
        let owned = self.env(extra);
        let env: Vec<(&str, String)> = owned.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let pane = Terminal::shell("igt", (160, 45), &env);
        pane.wait_for("the shell's prompt", WAIT, |s| s.starts_with('$'));
        pane
    }
}

/// `q` in a console started from the shell as `idemguard console; echo EXITED-$?`: it exits 0.
fn quit(pane: &Terminal) {
    pane.keys(&["q"]);
    let s = pane.wait_for("the console's exit", WAIT, |s| {
        has_line(s, |l| l.starts_with("EXITED-"))
    });
    assert!(has_line(&s, |l| l == "EXITED-0"), "{s}");
}

fn has_line(screen: &str, f: impl Fn(&str) -> bool) -> bool {
    screen.lines().any(|l| f(l.trim_end()))
}

/// Waits for the console's first frame: the alternate screen, the cursor hidden, the header.
fn first_frame(pane: &Terminal) {
    pane.wait_for("the console's first frame", WAIT, |s| {
        pane.flag("#{alternate_on}") == "1"
            && pane.flag("#{cursor_flag}") == "0"
            && s.contains("idemguard console  1:Overview")
    });
}

/// The pane is back to a working shell: main screen, cursor shown, a typed line echoed and run.
fn assert_restored(pane: &Terminal, what: &str) {
    assert_eq!(pane.flag("#{alternate_on}"), "0", "{what}: main screen");
    assert_eq!(
        pane.flag("#{cursor_flag}"),
        "1",
        "{what}: the cursor is shown"
    );
    pane.type_line("echo ok-$((40+2))");
    let s = pane.wait_for("`echo ok` to run", WAIT, |s| has_line(s, |l| l == "ok-42"));
    assert!(
        s.contains("$ echo ok-$((40+2))"),
        "{what}: raw mode is off:\n{s}"
    );
}

// ---------------------------------------------------------------------------------------------
// signals
// ---------------------------------------------------------------------------------------------

/// The real console, its pid known (`exec` keeps the shell's), ended by `kill -SIGNAL`.
async fn the_terminal_is_restored_on(signal: &str) {
    let w = world().await;
    let pidfile = w.dir.path().join("console.pid");
    let pane = w.shell(&[]);
    pane.type_line(&format!(
        "bash -c 'echo $$ > {}; exec {} console'; echo EXITED-$?",
        pidfile.display(),
        env!("CARGO_BIN_EXE_idemguard")
    ));
    first_frame(&pane);
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let killed = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.trim().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let s = pane.wait_for("the console's exit", WAIT, |s| {
        has_line(s, |l| l.starts_with("EXITED-"))
    });
    assert!(
        has_line(&s, |l| l == "EXITED-0"),
        "SIG{signal}: exit 0:\n{s}"
    );
    assert_restored(&pane, &format!("SIG{signal}"));
    w.db.pool.close().await;
}

#[tokio::test]
async fn the_terminal_is_restored_on_sighup() {
    the_terminal_is_restored_on("HUP").await;
}

#[tokio::test]
async fn the_terminal_is_restored_on_sigquit() {
    the_terminal_is_restored_on("QUIT").await;
}

#[tokio::test]
async fn the_terminal_is_restored_on_sigint() {
    the_terminal_is_restored_on("INT").await;
}

#[tokio::test]
async fn the_terminal_is_restored_on_sigterm() {
    the_terminal_is_restored_on("TERM").await;
}

// ---------------------------------------------------------------------------------------------
// nothing after q
// ---------------------------------------------------------------------------------------------

/// With the record table locked by another session, the console's reads wait on it; `q` cancels
/// them, and sqlx logs each cancelled statement as slow when it is dropped — after the terminal
/// was given back. Those lines must land in the console's log, not on the shell. (sqlx's lines
/// quote the SQL, so idemguard logs them only when `IDEMGUARD_LOG` names sqlx: this test does.)
#[tokio::test]
async fn after_q_nothing_is_printed_onto_the_shell() {
    let w = world().await;
    let mut locker = w.db.pool.begin().await.unwrap();
    sqlx::Executor::execute(
        &mut *locker,
        "LOCK TABLE idempotency_record IN ACCESS EXCLUSIVE MODE",
    )
    .await
    .unwrap();
    let pane = w.shell(&[("IDEMGUARD_LOG", "warn,idemguard=info,sqlx=warn")]);
    pane.type_line(&format!(
        "{} console; echo EXITED-$?",
        env!("CARGO_BIN_EXE_idemguard")
    ));
    first_frame(&pane);
    // The stuck and overview reads are queued on the lock for longer than sqlx's slow-statement
    // threshold (1 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    pane.keys(&["q"]);
    let s = pane.wait_for("the console's exit", WAIT, |s| {
        has_line(s, |l| l.starts_with("EXITED-"))
    });
    // The process's teardown is over once the shell printed its status; a last look.
    std::thread::sleep(Duration::from_millis(500));
    let s = format!("{s}{}", pane.screen());
    assert!(has_line(&s, |l| l == "EXITED-0"), "{s}");
    for noise in ["slow statement", "WARN", "ERROR", "sqlx"] {
        assert!(
            !s.contains(noise),
            "{noise:?} printed onto the shell after q:\n{s}"
        );
    }
    let log = std::fs::read_to_string(w.log_file()).unwrap();
    assert!(
        log.contains("slow statement"),
        "the cancelled statements were logged in the console's log:\n{log}"
    );
    assert_restored(&pane, "q");
    locker.rollback().await.unwrap();
    w.db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// NO_COLOR
// ---------------------------------------------------------------------------------------------

/// What the SGR sequences on the screen line holding `needle` set (`capture-pane -e`): (reverse
/// video, a colour), and the sequences themselves.
fn sgr_on_line(screen: &str, needle: &str) -> (bool, bool, Vec<String>) {
    let line = screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not on screen:\n{screen}"));
    let (mut reverse, mut colour, mut seqs) = (false, false, Vec::new());
    for seq in line.split("\x1b[").skip(1) {
        let Some(end) = seq.find('m') else { continue };
        seqs.push(seq[..end].to_string());
        let params: Vec<u32> = seq[..end]
            .split(';')
            .filter_map(|p| p.parse().ok())
            .collect();
        let mut i = 0;
        while i < params.len() {
            match params[i] {
                7 => reverse = true,
                // 38;5;N / 48;5;N and 38;2;R;G;B / 48;2;R;G;B: one colour each.
                38 | 48 => {
                    colour = true;
                    i += if params.get(i + 1) == Some(&2) { 4 } else { 2 };
                }
                30..=37 | 40..=47 | 90..=97 | 100..=107 => colour = true,
                _ => {}
            }
            i += 1;
        }
    }
    (reverse, colour, seqs)
}

/// The Locks view's selected row (its only lock) in the real terminal: with colours it has a
/// background colour; with `NO_COLOR=1` no colour at all reaches the terminal (crossterm honours
/// it), and the row is reverse video.
#[tokio::test]
async fn without_colours_the_selected_row_is_reverse_video() {
    let w = world().await;
    for no_color in [false, true] {
        let extra: &[(&str, &str)] = if no_color { &[("NO_COLOR", "1")] } else { &[] };
        let pane = w.shell(extra);
        pane.type_line(&format!(
            "{} console; echo EXITED-$?",
            env!("CARGO_BIN_EXE_idemguard")
        ));
        first_frame(&pane);
        pane.keys(&["3"]);
        pane.wait_for("the lock", WAIT, |s| s.contains(&w.lock_key));
        // The row is selected a frame or more after it is drawn (later on a loaded machine):
        // read the screen until the row carries the style this mode expects, or WAIT ends.
        let expected = |reverse: bool, colour: bool| {
            if no_color {
                reverse && !colour
            } else {
                colour && !reverse
            }
        };
        let deadline = Instant::now() + WAIT;
        let (reverse, colour, seqs) = loop {
            let screen = pane.screen_with_attributes();
            let (reverse, colour, seqs) = sgr_on_line(&screen, &w.lock_key);
            if expected(reverse, colour) || Instant::now() > deadline {
                break (reverse, colour, seqs);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if no_color {
            assert!(
                reverse,
                "NO_COLOR: the selected row is reverse video: {seqs:?}"
            );
            assert!(
                !colour,
                "NO_COLOR: no colour reaches the terminal: {seqs:?}"
            );
        } else {
            assert!(
                colour && !reverse,
                "colours: the row's background: {seqs:?}"
            );
        }
        quit(&pane);
    }
    w.db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// files
// ---------------------------------------------------------------------------------------------

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `report -o` and `:report`'s writer (console.report_dir) write 0600 files, creating their
/// directories 0700; the console's log is 0600 in a directory made 0700, and a log written
/// 0644 before is narrowed.
#[tokio::test]
async fn reports_and_the_console_log_are_their_owners_only() {
    let mut w = world().await;
    let root = w.dir.path().to_path_buf();
    let order = OrderNo::generate().to_string();
    let out = root.join("out/new/report.md");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["report", "--id", &order, "-o"])
        .arg(&out)
        .envs(w.env(&[]))
        .output()
        .unwrap();
    assert!(run.status.code().is_some_and(|c| c == 0), "{run:?}");
    assert_eq!(mode(&out), 0o600, "report -o");
    assert_eq!(
        (mode(&root.join("out")), mode(&root.join("out/new"))),
        (0o700, 0o700)
    );

    w.config.console.report_dir = root.join("reports/x").display().to_string();
    let target = idemguard::contracts::TraceTarget::classify(&order);
    let written = idemguard::console::report::write(
        &w.config,
        &target,
        idemguard::console::report::ReportFormat::Markdown,
    )
    .await
    .unwrap();
    assert_eq!(mode(&written.path), 0o600, ":report");
    assert_eq!(mode(&root.join("reports")), 0o700);
    assert_eq!(mode(&root.join("reports/x")), 0o700);

    // The console's own log, through the real console.
    let pane = w.shell(&[]);
    pane.type_line(&format!(
        "{} console; echo EXITED-$?",
        env!("CARGO_BIN_EXE_idemguard")
    ));
    first_frame(&pane);
    quit(&pane);
    assert_eq!(mode(&w.log_file()), 0o600, "console.log");
    assert_eq!(mode(&root.join("state")), 0o700);
    assert_eq!(mode(&root.join("state/idemguard")), 0o700);
    // One written 0644 by an earlier version is narrowed when the console opens it again.
    std::fs::set_permissions(w.log_file(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let guard = idemguard::logging::to_file(&w.log_file()).unwrap();
    drop(guard);
    assert_eq!(mode(&w.log_file()), 0o600, "an old console.log");
    w.db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// stdout
// ---------------------------------------------------------------------------------------------

/// `args` run with a stdout whose reader goes away — before the first byte (even runs) or after
/// it (odd runs), as `| head -c 300` does — ten times: each run ends quietly with the status a
/// run read to the end has. Never a panic ("failed printing to stdout", exit 101).
fn ends_quietly_when_its_reader_goes(w: &World, args: &[&str]) {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let command = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_idemguard"));
        c.args(args).envs(w.env(&[])).stdin(Stdio::null());
        c
    };
    let read_whole = command().output().unwrap();
    assert!(
        !read_whole.stdout.is_empty(),
        "{args:?} prints nothing: {read_whole:?}"
    );
    for run in 0..10 {
        let mut child = command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        if run % 2 == 1 {
            let _ = stdout.read(&mut [0u8; 1]);
        }
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?} run {run}: {err}"
        );
        assert_eq!(
            out.status.code(),
            read_whole.status.code(),
            "{args:?} run {run}: {err}"
        );
    }
}

/// The commands that print the most: `doctor --json`, `config`, the Locks view's twin and a
/// report.
#[tokio::test]
async fn a_command_whose_reader_goes_away_ends_quietly() {
    let w = world().await;
    let order = OrderNo::generate().to_string();
    for args in [
        &["doctor", "--json"][..],
        &["config"],
        &["locks", "--json"],
        &["report", "--id", &order, "--format", "html"],
    ] {
        ends_quietly_when_its_reader_goes(&w, args);
    }
    w.db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// stderr
// ---------------------------------------------------------------------------------------------

/// A trace reads each topic's windows to the end of its partitions (the reader asks to be told
/// where a partition ends): stderr has the command's own line and nothing else.
#[tokio::test]
async fn a_trace_writes_nothing_on_stderr_but_its_own_lines() {
    let w = world().await;
    for (id, expected) in [
        (
            "APP:ORDER:20261201:nobody-knows-it",
            "idemguard trace: no row, key, message or trace event names this ID\n",
        ),
        (w.lock_key.trim_start_matches("lock:order:"), ""),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args(["trace", id])
            .envs(w.env(&[]))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr, expected, "trace {id}: stderr");
    }
    w.db.pool.close().await;
}

/// A malformed `--since` or `--until` is a usage error like any other: exit 2, the flag and the
/// accepted forms named, before any backend is asked (`trace`, `dlq`, `report`).
#[test]
fn a_malformed_time_flag_is_a_usage_error() {
    for args in [
        &["trace", "X", "--since", "yesterday"][..],
        &["dlq", "--until", "2026-13-01"],
        &["report", "--since", "soon", "--until", "later"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            ])
            .args(args)
            .env_remove("IDEMGUARD_CONFIG")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("invalid value") && err.contains("RFC 3339"),
            "{args:?}: {err}"
        );
    }
}
