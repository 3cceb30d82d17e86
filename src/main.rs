//! The `idemguard` command line. Each subcommand is a thin shell over the library.
//!
//! This file is the entry: parse the flags, load the configuration, start logging and the
//! runtime, hand the subcommand to what runs it. The flags are in commands/args.rs, what each
//! subcommand does in the other files of commands/.

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use idemguard::config::{Config, ConfigSource};
use idemguard::console;

use commands::args::{Cli, Command, LogFormat, ProfileCommand};
use commands::{act, exercise, inspect, services, setup};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Console { keys: true, .. }) {
        // The keymap needs no configuration and no connection.
        print!("{}", console::tui::keymap::help_markdown());
        return ExitCode::SUCCESS;
    }
    init_logging(cli.log_format, &cli.command);
    if let Some(name) = &cli.context {
        // Before any thread starts: the processes a command starts (the demo's services) open
        // the same context.
        std::env::set_var(idemguard::config::CONTEXT_ENV, name);
    }
    let mut source = ConfigSource::from_process(cli.config.clone());
    if let Some(url) = &cli.actions_database_url {
        source
            .env
            .push(("IDEMGUARD_DATABASE__ACTIONS_URL".into(), url.clone()));
    }
    // The commands over every context: no one context's configuration is loaded for them.
    let over_contexts = match cli.command {
        Command::Contexts { json } => Some(commands::setup::list_contexts(&source, json)),
        Command::Doctor {
            json,
            strict,
            all_contexts: true,
        } => Some(
            current_thread().block_on(commands::setup::doctor_all_contexts(&source, json, strict)),
        ),
        _ => None,
    };
    if let Some(result) = over_contexts {
        return match result {
            Ok(code) => code,
            Err(e) => {
                eprintln!(
                    "idemguard: {}",
                    idemguard::untrusted::escape_lines(&format!("{e:#}"))
                );
                ExitCode::FAILURE
            }
        };
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
/// of their own in [`commands`]); the exercises, the operator's reads and the operator's actions
/// are dispatched by [`exercise::run`], [`inspect::run`] and [`act::run`].
async fn run(
    command: Command,
    config: Config,
    config_file: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => setup::apply_migrations(&config).await,
        Command::Profile(ProfileCommand::Suggest {
            out,
            deadline,
            redis_keys,
            messages,
            redis_match,
            environment,
            production,
        }) => {
            let bounds = idemguard::profile::suggest::Bounds {
                deadline,
                redis_keys,
                messages,
                redis_match,
                ..Default::default()
            };
            let environment = idemguard::profile::suggest::Environment {
                name: environment,
                production,
            };
            setup::suggest_profile(&config, out, bounds, environment).await
        }
        Command::Doctor { json, strict, .. } => setup::doctor_command(&config, json, strict).await,
        Command::Contexts { .. } => unreachable!("listed before a configuration is loaded"),
        Command::Consume {
            crash_after_db_commit,
            group,
            metrics_listen,
        } => {
            let config = with_metrics_listen(config, metrics_listen);
            services::consume(config, crash_after_db_commit, group).await
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
            services::serve(config, listen, faults).await
        }
        Command::Demo { no_tui } => {
            let file = ConfigSource::from_process(config_file).file;
            idemguard::demo::run(config, file, !no_tui).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config => {
            commands::stdout::print(config.to_redacted_toml())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Console {
            allow_actions,
            view,
            trace,
            keys: _,
        } => {
            let opening = match (view, trace) {
                (_, Some(id)) => console::tui::app::Opening::Trace(id),
                (Some(v), None) => console::tui::app::Opening::View(v),
                (None, None) => console::tui::app::Opening::Overview,
            };
            let contexts = ConfigSource::from_process(config_file);
            console::tui::terminal::run_opening(config, allow_actions, &opening, Some(&contexts))
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        command @ (Command::Storm { .. } | Command::LockHold { .. }) => {
            exercise::run(command, config).await
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

/// Colours only on a terminal, and never for the console: its log lines go to a file.
fn init_logging(format: LogFormat, command: &Command) {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal()
        && !matches!(command, Command::Console { .. } | Command::Demo { .. });
    idemguard::logging::init(matches!(format, LogFormat::Json), ansi);
}

/// A runtime for a command that runs before the configuration is loaded.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
