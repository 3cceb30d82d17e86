//! The operator's actions from the command line (`release-lock`, `purge`, `redrive`,
//! `finalize`): each through the same executor, guards and audit as the console's confirm
//! popup, with the result printed and its exit status.

use std::process::ExitCode;

use idemguard::config::Config;
use idemguard::db::Database;
use idemguard::ops::{self, Action};
use tokio_util::sync::CancellationToken;

use super::action_executor;
use super::args::Command;
use super::redrive::{not_redriven_with_reason, redrive_dry_run, run_batch};
use super::stdout;

/// The operator's actions on the live systems: release a lock, purge, redrive, finalize.
pub(crate) async fn run(command: Command, config: &Config) -> anyhow::Result<ExitCode> {
    match command {
        Command::ReleaseLock {
            key,
            expect_values,
            force,
            reason,
            bump_fence,
            allow_actions,
            json,
        } => {
            let action = Action::ReleaseLock {
                key,
                expect_values,
                force,
                bump_fence,
                reason,
            };
            run_action(config, action, allow_actions, json).await
        }
        Command::Purge { json } => purge(config, json).await,
        Command::Redrive {
            positions,
            all_with_reason,
            since,
            dry_run,
            reason,
            allow_actions,
            json,
        } => {
            let positions = match all_with_reason {
                None => positions,
                Some(text) => not_redriven_with_reason(config, &text, since.as_deref()).await?,
            };
            if dry_run {
                return redrive_dry_run(config, &positions, json).await;
            }
            let batch: Vec<Action> = positions
                .iter()
                .map(|&(p, o)| Action::redrive(&config.kafka.dlq_topic, p, o, reason.clone()))
                .collect();
            run_batch(config, &batch, allow_actions, json).await
        }
        Command::Finalize {
            request_id,
            expect_version,
            reason,
            allow_actions,
            json,
        } => {
            let action = Action::Finalize {
                request_id,
                expect_version,
                reason,
            };
            run_action(config, action, allow_actions, json).await
        }
        _ => unreachable!("run hands each command to the function that handles it"),
    }
}

/// `idemguard purge`: one retention pass over every table, now.
async fn purge(config: &Config, json: bool) -> anyhow::Result<ExitCode> {
    use idemguard::db::retention::{self, Purge};
    let db = Database::connect(config).await?;
    let counts = retention::pass(
        &db,
        Purge::ALL,
        &config.retention,
        &CancellationToken::new(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("database {}: purge failed: {e}", db.shown_url))?;
    if json {
        stdout::json(&counts)?;
    } else {
        for p in &counts {
            stdout::line(format_args!("{}: {} row(s) deleted", p.table, p.deleted))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The headless twin of the console's confirm popup: the same [`Actions::run`], its guards and
/// its audit.
async fn run_action(
    config: &Config,
    action: Action,
    allow_actions: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (actions, tracer) = action_executor(config, allow_actions).await?;
    let result = actions.run(&action).await;
    tracer.flush(std::time::Duration::from_secs(5));
    if json {
        stdout::json(&result)?;
    } else {
        // The key and the values seen are Redis's, the record's the database's: escaped.
        use idemguard::untrusted::escape;
        stdout::line(format_args!(
            "{} {}: {}",
            result.action,
            escape(&result.target),
            result.outcome
        ))?;
        stdout::line(format_args!("  {}", escape(&result.detail)))?;
        match result.audit_id {
            Some(id) => stdout::line(format_args!(
                "  audited as ops_audit row {id} (operator {}, environment {})",
                actions.operator(),
                config.environment.name
            ))?,
            None => stdout::line("  NOT audited — and therefore not performed")?,
        }
    }
    Ok(ExitCode::from(ops::exit_code(result.outcome)))
}
