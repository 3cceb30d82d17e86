//! Readying a system for idemguard (`migrate`, `doctor`, `profile suggest`): the schema
//! applied, every configured service checked, a source profile drafted from what a team's
//! systems hold.

use std::path::PathBuf;
use std::process::ExitCode;

use idemguard::config::{host_port, Config, ConfigSource, DEFAULT_CONTEXT};
use idemguard::db::{migrate, Database};
use idemguard::doctor;
use idemguard::untrusted::escape_lines;

use super::stdout;

/// `idemguard migrate`: apply the schema, saying whether anything was to do.
pub(crate) async fn apply_migrations(config: &Config) -> anyhow::Result<ExitCode> {
    // No statement bound: an index on a big table may take longer than any a service has, and
    // the operator who runs `migrate` watches it.
    let mut unbounded = config.clone();
    unbounded.database.statement_timeout = std::time::Duration::ZERO;
    let db = Database::connect(&unbounded).await?;
    let report = migrate::migrate(&db).await?;
    if report.version_before >= migrate::SCHEMA_VERSION {
        stdout::line(format_args!(
            "{}: schema v{} already applied; nothing to do",
            db.shown_url, report.version_after
        ))?;
    } else {
        stdout::line(format_args!(
            "{}: schema v{} applied ({} statements, {} dialect)",
            db.shown_url,
            report.version_after,
            report.statements,
            db.dialect()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `idemguard doctor`: one row per configured service; fails on a failed row (and with
/// `--strict` on a warning), naming the first.
pub(crate) async fn doctor_command(
    config: &Config,
    json: bool,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    let rows = doctor::run(config).await;
    if json {
        stdout::json(&rows)?;
    } else {
        stdout::print(doctor::render(&rows))?;
    }
    match verdict(&rows, strict) {
        Some(line) => {
            eprintln!("idemguard doctor: {line}");
            Ok(ExitCode::FAILURE)
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Why `doctor` fails on `rows`: a failed check, or with `strict` a warning; `None` when it passes.
fn verdict(rows: &[doctor::CheckRow], strict: bool) -> Option<String> {
    let warned = strict.then(|| doctor::warnings(rows)).flatten();
    doctor::failures(rows).or(warned)
}

/// `idemguard doctor --all-contexts`: every context of the file checked, one table with a
/// CONTEXT column; a context whose configuration does not load is a failed row of its own.
pub(crate) async fn doctor_all_contexts(
    source: &ConfigSource,
    json: bool,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    let names = Config::contexts(source)?;
    if names.is_empty() {
        anyhow::bail!(
            "the config file has no [contexts.NAME] tables: `idemguard doctor` checks its one \
             configuration (docs/production.md, Contexts)"
        );
    }
    let mut checked: Vec<(String, Vec<doctor::CheckRow>)> = Vec::new();
    for name in names {
        let rows = match Config::load(&source.with_context(&name)) {
            Ok(config) => doctor::run(&config).await,
            Err(e) => vec![doctor::CheckRow {
                service: "config".into(),
                target: e.origin.clone(),
                ok: false,
                latency_ms: 0.0,
                detail: e.to_string(),
                hint: None,
                warning: false,
            }],
        };
        checked.push((name, rows));
    }
    if json {
        let doc: Vec<serde_json::Value> = checked
            .iter()
            .map(|(name, rows)| serde_json::json!({ "context": name, "rows": rows }))
            .collect();
        stdout::json(&doc)?;
    } else {
        stdout::print(render_contexts(&checked))?;
    }
    let closing = |(name, rows): &(String, Vec<doctor::CheckRow>)| {
        verdict(rows, strict).map(|line| format!("context {name}: {line}"))
    };
    let failed: Vec<String> = checked.iter().filter_map(closing).collect();
    if failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("idemguard doctor: {}", failed.join("; "));
    Ok(ExitCode::FAILURE)
}

/// The doctor's table with each row's context in a first column.
fn render_contexts(checked: &[(String, Vec<doctor::CheckRow>)]) -> String {
    let width = checked
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0)
        .max(7);
    let rows: Vec<doctor::CheckRow> = checked
        .iter()
        .flat_map(|(name, rows)| {
            rows.iter().map(move |r| doctor::CheckRow {
                service: format!("{name:<width$}  {}", r.service),
                ..r.clone()
            })
        })
        .collect();
    let table = doctor::render(&rows);
    let (header, body) = table.split_once('\n').unwrap_or((&table, ""));
    let services = header.find("  TARGET").unwrap_or(header.len());
    let rest = services.saturating_sub(width + 2);
    format!(
        "{:<width$}  {:<rest$}{}\n{body}",
        "CONTEXT",
        "SERVICE",
        &header[services..]
    )
}

/// `idemguard contexts`: the file's contexts, each with its environment, its services and
/// whether its console may act; the one in use marked `*`. A context that does not load says
/// why on its row; the others are still listed.
pub(crate) fn list_contexts(source: &ConfigSource, json: bool) -> anyhow::Result<ExitCode> {
    let names = Config::contexts(source)?;
    let current = source.context().unwrap_or(DEFAULT_CONTEXT).to_string();
    let rows: Vec<ContextRow> = names
        .iter()
        .map(|name| ContextRow::of(name, name == &current, source))
        .collect();
    if json {
        stdout::json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        stdout::line(
            "no contexts: the config file has no [contexts.NAME] tables, so every command uses \
             its one configuration (docs/production.md, Contexts)",
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4) + 2;
    let mut out = format!(
        "{:<w$}{:<22}{:<18}SERVICES\n",
        "NAME", "ENVIRONMENT", "ACTIONS"
    );
    for r in &rows {
        let name = format!("{}{}", if r.current { "*" } else { " " }, r.name);
        match &r.error {
            Some(e) => out.push_str(&format!("{name:<w$}does not load: {e}\n")),
            None => out.push_str(&format!(
                "{name:<w$}{:<22}{:<18}{}\n",
                r.environment, r.actions, r.services
            )),
        }
    }
    stdout::print(escape_lines(&out))?;
    Ok(ExitCode::SUCCESS)
}

/// One context as `idemguard contexts` lists it.
#[derive(serde::Serialize)]
struct ContextRow {
    name: String,
    current: bool,
    environment: String,
    production: bool,
    actions: String,
    services: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl ContextRow {
    fn of(name: &str, current: bool, source: &ConfigSource) -> ContextRow {
        let mut row = ContextRow {
            name: name.into(),
            current,
            environment: String::new(),
            production: false,
            actions: String::new(),
            services: String::new(),
            error: None,
        };
        match Config::load(&source.with_context(name)) {
            Ok(c) => {
                let production = if c.environment.production {
                    " (production)"
                } else {
                    ""
                };
                row.environment = format!("{}{production}", c.environment.name);
                row.production = c.environment.production;
                row.actions = if c.environment.allow_actions {
                    "allowed".into()
                } else {
                    "read-only".into()
                };
                row.services = format!(
                    "database {} · redis {} · kafka {}",
                    host_port(&c.database.url),
                    host_port(&c.redis.url),
                    c.kafka.bootstrap_servers
                );
            }
            Err(e) => row.error = Some(e.to_string()),
        }
        row
    }
}

/// `idemguard profile suggest`: a profile drafted from what the services hold, never over an
/// existing file.
pub(crate) async fn suggest_profile(
    config: &Config,
    out: Option<PathBuf>,
    bounds: idemguard::profile::suggest::Bounds,
    environment: idemguard::profile::suggest::Environment,
) -> anyhow::Result<ExitCode> {
    use idemguard::profile::suggest;
    if let Some(path) = out.as_ref().filter(|p| p.exists()) {
        anyhow::bail!(
            "{} exists: give another --out (a suggestion never overwrites a profile)",
            path.display()
        );
    }
    eprintln!(
        "idemguard profile suggest: reading the database, Redis, the topics and the log files (each within {:?}) …",
        bounds.deadline
    );
    let s = suggest::suggest(config, &bounds, &environment).await;
    let text = s.to_toml();
    match &out {
        Some(path) => {
            std::fs::write(path, &text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!(
                "idemguard profile suggest: wrote {} — next: idemguard --config {} doctor",
                path.display(),
                path.display()
            );
        }
        None => stdout::print(text)?,
    }
    for p in &s.problems {
        eprintln!(
            "idemguard profile suggest: not read: {}",
            idemguard::logging::scrub(p)
        );
    }
    Ok(ExitCode::SUCCESS)
}
