//! The documents' commands, run as written, so the README and the guides cannot rot.
//!
//! Every ```` ```sh ```` block of `README.md` and of the guides in `docs/` runs here, in reading
//! order (`DOCUMENTS`: later blocks rely on earlier ones — the build, `IDEMGUARD_CONFIG`, the
//! service started in the background, the README's `$KEY`), in one bash session from the
//! repository root — the way a new user types them — except the last one (the tests:
//! `scripts/stack up && cargo test`), which is exactly what `.ci/run` runs. Around them:
//! - `scripts/demo --no-tui` (the demo's headless form the README gives) must print where to
//!   look as JSON; `scripts/demo` itself runs in a real terminal (tmux): the console opens under
//!   the DEMO badge with actions enabled, shows the dead owner's lock, and `q` stops everything
//!   the demo started; the headless twins `docs/cli.md` names (`trace`, `report --id`, `locks`,
//!   `rates`, `stuck`) then run on the order the demo clicked five times;
//! - the expected answers a document writes under a command (`#   HTTP/1.1 201 Created …`, or
//!   any other `#   text` the command must print) are checked against what that command printed;
//! - the config error `docs/cli.md` shows is the one the binary prints.
//!
//! The only lines this test adds are marked `# harness:` in the script it prints on failure:
//! waiting for the order service started in the background to answer, capturing output, and
//! stopping the background processes at the end. The documents' commands use the shared
//! `idemguard` databases and 127.0.0.1:8080, as a user's would; the test refuses to start if
//! something else already listens there.

use crate::support::tmux;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const README: &str = include_str!("../../../README.md");
const ARCHITECTURE: &str = include_str!("../../../docs/architecture.md");

/// Every document whose commands run, in reading order: the README, then the guides.
const DOCUMENTS: [(&str, &str); 9] = [
    ("README.md", README),
    ("docs/console.md", include_str!("../../../docs/console.md")),
    ("docs/cli.md", include_str!("../../../docs/cli.md")),
    (
        "docs/team-system.md",
        include_str!("../../../docs/team-system.md"),
    ),
    (
        "docs/production.md",
        include_str!("../../../docs/production.md"),
    ),
    (
        "docs/alerting.md",
        include_str!("../../../docs/alerting.md"),
    ),
    ("docs/storms.md", include_str!("../../../docs/storms.md")),
    (
        "docs/security.md",
        include_str!("../../../docs/security.md"),
    ),
    ("docs/architecture.md", ARCHITECTURE),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The on-call story's late payment event, with the README's keys: `7` (DLQ), `/would apply`,
/// `r`, Enter; then its order traced: the event processed once, one points row.
fn the_late_event_redriven_as_the_story_says(t: &tmux::Terminal) {
    assert!(README.contains("`7` (DLQ): the demo's payment event that arrived before its"));
    assert!(README.contains("`/would apply` narrows the view to it (the newest first); `r` opens"));
    let within = Duration::from_secs(60);
    t.keys(&["7"]);
    t.wait_for("the demo's late event in the DLQ view", within, |s| {
        s.contains("would apply") && s.contains("unknown order")
    });
    t.keys(&["/"]);
    t.type_line("would apply");
    t.wait_for("the filter applied", within, |s| {
        s.contains("filter /would apply")
    });
    t.keys(&["g"]);
    // The newest row: the event of this demo's order (29 characters: time and hex). The view's
    // title names the filter too, so the row is the first line that also names an order.
    let listed = t.screen();
    let order = listed
        .lines()
        .filter(|l| l.contains("would apply"))
        .find_map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .find(|w| w.len() == 29 && w.starts_with("20"))
        })
        .unwrap_or_else(|| panic!("no order in the DLQ view:\n{listed}"))
        .to_string();
    t.keys(&["r"]);
    t.wait_for("the redrive's confirmation", within, |s| {
        s.contains("Redrive 1 DLQ message(s)")
    });
    t.keys(&["Enter"]);
    t.wait_for("the redrive done", within, |s| s.contains("published to"));
    t.keys(&[":"]);
    t.type_line(&format!("trace {order}"));
    t.wait_for("the redriven event applied once", within, |s| {
        s.contains(&order) && s.contains("processed 1 · points 1")
    });
}

/// The ```` ```sh ```` blocks of a document, each as its lines, less the fence's indentation (a
/// block inside a list item is indented with it).
fn sh_blocks(doc: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, Vec<String>)> = None;
    for line in doc.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        match &mut current {
            None if t == "```sh" => current = Some((indent, Vec::new())),
            Some((_, lines)) if t == "```" => {
                blocks.push(std::mem::take(lines));
                current = None;
            }
            Some((fence, lines)) => {
                let cut = indent.min(*fence);
                lines.push(line[cut..].to_string());
            }
            None => {}
        }
    }
    assert!(current.is_none(), "a ```sh block is not closed");
    blocks
}

/// What a document says a command answers: the comment lines right under it that start with
/// `#   ` (three spaces): the HTTP status and any `name: value` header it names, or else a text
/// the command prints as written.
#[derive(Debug, Default)]
struct Expected {
    status: Option<String>,
    headers: Vec<String>,
    problem_json: bool,
    prints: Vec<String>,
}

fn expectation(comments: &[&str]) -> Option<Expected> {
    let mut e = Expected::default();
    let mut any = false;
    for c in comments {
        let text = c.trim_start().trim_start_matches('#').trim();
        if let Some(rest) = text.strip_prefix("HTTP/1.1 ") {
            any = true;
            e.status = Some(format!("HTTP/1.1 {}", &rest[..3]));
            for word in rest.split("  ").map(str::trim).filter(|w| !w.is_empty()) {
                if let Some((name, value)) = word.split_once(": ") {
                    if !name.contains(' ') && !value.starts_with('"') {
                        e.headers.push(format!(
                            "{}: {}",
                            name.to_ascii_lowercase(),
                            value.split_whitespace().next().unwrap()
                        ));
                    }
                }
            }
            e.problem_json |= rest.contains("application/problem+json");
        } else if c.starts_with("#   ") && !text.is_empty() {
            any = true;
            e.prints.push(text.to_string());
        }
    }
    any.then_some(e)
}

/// Kills the whole process group of the documents' session (the service and consumer it started
/// in the background) however the test ends.
struct Session {
    pgid: i32,
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pgid)])
            .stderr(Stdio::null())
            .status();
    }
}

fn run_bash(script: &str, dir: &Path, timeout: Duration) -> (bool, String, String) {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash runs");
    let _session = Session {
        pgid: child.id() as i32,
    };
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let Some(status) = status else {
        drop(_session);
        let _ = child.wait();
        panic!(
            "timed out after {timeout:?}:\n{script}\n--- stderr ---\n{}",
            err.join().unwrap()
        );
    };
    (status.success(), out.join().unwrap(), err.join().unwrap())
}

/// The idemguard processes that carry `marker` in their environment (pid and command line):
/// what a command started with it exported, and their children. Other tests run the same binary at
/// the same time, so the binary's path cannot tell the demo's processes from theirs.
fn processes_marked(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if !zombie && exe.file_name().is_some_and(|n| n == "idemguard") {
            out.push(format!("{pid} {}", cmdline.trim()));
        }
    }
    out
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Every guide in `docs/` is one of `DOCUMENTS`, so none is left out of the run.
#[test]
fn every_guide_is_run() {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = format!("docs/{}", entry.unwrap().file_name().to_string_lossy());
        if name.ends_with(".md") && !DOCUMENTS.iter().any(|(doc, _)| *doc == name) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "guides tests/guarantees/documents/readme.rs does not run: {missing:?}"
    );
}

#[test]
fn the_documents_commands_work_as_written() {
    let blocks: Vec<(&str, Vec<String>)> = DOCUMENTS
        .iter()
        .flat_map(|(doc, text)| sh_blocks(text).into_iter().map(move |b| (*doc, b)))
        .collect();
    assert!(
        blocks.len() >= 3,
        "the documents have too few ```sh blocks: {blocks:?}"
    );

    // The first block is the README's demo; the last one the tests, which `.ci/run` runs.
    assert_eq!(
        blocks[0],
        ("README.md", vec!["scripts/demo".to_string()]),
        "the README's first command is the demo"
    );
    let tests = blocks.last().unwrap();
    assert_eq!(
        tests,
        &(
            "docs/architecture.md",
            vec!["scripts/stack up && cargo test".to_string()]
        ),
        "the last command of the last guide is the tests"
    );
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(
        ci.contains("scripts/stack up") && ci.contains("\ncargo test"),
        ".ci/run runs the documents' test command:\n{ci}"
    );

    if TcpStream::connect_timeout(
        &"127.0.0.1:8080".parse().unwrap(),
        Duration::from_millis(300),
    )
    .is_ok()
    {
        panic!("something already listens on 127.0.0.1:8080, where the README starts the order service (an `idemguard serve` left running?) — stop it and rerun");
    }

    // ---- the binary the demo and the documents run: the README's `cargo build` --------------
    // Built first, with a bound of its own, so the bounds below are for the commands themselves.
    // The tests' own build made every dependency already; this links the binary.
    let (ok, _, err) = run_bash(
        "cargo build --locked --bin idemguard",
        &repo(),
        Duration::from_secs(1200),
    );
    assert!(ok, "the build failed:\n{}", tail(&err, 40));

    // ---- the demo, headless -------------------------------------------------------------------
    let (ok, out, err) = run_bash("scripts/demo --no-tui", &repo(), Duration::from_secs(1200));
    assert!(ok, "`scripts/demo --no-tui` failed:\n{}", tail(&err, 40));
    let demo: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("`scripts/demo --no-tui` printed no JSON ({e}):\n{out}"));
    let clicked = demo["clicked_request_id"]
        .as_str()
        .expect("the demo names the request clicked five times")
        .to_string();

    // ---- the demo as the README's first command runs it: the console, in a real terminal --------
    // tmux runs `scripts/demo` as written; the console opens on the incident under the DEMO
    // badge with actions enabled; `q` stops everything the demo started.
    let marker = format!("IDEMGUARD_README_DEMO={}", uuid::Uuid::new_v4().simple());
    let script = format!(
        "cd {} && export {marker} && scripts/demo; echo DEMO-EXITED-$?; sleep 60",
        repo().display()
    );
    let t = tmux::Terminal::run("igreadme", (200, 50), &script);
    // The header is drawn before the database answers: wait for both. `scripts/demo` builds
    // first, so when the sources changed since the build above (a shared working tree) the wait
    // includes that build; the bound is for it, the usual wait is seconds.
    t.wait_for(
        "the console with the DEMO badge, actions enabled and the database ok",
        Duration::from_secs(900),
        |s| {
            s.contains("DEMO")
                && s.contains("idemguard console")
                && s.contains("ACTIONS ENABLED")
                && s.contains("database ok")
        },
    );
    // The README's on-call story starts at the Overview: the console opens on it, and it lists
    // the demo's dead-owner lock before any key is pressed.
    let overview = t.wait_for(
        "the Overview with the demo's dead-owner lock",
        Duration::from_secs(60),
        |s| s.contains("Overview — what is wrong now") && s.contains("with a dead owner"),
    );
    assert!(overview.contains("1:Overview"), "{overview}");
    // `3` is the Locks view, as the README's story says.
    assert!(README.contains("Press `3` (Locks)"));
    t.keys(&["3"]);
    t.wait_for(
        "the demo's dead-owner lock in the Locks view",
        Duration::from_secs(60),
        |s| s.contains("dead_owner") && s.contains("Locks ["),
    );
    the_late_event_redriven_as_the_story_says(&t);
    t.keys(&["q"]);
    let after = t.wait_for("the demo's exit", Duration::from_secs(60), |s| {
        s.contains("DEMO-EXITED-")
    });
    drop(t);
    assert!(after.contains("DEMO-EXITED-0"), "{after}");
    // The demo's children end on their own signal handling (a consumer commits first): give
    // them a bounded while, then any still running is a leak.
    let deadline = Instant::now() + Duration::from_secs(20);
    let left = loop {
        let left = processes_marked(&marker);
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        left.is_empty(),
        "quitting the demo's console left processes running: {left:?}"
    );

    // ---- the headless twins the CLI guide names, on the order the demo clicked five times -------
    let bin = repo().join("target/debug/idemguard");
    for args in [
        vec!["trace", clicked.as_str()],
        vec!["report", "--id", clicked.as_str()],
        vec!["locks"],
        vec!["rates"],
        vec!["stuck"],
        vec!["config"],
    ] {
        let out = Command::new(&bin)
            .args(&args)
            .env("IDEMGUARD_CONFIG", "config/local.toml")
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`idemguard {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if args[0] == "trace" || args[0] == "report" {
            assert!(
                stdout.contains(&clicked),
                "`idemguard {}` does not name the request:\n{stdout}",
                args.join(" ")
            );
        }
    }

    // ---- every other ```sh block, as written, in one session ---------------------------------
    let capture = tempfile::tempdir().unwrap();
    let mut script = String::from("set -euo pipefail\n");
    let mut checks: Vec<(usize, String, Expected)> = Vec::new();
    for (b, (doc, block)) in blocks[1..blocks.len() - 1].iter().enumerate() {
        script.push_str(&format!("# harness: {doc}, block {b}\n"));
        let mut i = 0;
        while i < block.len() {
            let line = &block[i];
            let mut j = i + 1;
            let mut comments = Vec::new();
            while j < block.len() && block[j].starts_with("#   ") {
                comments.push(block[j].as_str());
                j += 1;
            }
            match expectation(&comments) {
                Some(e) if !line.trim().is_empty() && !line.trim_start().starts_with('#') => {
                    let n = checks.len();
                    let file = capture.path().join(format!("out.{n}"));
                    script.push_str(&format!(
                        "( {line}\n) | tee {} # harness: capture this command's answer\n",
                        file.display()
                    ));
                    checks.push((n, line.clone(), e));
                }
                _ => {
                    script.push_str(line);
                    script.push('\n');
                }
            }
            for c in &comments {
                script.push_str(c);
                script.push('\n');
            }
            i = j;
        }
        if block.iter().any(|l| l.contains(" serve &")) {
            script.push_str(&format!(
                "for i in $(seq 300); do curl -sf localhost:8080/healthz >/dev/null && break; sleep 0.1; done # harness: block {b}'s service answers\n"
            ));
        }
    }
    script.push_str("kill -INT $(jobs -p) 2>/dev/null; wait # harness: stop what the documents started in the background\n");
    let (ok, out, err) = run_bash(&script, &repo(), Duration::from_secs(1200));
    assert!(ok, "the documents' commands failed.\n--- script ---\n{script}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}", tail(&out, 40), tail(&err, 40));

    // ---- what the documents say they answer ----------------------------------------------------
    assert!(
        !checks.is_empty(),
        "the documents' expected answers were found"
    );
    for (n, line, e) in &checks {
        let got = std::fs::read_to_string(capture.path().join(format!("out.{n}"))).unwrap();
        let lower = got.to_ascii_lowercase();
        if let Some(status) = &e.status {
            assert!(
                got.starts_with(status.as_str()),
                "`{line}`: the document says {status}, it answered:\n{got}"
            );
        }
        for h in &e.headers {
            assert!(
                lower.contains(h.as_str()),
                "`{line}`: the document says `{h}`, it answered:\n{got}"
            );
        }
        if e.problem_json {
            assert!(
                lower.contains("content-type: application/problem+json"),
                "`{line}`: the document says problem+json, it answered:\n{got}"
            );
        }
        for p in &e.prints {
            assert!(
                got.contains(p.as_str()),
                "`{line}`: the document says it prints `{p}`, it printed:\n{got}"
            );
        }
    }

    // ---- the config error the CLI guide shows ---------------------------------------------------
    let shown = DOCUMENTS
        .iter()
        .flat_map(|(_, text)| text.lines())
        .find(|l| l.starts_with("idemguard: config error in config/mine.toml"))
        .expect("a document shows a config error");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::write(
        dir.path().join("config/mine.toml"),
        "[database]\nurll = \"postgres://root@127.0.0.1:5432/idemguard\"\n",
    )
    .unwrap();
    let out = Command::new(&bin)
        .args(["--config", "config/mine.toml", "config"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        shown,
        "the documents' config error is the real one"
    );
}

#[test]
fn the_parser_finds_blocks_and_expectations() {
    let blocks = sh_blocks("x\n```sh\na\n#   HTTP/1.1 201 Created   idempotent-replayed: true\n```\n   ```sh\n   b\n   ```\n");
    assert_eq!(
        blocks,
        vec![
            vec![
                "a".to_string(),
                "#   HTTP/1.1 201 Created   idempotent-replayed: true".to_string()
            ],
            vec!["b".to_string()]
        ]
    );
    let e = expectation(&[
        "#   HTTP/1.1 201 Created            idempotent-replayed: true    (the same bytes)",
    ])
    .unwrap();
    assert_eq!(e.status.as_deref(), Some("HTTP/1.1 201"));
    assert_eq!(e.headers, vec!["idempotent-replayed: true".to_string()]);
    let e = expectation(&["#   HTTP/1.1 422 Unprocessable Entity   application/problem+json: \"Idempotency-Key reused\""]).unwrap();
    assert!(e.problem_json && e.headers.is_empty());
    let e = expectation(&["#   url = \"postgres://root:***@h/db\""]).unwrap();
    assert_eq!(
        e.prints,
        vec!["url = \"postgres://root:***@h/db\"".to_string()]
    );
    assert!(e.status.is_none());
    assert!(expectation(&["# a comment"]).is_none());
}

/// The architecture guide's Layout section, read as a tree: each entry's path (an indented entry lies in the
/// directory above it; `a.rs, b.rs` names two), never a description's continuation line.
fn layout_paths(architecture: &str) -> Vec<String> {
    let section = architecture
        .split("\n## Layout\n")
        .nth(1)
        .expect("docs/architecture.md has a Layout section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the Layout section is one code block");
    let mut dirs: Vec<String> = Vec::new();
    let mut paths = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        // Entries sit at two spaces a level; descriptions continue in the column after them.
        if indent > 8 || indent % 2 == 1 {
            continue;
        }
        let depth = indent / 2;
        dirs.truncate(depth);
        // The entry's names: its first word, and the next while a name ends with a comma.
        let mut names = Vec::new();
        for word in line.split_whitespace() {
            names.push(word.trim_end_matches(','));
            if !word.ends_with(',') {
                break;
            }
        }
        for name in &names {
            paths.push(format!("{}{name}", dirs.concat()));
        }
        if let [dir] = names[..] {
            if dir.ends_with('/') {
                dirs.push(dir.to_string());
            }
        }
    }
    paths
}

/// The Layout names what exists, and every module directly under `src/` (a file or a
/// directory) is in it: a file that moves, or a new module, cannot leave it behind.
#[test]
fn the_architecture_layout_names_what_exists() {
    let paths = layout_paths(ARCHITECTURE);
    assert!(paths.len() > 40, "the Layout was read: {paths:?}");
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| {
            let p = p.trim_end_matches('/');
            match p.split_once('*') {
                // `postgres/*.sql`: the directory exists and holds such a file.
                Some((dir, ext)) => !std::fs::read_dir(repo().join(dir)).is_ok_and(|mut d| {
                    d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(ext)))
                }),
                None => !repo().join(p).exists(),
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's Layout names paths that do not exist: {missing:?}"
    );
    let mut unnamed = Vec::new();
    for entry in std::fs::read_dir(repo().join("src")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let named = if entry.file_type().unwrap().is_dir() {
            format!("src/{name}/")
        } else {
            format!("src/{name}")
        };
        if !paths.contains(&named) {
            unnamed.push(named);
        }
    }
    unnamed.sort();
    assert!(
        unnamed.is_empty(),
        "modules under src/ docs/architecture.md's Layout does not name: {unnamed:?}"
    );
}

/// The architecture guide's guarantee table names tests that exist: each `module: names` cell is a
/// module of the `guarantees` test binary (`line1_api::api_layer` is
/// `tests/guarantees/line1_api/api_layer.rs`) or a test file of its own under `tests/`, holding
/// each name (a test's name or the part its dialects share).
#[test]
fn the_guarantee_table_names_tests_that_exist() {
    let section = ARCHITECTURE
        .split("\n### Which test proves which guarantee\n")
        .nth(1)
        .expect("docs/architecture.md has the guarantee table");
    let rows: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(rows.len() > 10, "the table was read: {rows:?}");
    let mut wrong = Vec::new();
    for row in &rows {
        let proofs = row.trim_end_matches('|').rsplit('|').next().unwrap();
        for proof in proofs.split(';') {
            // `module::path`: names — the module's path has colons of its own.
            let (file, names) = proof.split_once("`:").unwrap_or((proof, ""));
            let module = file.trim().trim_matches('`');
            let file = match module.contains("::") {
                true => format!("tests/guarantees/{}.rs", module.replace("::", "/")),
                false => format!("tests/{module}.rs"),
            };
            let Ok(text) = std::fs::read_to_string(repo().join(&file)) else {
                wrong.push(format!("{file} does not exist"));
                continue;
            };
            for name in names.split(',').map(|n| n.trim().trim_matches('`')) {
                if !name.is_empty() && !text.contains(name) {
                    wrong.push(format!("{file} has no test {name}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the guarantee table is out of date: {wrong:?}"
    );
}
