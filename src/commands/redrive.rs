//! `idemguard redrive`: which DLQ messages a `--all-with-reason` names, the batch through the
//! action executor with a progress line per message, and the dry run that writes nothing. The
//! longest of the actions, so it has a file of its own beside the others in act.rs.

use std::process::ExitCode;

use idemguard::config::Config;
use idemguard::console::cli::headless;
use idemguard::ops::Action;

use super::action_executor;
use super::inspect::dlq_window;
use super::stdout;

/// The positions of the DLQ messages in the window whose reason contains `text` and that are
/// neither redriven (done or under way) nor back from a redrive.
pub(crate) async fn not_redriven_with_reason(
    config: &Config,
    text: &str,
    since: Option<&str>,
) -> anyhow::Result<Vec<(i32, i64)>> {
    let window = dlq_window(since, None)?;
    let listing = headless::dlq(config, window).await;
    if !listing.ok {
        anyhow::bail!("the DLQ could not be read:\n{}", listing.failures());
    }
    Ok(listing
        .data
        .messages
        .iter()
        .rev() // oldest first: the order they were refused in
        .filter(|m| m.reason.contains(text) && m.returned_from.is_none())
        .filter(|m| m.redriven.as_ref().is_none_or(|r| r.outcome == "error"))
        .map(|m| (m.partition, m.offset))
        .collect())
}

/// `idemguard redrive`: the batch through the executor, one after the other, a progress line
/// on stderr per message and a summary; Ctrl-C stops between messages (what was published is
/// audited, what was not attempted is not).
pub(crate) async fn run_batch(
    config: &Config,
    batch: &[Action],
    allow_actions: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use idemguard::untrusted::escape;
    let (actions, tracer) = action_executor(config, allow_actions).await?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_signal = cancel.clone();
    let listener = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("idemguard redrive: interrupted — stopping after the message in flight");
            on_signal.cancel();
        }
    });
    let n = batch.len();
    eprintln!("idemguard redrive: {n} message(s)");
    let summary = actions
        .run_batch(batch, &cancel, |i, r| {
            let audit = r
                .audit_id
                .map_or("NOT audited".into(), |id| format!("ops_audit row {id}"));
            eprintln!(
                "[{}/{n}] {} {}: {} ({audit})",
                i + 1,
                escape(&r.target),
                r.outcome,
                escape(&r.detail)
            );
        })
        .await;
    listener.abort();
    tracer.flush(std::time::Duration::from_secs(5));
    if json {
        stdout::json(&summary)?;
    } else {
        stdout::line(format_args!(
            "{} done, {} refused, {} error(s), {} not attempted{}",
            summary.done,
            summary.refused,
            summary.errors,
            summary.not_attempted,
            if summary.cancelled {
                " (interrupted)"
            } else {
                ""
            }
        ))?;
    }
    Ok(ExitCode::from(summary.exit_code()))
}

/// `idemguard redrive --dry-run`: per message, the exact effect and what the consumer would do
/// with it now; nothing is written, nothing audited.
pub(crate) async fn redrive_dry_run(
    config: &Config,
    positions: &[(i32, i64)],
    json: bool,
) -> anyhow::Result<ExitCode> {
    use idemguard::console::read::dlq::one;
    use idemguard::untrusted::escape;
    let db = idemguard::console::read::sources::connect_database(config).await?;
    let mut plans = Vec::new();
    for &(p, o) in positions {
        let action = Action::redrive(&config.kafka.dlq_topic, p, o, None);
        let message = one(config, &db, p, o).await?;
        plans.push(serde_json::json!({
            "target": action.target(),
            "effect": action.effect(Some(db.dialect())),
            "message": message,
        }));
        if json {
            continue;
        }
        stdout::line(format_args!(
            "redrive {} (dry run: nothing written)",
            escape(action.target())
        ))?;
        for line in action.effect(Some(db.dialect())) {
            stdout::line(format_args!("  {}", escape(&line)))?;
        }
        match message {
            None => stdout::line("  the DLQ holds no message there")?,
            Some(m) => {
                let cells =
                    idemguard::console::columns::dlq_cells(&m, idemguard::contracts::now_ms());
                for (c, v) in idemguard::console::columns::DLQ.iter().zip(cells) {
                    stdout::line(format_args!("  {:<9} {v}", c.header))?;
                }
            }
        }
    }
    db.pool.close().await;
    if json {
        stdout::json(&plans)?;
    }
    Ok(ExitCode::SUCCESS)
}
