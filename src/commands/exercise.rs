//! The exercises against the stack (`storm`, and the hidden `lock-hold` the storm and the
//! tests use as a separate holder they can kill): they put load or a lock on the live systems,
//! where the other commands read or repair them.

use std::process::ExitCode;

use idemguard::config::Config;
use idemguard::contracts::Instance;
use idemguard::trace::Tracer;

use super::args::Command;
use super::stdout;

/// The exercises against the stack: a storm of requests, a lock held.
pub(crate) async fn run(command: Command, config: Config) -> anyhow::Result<ExitCode> {
    match command {
        Command::Storm {
            scenario,
            requests,
            concurrency,
            stock,
            broken,
            json,
            duration,
            seed,
        } => {
            let mut options = idemguard::storm::StormOptions::new(scenario);
            options.duration = duration;
            options.seed = seed.unwrap_or_else(rand::random);
            options.size = requests;
            options.concurrency = concurrency;
            options.stock = stock;
            options.broken = broken;
            storm(config, options, json).await
        }
        Command::LockHold {
            key,
            ttl,
            no_watchdog,
            hold,
        } => lock_hold(&config, &key, ttl, no_watchdog, hold).await,
        _ => unreachable!("run hands each command to the function that handles it"),
    }
}

/// `idemguard storm`: a scenario against a fresh stack; exit 1 when an invariant is violated.
async fn storm(
    config: Config,
    mut options: idemguard::storm::StormOptions,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    options.binary = Some(std::env::current_exe()?);
    options.progress = !json && std::io::stderr().is_terminal();
    let report = idemguard::storm::run(config, &options).await?;
    if json {
        stdout::json(&report)?;
    } else {
        stdout::print(report.render())?;
    }
    if report.passed {
        Ok(ExitCode::SUCCESS)
    } else {
        for c in report.violations() {
            eprintln!(
                "idemguard storm: invariant {} violated by {} record(s), e.g. {}",
                c.name,
                c.offenders.len(),
                c.offenders.first().map_or("", String::as_str)
            );
        }
        Ok(ExitCode::FAILURE)
    }
}

/// Prints one JSON line when the lock is held (`{"held":true,"instance":…,"fence":…,"value":…}`)
/// and one when it ends, so a parent process can follow along.
async fn lock_hold(
    config: &Config,
    key: &str,
    ttl: Option<std::time::Duration>,
    no_watchdog: bool,
    hold: Option<std::time::Duration>,
) -> anyhow::Result<ExitCode> {
    use idemguard::lock::{Acquisition, Locks};

    let instance = Instance::current();
    let tracer = Tracer::from_config(config, &instance)?;
    let locks = Locks::from_config(config, &instance, tracer.clone())?;
    let heartbeat = locks.liveness().start(&instance).await?;
    let mut options = locks.options();
    if let Some(ttl) = ttl {
        options = options.ttl(ttl);
    }
    if no_watchdog {
        options = options.without_watchdog();
    }
    let guard = match locks.acquire_with(key, &options).await? {
        Acquisition::Held(g) => g,
        Acquisition::Contended(c) => {
            stdout::line(serde_json::json!({"held": false, "key": key, "current": c.value}))?;
            return Ok(ExitCode::FAILURE);
        }
    };
    stdout::line(
        serde_json::json!({"held": true, "key": key, "instance": instance.id, "fence": guard.fence(), "value": guard.value()}),
    )?;
    let held_for = async {
        match hold {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    let ended = tokio::select! {
        _ = held_for => "hold time over",
        _ = guard.lost() => "lock lost",
        _ = tokio::signal::ctrl_c() => "interrupted",
    };
    let lost = guard.lost_reason();
    let report = guard.release().await?;
    stdout::line(
        serde_json::json!({"held": false, "key": key, "ended": ended, "lost": lost, "released": report.released()}),
    )?;
    heartbeat.stop().await?;
    tracer.flush(std::time::Duration::from_secs(2));
    Ok(ExitCode::SUCCESS)
}
