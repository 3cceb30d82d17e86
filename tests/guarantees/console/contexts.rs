//! Contexts: one config file holding several systems' connections, `config/contexts.toml` on
//! the local stack — its plaintext services (`default`) and its TLS services (`tls`). Each test
//! drives the real binary: the listing, the doctor over every context, the console's header.

use crate::support::tmux;

use std::process::Command;
use std::time::Duration;

const CONTEXTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/contexts.toml");

/// `idemguard ARGS` from the repository's root (the file's paths are relative to it), with no
/// IDEMGUARD_* variable of the caller's: exit code, stdout, stderr.
fn idemguard(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemguard"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGUARD_")) {
        cmd.env_remove(k);
    }
    let out = cmd
        .args(args)
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn listed(args: &[&str], env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let (code, out, err) = idemguard(args, env);
    assert_eq!(code, Some(0), "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn contexts_are_listed_with_the_one_in_use_marked() {
    let rows = listed(&["--config", CONTEXTS, "contexts", "--json"], &[]);
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "tls"]);
    assert_eq!(rows[0]["current"], true);
    assert_eq!(rows[1]["environment"], "local-tls");
    assert_eq!(rows[1]["actions"], "read-only");
    assert!(
        rows[1]["services"]
            .as_str()
            .unwrap()
            .contains("kafka localhost:9093"),
        "{rows:?}"
    );
    // The flag and the variable choose the same way.
    let by_flag = listed(
        &[
            "--config",
            CONTEXTS,
            "--context",
            "tls",
            "contexts",
            "--json",
        ],
        &[],
    );
    let by_env = listed(
        &["--config", CONTEXTS, "contexts", "--json"],
        &[("IDEMGUARD_CONTEXT", "tls")],
    );
    for rows in [by_flag, by_env] {
        assert_eq!(
            (rows[0]["current"].clone(), rows[1]["current"].clone()),
            (false.into(), true.into())
        );
    }
    let (code, table, _) = idemguard(&["--config", CONTEXTS, "contexts"], &[]);
    assert_eq!(code, Some(0));
    assert!(table.lines().any(|l| l.starts_with("*default")), "{table}");
}

#[test]
fn a_context_that_does_not_load_is_listed_with_why_and_refused_when_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(
        &file,
        "[environment]\nname = \"here\"\n[contexts.broken.database]\nurl = \"nope://x\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let rows = listed(&["--config", file, "contexts", "--json"], &[]);
    assert_eq!(rows[0]["environment"], "here");
    let error = rows[1]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("[contexts.broken]") && error.contains("database.url"),
        "{rows:?}"
    );
    let (code, _, err) = idemguard(&["--config", file, "--context", "broken", "config"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("database.url"), "{err}");
    // A name that is no context: the ones there are, and the nearest.
    let (code, _, err) = idemguard(&["--config", CONTEXTS, "--context", "tsl", "doctor"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no context `tsl` (did you mean `tls`?): its contexts are default, tls"),
        "{err}"
    );
}

/// One run checks both contexts, each over its own connections: the plaintext stack and the
/// TLS one, verified, Kafka by client certificate.
#[test]
fn doctor_checks_every_context_in_one_run() {
    let (code, out, err) = idemguard(&["--config", CONTEXTS, "--context", "tls", "migrate"], &[]);
    assert_eq!(
        code,
        Some(0),
        "the TLS database takes the schema: {out}{err}"
    );
    let (code, out, err) = idemguard(
        &["--config", CONTEXTS, "doctor", "--all-contexts", "--json"],
        &[],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let checked: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let detail = |context: &str, service: &str| -> String {
        let c = checked.iter().find(|c| c["context"] == context).unwrap();
        let rows = c["rows"].as_array().unwrap();
        let row = rows.iter().find(|r| r["service"] == service);
        row.unwrap_or_else(|| panic!("{context}: no {service} row: {out}"))["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        detail("default", "kafka security").contains("plaintext"),
        "{out}"
    );
    let tls = detail("tls", "kafka security");
    assert!(
        tls.contains("verified against .stack/tls/ca.pem") && tls.contains("client certificate"),
        "{tls}"
    );
    assert!(detail("tls", "redis security").contains("TLSv1.3"), "{out}");
    // The table names each row's context.
    let (code, table, err) = idemguard(&["--config", CONTEXTS, "doctor", "--all-contexts"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(table.starts_with("CONTEXT  SERVICE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("tls      kafka security")),
        "{table}"
    );
}

#[test]
fn the_consoles_header_says_which_context_is_open() {
    let args = format!(" --config {CONTEXTS} --context tls");
    let env: [(&str, &str); 0] = [];
    let t = tmux::Terminal::console("igctx", (80, 24), &env, &args);
    let screen = t.wait_for(
        "the header of the tls context, its database answering",
        Duration::from_secs(60),
        |s| s.contains("ctx tls") && s.contains("database ok"),
    );
    let header = screen.lines().next().unwrap_or_default();
    assert!(
        header.contains("LOCAL-TLS") && header.contains("ctx tls") && header.contains("read-only"),
        "{screen}"
    );
    t.quit_console(Duration::from_secs(20));
}

/// `:ctx NAME` reopens the console on another context: its header, its services answering;
/// a name that is no context is said on the status line and changes nothing.
#[test]
fn ctx_switches_the_console_to_another_context() {
    let args = format!(" --config {CONTEXTS}");
    let env: [(&str, &str); 0] = [];
    let t = tmux::Terminal::console("igctxs", (100, 30), &env, &args);
    t.wait_for("the default context", Duration::from_secs(60), |s| {
        s.contains("ctx default") && s.contains("database ok")
    });
    let console = console_pid(&t.flag("#{pane_pid}"));
    assert!(
        connections(console)
            .iter()
            .any(|peer| peer.ends_with(":5432")),
        "the default context's database is connected: {:?}",
        connections(console)
    );
    t.keys(&[":"]);
    t.type_line("ctx tsl");
    let refused = t.wait_for("the refusal", Duration::from_secs(20), |s| {
        s.contains("no context `tsl`")
    });
    assert!(
        refused
            .lines()
            .next()
            .unwrap_or_default()
            .contains("ctx default"),
        "{refused}"
    );
    t.keys(&[":"]);
    t.type_line("ctx tls");
    let screen = t.wait_for(
        "the tls context's Overview, its database answering",
        Duration::from_secs(30),
        // The header, not the command line the name was typed on.
        |s| {
            let header = s.lines().next().unwrap_or_default();
            header.contains("LOCAL-TLS  ctx tls") && s.contains("database ok")
        },
    );
    assert!(screen.contains("Overview — what is wrong now"), "{screen}");
    // The default context's collectors are shut down: no connection of the console's is left to
    // the plaintext services' ports (the tls context's are 5433, 6390-6393, 9093).
    let plaintext = [":5432", ":6379", ":9092"];
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left: Vec<String> = connections(console)
            .into_iter()
            .filter(|peer| plaintext.iter().any(|p| peer.ends_with(p)))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the default context's connections stay open: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        connections(console)
            .iter()
            .any(|peer| peer.ends_with(":5433")),
        "the tls context's database is connected: {:?}",
        connections(console)
    );
    t.quit_console(Duration::from_secs(20));
}

/// The idemguard process the pane's shell `shell` runs.
fn console_pid(shell: &str) -> u32 {
    let children =
        std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|p| {
            std::fs::read_link(format!("/proc/{p}/exe"))
                .is_ok_and(|e| e.file_name().is_some_and(|n| n == "idemguard"))
        })
        .unwrap_or_else(|| panic!("no idemguard under the pane's shell {shell}"))
}

/// The peers (`address:port`) of `pid`'s established TCP connections, as `ss` lists them.
fn connections(pid: u32) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-Htnp", "state", "established"])
        .output()
        .expect("ss (iproute2) runs");
    let marker = format!("pid={pid},");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&marker))
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
        .collect()
}
