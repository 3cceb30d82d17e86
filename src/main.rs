//! The `idemguard` command line. Each subcommand is a thin shell over the library.
//!
//! The flags and subcommands, as clap reads them, are in commands/args.rs; the operator's
//! reads in commands/inspect.rs, the operator's actions in commands/act.rs and redrive.rs.

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use idemguard::config::{Config, ConfigSource};
use idemguard::console;
use idemguard::contracts::Instance;
use idemguard::db::{migrate, Database};
use idemguard::doctor;
use idemguard::stream::{ConsumeOptions, PaymentConsumer};
use idemguard::trace::Tracer;
use tokio_util::sync::CancellationToken;

use commands::args::{Cli, Command, LogFormat, ProfileCommand};
use commands::{act, inspect};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.command);
    let mut source = ConfigSource::from_process(cli.config.clone());
    if let Some(url) = &cli.actions_database_url {
        source
            .env
            .push(("IDEMGUARD_DATABASE__ACTIONS_URL".into(), url.clone()));
    }
    let config = match Config::load(&source) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("idemguard: {e}");
            return ExitCode::from(2);
        }
    };
    idemguard::logging::hide_secrets_of(&config);
    if matches!(cli.command, Command::Console { .. } | Command::Demo { .. }) {
        console::tui::terminal::limit_malloc_arenas();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(run(cli.command, config, cli.config.clone()));
    // The command is done: a blocking read still in flight (a topic read the console's `q` left
    // behind) must not hold the exit up, which dropping the runtime would.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(e) => {
            // An error may quote what another system wrote (a key, a value): escaped.
            let text = idemguard::logging::scrub(&format!("{e:#}"));
            eprintln!("idemguard: {}", idemguard::untrusted::escape_lines(&text));
            ExitCode::FAILURE
        }
    }
}

/// One arm per subcommand, each parsing its flags into one call (the longer ones are functions
/// of their own below); the exercises, the operator's reads and the operator's actions are
/// dispatched by [`exercise`], [`inspect::run`] and [`act::run`].
async fn run(
    command: Command,
    config: Config,
    config_file: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => apply_migrations(&config).await,
        Command::Profile(ProfileCommand::Suggest {
            out,
            deadline,
            redis_keys,
            messages,
            redis_match,
        }) => {
            let bounds = idemguard::profile::suggest::Bounds {
                deadline,
                redis_keys,
                messages,
                redis_match,
            };
            suggest_profile(&config, out, bounds).await
        }
        Command::Doctor { json, strict } => doctor_command(&config, json, strict).await,
        Command::Consume {
            crash_after_db_commit,
            group,
            metrics_listen,
        } => {
            let config = with_metrics_listen(config, metrics_listen);
            consume(config, crash_after_db_commit, group).await
        }
        Command::Serve {
            listen,
            metrics_listen,
            crash_after_request_lock,
            crash_before_publish,
            crash_after_publish,
        } => {
            let faults = idemguard::api::server::Faults {
                crash_after_request_lock,
                crash_before_publish,
                crash_after_publish,
            };
            let config = with_metrics_listen(config, metrics_listen);
            serve(config, listen, faults).await
        }
        Command::Demo { no_tui } => {
            let file = ConfigSource::from_process(config_file).file;
            idemguard::demo::run(config, file, !no_tui).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config => {
            print!("{}", config.to_redacted_toml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Console { allow_actions } => {
            console::tui::terminal::run_with(config, allow_actions).await?;
            Ok(ExitCode::SUCCESS)
        }
        command @ (Command::Storm { .. } | Command::LockHold { .. }) => {
            exercise(command, config).await
        }
        command @ (Command::Trace { .. }
        | Command::Locks { .. }
        | Command::Rates { .. }
        | Command::Stuck { .. }
        | Command::Report { .. }
        | Command::Dlq { .. }) => inspect::run(command, &config).await,
        command @ (Command::ReleaseLock { .. }
        | Command::Purge { .. }
        | Command::Redrive { .. }
        | Command::Finalize { .. }) => act::run(command, &config).await,
    }
}

/// `--metrics-listen`, when given, in place of `metrics.listen`.
fn with_metrics_listen(mut config: Config, metrics_listen: Option<String>) -> Config {
    if let Some(m) = metrics_listen {
        config.metrics.listen = m;
    }
    config
}

/// The exercises against the stack: a storm of requests, a lock held.
async fn exercise(command: Command, config: Config) -> anyhow::Result<ExitCode> {
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

/// `idemguard doctor`: one row per configured service; fails on a failed row (and with
/// `--strict` on a warning), naming the first.
async fn doctor_command(config: &Config, json: bool, strict: bool) -> anyhow::Result<ExitCode> {
    let rows = doctor::run(config).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", doctor::render(&rows));
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
async fn suggest_profile(
    config: &Config,
    out: Option<PathBuf>,
    bounds: idemguard::profile::suggest::Bounds,
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
    let s = suggest::suggest(config, &bounds).await;
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
        None => print!("{text}"),
    }
    for p in &s.problems {
        eprintln!(
            "idemguard profile suggest: not read: {}",
            idemguard::logging::scrub(p)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `idemguard migrate`: apply the schema, saying whether anything was to do.
async fn apply_migrations(config: &Config) -> anyhow::Result<ExitCode> {
    // No statement bound: an index on a big table may take longer than any a service has, and
    // the operator who runs `migrate` watches it.
    let mut unbounded = config.clone();
    unbounded.database.statement_timeout = std::time::Duration::ZERO;
    let db = Database::connect(&unbounded).await?;
    let report = migrate::migrate(&db).await?;
    if report.version_before >= migrate::SCHEMA_VERSION {
        println!(
            "{}: schema v{} already applied; nothing to do",
            db.shown_url, report.version_after
        );
    } else {
        println!(
            "{}: schema v{} applied ({} statements, {} dialect)",
            db.shown_url,
            report.version_after,
            report.statements,
            db.dialect()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `idemguard consume`: the payment consumer until Ctrl-C.
async fn consume(
    config: Config,
    crash_after_db_commit: Option<u64>,
    group: Option<String>,
) -> anyhow::Result<ExitCode> {
    // FAULT INJECTION: never in production.
    if crash_after_db_commit.is_some() && config.environment.production {
        anyhow::bail!("--crash-after-db-commit is fault injection and may not be used when environment.production = true");
    }
    let instance = Instance::current();
    let db = Database::connect(&config).await?;
    let tracer = Tracer::from_config(&config, &instance)?;
    let metrics_group = group
        .clone()
        .unwrap_or_else(|| config.kafka.consumer_group.clone());
    let options = ConsumeOptions {
        crash_after_db_commit,
        group,
    };
    idemguard::kafka_client::stop_on_refusal(&config.kafka).await?;
    let consumer = PaymentConsumer::new(&config, db, tracer.clone(), options)?;
    let shutdown = CancellationToken::new();
    let metrics =
        idemguard::metrics::exposition::start_consume(&config, &metrics_group, &shutdown).await?;
    if let Some(m) = &metrics {
        println!("idemguard consume: metrics on http://{}/metrics", m.addr);
    }
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("idemguard consume: stopping after the current batch");
        on_signal.cancel();
    });
    let run = consumer.run(shutdown.clone()).await;
    shutdown.cancel();
    if let Some(m) = metrics {
        m.stop().await;
    }
    run?;
    tracer.flush(std::time::Duration::from_secs(5));
    Ok(ExitCode::SUCCESS)
}

/// `idemguard serve`: the API until Ctrl-C, then the requests in flight finish.
async fn serve(
    config: Config,
    listen: Option<String>,
    faults: idemguard::api::server::Faults,
) -> anyhow::Result<ExitCode> {
    let listen = listen.unwrap_or_else(|| config.api.listen.clone());
    let server = idemguard::api::server::start_with(config, &listen, faults).await?;
    println!("idemguard serve: listening on http://{}", server.addr);
    if let Some(m) = server.metrics_addr {
        println!("idemguard serve: metrics on http://{m}/metrics");
    }
    let _ = tokio::signal::ctrl_c().await;
    eprintln!("idemguard serve: finishing requests in flight");
    server.shutdown.cancel();
    server.done.await??;
    Ok(ExitCode::SUCCESS)
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
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
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
    use std::io::Write;

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
            println!(
                "{}",
                serde_json::json!({"held": false, "key": key, "current": c.value})
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    println!(
        "{}",
        serde_json::json!({"held": true, "key": key, "instance": instance.id, "fence": guard.fence(), "value": guard.value()})
    );
    std::io::stdout().flush()?;
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
    println!(
        "{}",
        serde_json::json!({"held": false, "key": key, "ended": ended, "lost": lost, "released": report.released()})
    );
    heartbeat.stop().await?;
    tracer.flush(std::time::Duration::from_secs(2));
    Ok(ExitCode::SUCCESS)
}

/// Colours only on a terminal, and never for the console: its log lines go to a file.
fn init_logging(format: LogFormat, command: &Command) {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal()
        && !matches!(command, Command::Console { .. } | Command::Demo { .. });
    idemguard::logging::init(matches!(format, LogFormat::Json), ansi);
}
