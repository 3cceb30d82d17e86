//! Readying a system for idemguard (`migrate`, `doctor`, `profile suggest`): the schema
//! applied, every configured service checked, a source profile drafted from what a team's
//! systems hold.

use std::path::PathBuf;
use std::process::ExitCode;

use idemguard::config::Config;
use idemguard::db::{migrate, Database};
use idemguard::doctor;

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
    let strict = strict.then(|| doctor::warnings(&rows)).flatten();
    match doctor::failures(&rows).or(strict) {
        Some(line) => {
            eprintln!("idemguard doctor: {line}");
            Ok(ExitCode::FAILURE)
        }
        None => Ok(ExitCode::SUCCESS),
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
