//! The `idemguard` command line. Each subcommand is a thin shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use idemguard::config::{Config, ConfigSource};
use idemguard::db::{migrate, Database};
use idemguard::contracts::Instance;
use idemguard::doctor;
use idemguard::stream::{ConsumeOptions, PaymentConsumer};
use idemguard::trace::Tracer;
use tokio_util::sync::CancellationToken;

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
    /// Consume payment events (a consumer-group member on kafka.payment_topic) until Ctrl-C
    Consume {
        /// Fault injection: abort right after the database commit of batch N, before the
        /// offset commit (what the sinks' unique keys exist for)
        #[arg(long, value_name = "N", hide = true)]
        crash_after_db_commit: Option<u64>,
        /// Consumer group (default: kafka.consumer_group)
        #[arg(long)]
        group: Option<String>,
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
        Command::Consume { crash_after_db_commit, group } => {
            let instance = Instance::current();
            let db = Database::connect(&config).await?;
            let tracer = Tracer::from_config(&config, &instance)?;
            let options = ConsumeOptions { crash_after_db_commit, group };
            let consumer = PaymentConsumer::new(&config, db, tracer.clone(), options)?;
            let shutdown = CancellationToken::new();
            let on_signal = shutdown.clone();
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                eprintln!("idemguard consume: stopping after the current batch");
                on_signal.cancel();
            });
            consumer.run(shutdown).await?;
            tracer.flush(std::time::Duration::from_secs(5));
            Ok(ExitCode::SUCCESS)
        }
        Command::Config => {
            print!("{}", config.to_redacted_toml());
            Ok(ExitCode::SUCCESS)
        }
    }
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
