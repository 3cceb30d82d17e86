//! A real terminal for the tests of the binary: a detached tmux session the test types into and
//! reads back with `capture-pane`, killed when dropped, pass or fail (a panicking test does not
//! leave its console running on the shared tmux server).
//!
//! Every terminal has a tmux server of its own (`-S`, a socket named like the session, removed
//! when the terminal is dropped). On one
//! shared server, the tests of every binary run in parallel, and a server exits when its last
//! session is killed: a test starting its session at that moment failed with "server exited
//! unexpectedly". Session names are still a prefix and a random suffix, so a failing test's
//! socket says which test it was.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// What the shell prints when `idemguard console` ends: `CONSOLE-EXITED-<status>`.
pub const CONSOLE_EXITED: &str = "CONSOLE-EXITED-";

/// The socket of the tmux server of the session `session`.
fn socket(session: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{session}.tmux"))
}

/// `tmux -S socket args`: a command to the server of one terminal.
fn tmux(session: &str, args: &[&str]) -> Output {
    Command::new("tmux")
        .arg("-S")
        .arg(socket(session))
        .args(args)
        .output()
        .expect("tmux must be installed (scripts/stack up installs it)")
}

pub struct Terminal {
    session: String,
}

impl Terminal {
    /// `bash -c script` in a pane of `cols` x `rows`.
    pub fn run(prefix: &str, (cols, rows): (u16, u16), script: &str) -> Terminal {
        Terminal::start(prefix, (cols, rows), &[], &["bash", "-c", script])
    }

    /// `idemguard console {args}` with `env` exported; when it ends the shell prints
    /// CONSOLE-EXITED-<status> and stays a minute, so the screen after the exit can be read.
    pub fn console<K, V>(prefix: &str, size: (u16, u16), env: &[(K, V)], args: &str) -> Terminal
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut script = String::new();
        for (k, v) in env {
            script.push_str(&format!("export {}='{}'; ", k.as_ref(), v.as_ref()));
        }
        script.push_str(&format!(
            "{} console{args}; echo {CONSOLE_EXITED}$?; sleep 60",
            env!("CARGO_BIN_EXE_idemguard")
        ));
        Terminal::run(prefix, size, &script)
    }

    /// An interactive shell with `env` and the prompt `$ `. `--noediting`: bash reads its lines
    /// through the terminal's own line discipline, so a terminal left in raw mode (no echo,
    /// Enter not a newline) shows: a typed command never runs.
    pub fn shell(prefix: &str, size: (u16, u16), env: &[(&str, String)]) -> Terminal {
        let mut vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        vars.push("PS1=$ ".into());
        let shell = ["bash", "--norc", "--noprofile", "--noediting", "-i"];
        Terminal::start(prefix, size, &vars, &shell)
    }

    fn start(
        prefix: &str,
        (cols, rows): (u16, u16),
        vars: &[String],
        command: &[&str],
    ) -> Terminal {
        let session = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let mut args = vec![
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            &cols,
            "-y",
            &rows,
        ];
        for var in vars {
            args.extend(["-e", var.as_str()]);
        }
        args.extend(command);
        // A pane whose command ended stays, dead, with its last screen, until the session is
        // killed: a test that waits for a screen reads why the command ended, not an empty one.
        args.extend([";", "set-option", "-t", &session, "remain-on-exit", "on"]);
        let started = tmux(&session, &args);
        assert!(
            started.status.success(),
            "{}",
            String::from_utf8_lossy(&started.stderr)
        );
        Terminal { session }
    }

    fn tmux(&self, args: &[&str]) -> Output {
        tmux(&self.session, args)
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-t", &self.session, "-p"])
                .stdout,
        )
        .into_owned()
    }

    /// The screen with its attributes and colours as SGR escape sequences (`capture-pane -e`).
    pub fn screen_with_attributes(&self) -> String {
        let out = self.tmux(&["capture-pane", "-e", "-t", &self.session, "-p"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A tmux format of the pane: `#{alternate_on}`, `#{cursor_flag}`.
    pub fn flag(&self, format: &str) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["display", "-p", "-t", &self.session, format])
                .stdout,
        )
        .trim()
        .to_string()
    }

    /// Whether the pane's command still runs, or how it ended, or that tmux has no such session.
    fn pane_state(&self) -> String {
        let out = self.tmux(&[
            "display",
            "-p",
            "-t",
            &self.session,
            "pane_dead=#{pane_dead} pane_dead_status=#{pane_dead_status} pane_pid=#{pane_pid}",
        ]);
        if !out.status.success() {
            format!(
                "tmux has no session {}: {}",
                self.session,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        } else {
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !state.starts_with("pane_dead=1") {
                return state;
            }
            // A dead pane's last output is in its history, above tmux's "Pane is dead" line.
            let all = self.tmux(&["capture-pane", "-p", "-S", "-", "-t", &self.session]);
            let all = String::from_utf8_lossy(&all.stdout);
            let lines: Vec<&str> = all.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            format!("{state}; its last output:\n{tail}\n")
        }
    }

    /// tmux key names or strings, as `send-keys` takes them: `["q"]`, `[":trace X", "Enter"]`.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", self.session.as_str()];
        args.extend(keys);
        self.tmux(&args);
    }

    /// `line` typed literally (no key names), then Enter.
    pub fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-t", &self.session, "-l", line]);
        self.keys(&["Enter"]);
    }

    /// The first screen `f` accepts; fails the test with the last screen (and whether the pane
    /// is on the alternate screen and shows the cursor) if none does `within`.
    pub fn wait_for(&self, what: &str, within: Duration, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let s = self.screen();
            if f(&s) {
                return s;
            }
            if Instant::now() >= deadline {
                let flags = (self.flag("#{alternate_on}"), self.flag("#{cursor_flag}"));
                panic!(
                    "tmux: {what} did not appear within {within:?} \
                     (alternate_on, cursor_flag = {flags:?}; {}):\n{s}",
                    self.pane_state()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Presses `q` in a [`Terminal::console`] and waits for the shell's marker: the console
    /// must have exited with 0. The screen after the exit.
    pub fn quit_console(&self, within: Duration) -> String {
        self.keys(&["q"]);
        let after = self.wait_for("the exit", within, |s| s.contains(CONSOLE_EXITED));
        assert!(after.contains(&format!("{CONSOLE_EXITED}0")), "{after}");
        after
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
        let _ = std::fs::remove_file(socket(&self.session));
    }
}

/// The variables that point the binary at `config`'s database, Redis (no RedLock nodes) and
/// topics, over the profile config/local.toml.
pub fn local_env(config: &idemguard::config::Config) -> Vec<(&'static str, String)> {
    vec![
        (
            "IDEMGUARD_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml").to_string(),
        ),
        ("IDEMGUARD_DATABASE__URL", config.database.url.clone()),
        ("IDEMGUARD_REDIS__URL", config.redis.url.clone()),
        ("IDEMGUARD_REDIS__REDLOCK_NODES", String::new()),
        (
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            config.kafka.payment_topic.clone(),
        ),
        (
            "IDEMGUARD_KAFKA__TRACE_TOPIC",
            config.kafka.trace_topic.clone(),
        ),
        (
            "IDEMGUARD_KAFKA__CONSUMER_GROUP",
            config.kafka.consumer_group.clone(),
        ),
    ]
}

/// The screen after the console's exit no longer shows its UI: the terminal is restored.
pub fn assert_console_gone(after: &str) {
    assert!(
        !after.contains("idemguard console"),
        "the terminal is restored (the UI is gone):\n{after}"
    );
}
