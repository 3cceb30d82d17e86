//! The operator's reads from the command line (`trace`, `locks`, `rates`, `stuck`, `dlq`,
//! `report`): the console's views, once, as a table or JSON, with the exit status saying
//! whether every backend answered; and the `--since/--until` windows they read.

use std::path::PathBuf;
use std::process::ExitCode;

use idemguard::config::Config;
use idemguard::console::cli::headless;

use super::args::{Command, ReportOutput};
use super::stdout;

/// The operator's reads: what the live systems hold (a trace, the locks, the rates, the stuck
/// records, a report, the DLQ).
pub(crate) async fn run(command: Command, config: &Config) -> anyhow::Result<ExitCode> {
    match command {
        Command::Trace {
            id,
            json,
            since,
            until,
        } => {
            let window = trace_window(since.as_deref(), until.as_deref())?;
            let target = idemguard::contracts::TraceTarget::classify(&id);
            let r = headless::trace_in(config, &target, window).await;
            print_report(&r, json, headless::trace_table)
        }
        Command::Locks { json } => {
            let r = headless::locks(config).await;
            print_report(&r, json, headless::locks_table)
        }
        Command::Rates { json } => {
            let r = headless::rates(config).await;
            print_report(&r, json, headless::rates_table)
        }
        Command::Stuck { json } => {
            let r = headless::stuck(config).await;
            print_report(&r, json, headless::stuck_table)
        }
        Command::Report {
            id,
            since,
            until,
            format,
            json,
            output,
        } => report_command(config, id, (since, until), format, json, output).await,
        Command::Dlq { since, until, json } => {
            let window = dlq_window(since.as_deref(), until.as_deref())?;
            let r = headless::dlq(config, window).await;
            print_report(&r, json, headless::dlq_table)
        }
        _ => unreachable!("run hands each command to the function that handles it"),
    }
}

/// `idemguard report`: the post-incident report of one ID or of a window, to stdout or a
/// private file; exits 6 when it found a duplicate that got through or a contradiction.
async fn report_command(
    config: &Config,
    id: Option<String>,
    (since, until): (Option<String>, Option<String>),
    format: ReportOutput,
    json: bool,
    output: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use idemguard::console::report;
    let scope = match (id, since, until) {
        (Some(id), _, _) => {
            report::ReportScope::Id(idemguard::contracts::TraceTarget::classify(&id))
        }
        (None, Some(s), Some(u)) => report::ReportScope::Window {
            since_ms: report::parse_time(&s).map_err(anyhow::Error::msg)?,
            until_ms: report::parse_time(&u).map_err(anyhow::Error::msg)?,
        },
        _ => anyhow::bail!("give --id ID, or --since T and --until T"),
    };
    let r = report::build(config, &scope).await?;
    let text = match (json, format) {
        (true, _) | (_, ReportOutput::Json) => serde_json::to_string_pretty(&r)? + "\n",
        (_, ReportOutput::Markdown) => report::ReportFormat::Markdown.render(&r),
        (_, ReportOutput::Html) => report::ReportFormat::Html.render(&r),
    };
    match output {
        Some(path) => idemguard::private_file::write(&path, &text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => stdout::print(text)?,
    }
    for e in &r.errors {
        eprintln!(
            "idemguard report: not read: {}",
            idemguard::untrusted::escape(e)
        );
    }
    Ok(ExitCode::from(
        if r.leaks.is_empty() && r.contradictions.is_empty() {
            0
        } else {
            6
        },
    ))
}

/// `idemguard trace --since/--until`: the window an unknown ID is searched in (`None`: the last
/// 24 h).
fn trace_window(
    since: Option<&str>,
    until: Option<&str>,
) -> anyhow::Result<Option<idemguard::console::read::window::TimeWindow>> {
    use idemguard::console::read::window::{TimeWindow, DEFAULT_UNKNOWN_WINDOW};
    if since.is_none() && until.is_none() {
        return Ok(None);
    }
    use idemguard::console::report::parse_time;
    let parse = |s: &str| parse_time(s).map_err(anyhow::Error::msg);
    let to_ms = until.map_or_else(|| Ok(idemguard::contracts::now_ms()), parse)?;
    let from_ms = since.map_or(Ok(to_ms - DEFAULT_UNKNOWN_WINDOW.as_millis() as i64), parse)?;
    if from_ms > to_ms {
        anyhow::bail!("--since must not be after --until");
    }
    Ok(Some(TimeWindow { from_ms, to_ms }))
}

/// `idemguard dlq`'s window: `--since/--until`, 7 days before now by default.
pub(crate) fn dlq_window(
    since: Option<&str>,
    until: Option<&str>,
) -> anyhow::Result<idemguard::console::read::window::TimeWindow> {
    use idemguard::console::read::dlq::DEFAULT_DLQ_WINDOW;
    use idemguard::console::read::window::TimeWindow;
    use idemguard::console::report::parse_time;
    let parse = |s: &str| parse_time(s).map_err(anyhow::Error::msg);
    let to_ms = until.map_or_else(|| Ok(idemguard::contracts::now_ms()), parse)?;
    let from_ms = since.map_or(Ok(to_ms - DEFAULT_DLQ_WINDOW.as_millis() as i64), parse)?;
    if from_ms > to_ms {
        anyhow::bail!("--since must not be after --until");
    }
    Ok(TimeWindow { from_ms, to_ms })
}

/// Prints a headless report (JSON or table), backend failures on stderr; the exit status says
/// whether every backend answered and the ID was known.
fn print_report<T: serde::Serialize>(
    r: &headless::Document<T>,
    json: bool,
    table: fn(&headless::Document<T>) -> String,
) -> anyhow::Result<ExitCode> {
    if json {
        stdout::json(r)?;
    } else {
        stdout::print(table(r))?;
    }
    eprint!("{}", r.failures());
    if r.exit_code() == headless::EXIT_UNKNOWN_ID {
        eprintln!(
            "idemguard {}: no row, key, message or trace event names this ID",
            r.command
        );
    }
    Ok(ExitCode::from(r.exit_code()))
}
