//! The `idemguard` command line. Each subcommand is a thin shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use idemguard::config::{Config, ConfigSource};
use idemguard::db::{migrate, Database};
use idemguard::console::{self, headless};
use idemguard::doctor;

#[derive(Parser)]
#[command(
    name = "idemguard",
    version,
    about = "Stops duplicate orders in three lines of defense and shows where each duplicate was stopped",
    long_about = "idemguard: an order service guarded by an Idempotency-Key layer, Redis locks, database \
                  unique keys and a deduplicating payment-event consumer — and an operations console that \
                  traces one orderNo / requestId / eventId across every layer.\n\n\
                  Configuration: the built-in defaults (config/default.toml), then --config FILE or \
                  $IDEMGUARD_CONFIG, then IDEMGUARD_<SECTION>__<KEY> environment variables.",
    after_help = "Quick start on the local stack:\n  scripts/stack up\n  idemguard --config config/local.toml migrate\n  idemguard --config config/local.toml doctor"
)]
struct Cli {
    /// Configuration file laid over the built-in defaults [env: IDEMGUARD_CONFIG]
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Create every table and index in the configured database (safe to run twice, or twice at once)
    Migrate,
    /// Check every configured service: database, Redis nodes, Kafka and its topics
    Doctor {
        /// Print the rows as JSON
        #[arg(long)]
        json: bool,
    },
    /// Print the effective configuration (passwords hidden)
    Config,
    /// Open the operations console (terminal UI): Trace, Locks, Rates and Stuck views, live
    Console,
    /// Trace one orderNo, requestId or eventId across every layer (the console's Trace view, once)
    Trace {
        /// An orderNo, a requestId (has ':') or an eventId (a UUID)
        id: String,
        /// Print the `idemguard.console/v1` JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Every lock:* key with its holder, PTTL, owner liveness and RedLock quorum (SCAN, never KEYS)
    Locks {
        #[arg(long)]
        json: bool,
    },
    /// Interceptions per layer per minute over the last hour, and the consumer group's lag
    Rates {
        #[arg(long)]
        json: bool,
    },
    /// PROCESSING idempotency records older than console.stuck_threshold, oldest first
    Stuck {
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let config = match Config::load(&ConfigSource::from_process(cli.config.clone())) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("idemguard: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = runtime.block_on(run(cli.command, config));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemguard: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, config: Config) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => {
            let db = Database::connect(&config).await?;
            let report = migrate::migrate(&db).await?;
            if report.version_before >= migrate::SCHEMA_VERSION {
                println!("{}: schema v{} already applied; nothing to do", db.shown_url, report.version_after);
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
        Command::Doctor { json } => {
            let rows = doctor::run(&config).await;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", doctor::render(&rows));
            }
            let failed = rows.iter().filter(|r| !r.ok).count();
            if failed > 0 {
                eprintln!("idemguard doctor: {failed} check(s) failed");
                Ok(ExitCode::FAILURE)
            } else {
                Ok(ExitCode::SUCCESS)
            }
        }
        Command::Config => {
            print!("{}", config.to_redacted_toml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Console => {
            console::run(config).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Trace { id, json } => {
            let r = headless::trace(&config, &id).await;
            Ok(print_report(&r, json, headless::trace_table))
        }
        Command::Locks { json } => {
            let r = headless::locks(&config).await;
            Ok(print_report(&r, json, headless::locks_table))
        }
        Command::Rates { json } => {
            let r = headless::rates(&config).await;
            Ok(print_report(&r, json, headless::rates_table))
        }
        Command::Stuck { json } => {
            let r = headless::stuck(&config).await;
            Ok(print_report(&r, json, headless::stuck_table))
        }
    }
}

/// Prints a headless report (JSON or table), backend failures on stderr; the exit status says
/// whether every backend answered and the ID was known.
fn print_report<T: serde::Serialize>(r: &headless::Report<T>, json: bool, table: fn(&headless::Report<T>) -> String) -> ExitCode {
    if json {
        match serde_json::to_string_pretty(r) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("idemguard: cannot write JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(r));
    }
    eprint!("{}", r.failures());
    if r.exit_code() == headless::EXIT_UNKNOWN_ID {
        eprintln!("idemguard {}: no row, key, message or trace event names this ID", r.command);
    }
    ExitCode::from(r.exit_code())
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("IDEMGUARD_LOG").unwrap_or_else(|_| EnvFilter::new("warn,idemguard=info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
