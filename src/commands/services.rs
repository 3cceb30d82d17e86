//! The two long-running services (`serve`, the order service; `consume`, the payment
//! consumer): each started from the configuration, run until Ctrl-C, then stopped in order.

use std::process::ExitCode;

use idemguard::config::Config;
use idemguard::contracts::Instance;
use idemguard::db::Database;
use idemguard::stream::{ConsumeOptions, PaymentConsumer};
use idemguard::trace::Tracer;
use tokio_util::sync::CancellationToken;

use super::stdout;

/// `idemguard consume`: the payment consumer until Ctrl-C.
pub(crate) async fn consume(
    config: Config,
    crash_after_db_commit: Option<u64>,
    group: Option<String>,
) -> anyhow::Result<ExitCode> {
    // FAULT INJECTION: never in production.
    if crash_after_db_commit.is_some() && config.environment.production {
        anyhow::bail!("--crash-after-db-commit is fault injection and may not be used when environment.production = true");
    }
    // On stderr: stdout's first line is where the service listens, for scripts.
    eprintln!(
        "idemguard consume: connections: {}",
        idemguard::tls::secured_summary(&config)
    );
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
        stdout::line(format_args!(
            "idemguard consume: metrics on http://{}/metrics",
            m.addr
        ))?;
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
pub(crate) async fn serve(
    config: Config,
    listen: Option<String>,
    faults: idemguard::api::server::Faults,
) -> anyhow::Result<ExitCode> {
    let listen = listen.unwrap_or_else(|| config.api.listen.clone());
    // On stderr: stdout's first line is where the service listens, for scripts.
    eprintln!(
        "idemguard serve: connections: {}",
        idemguard::tls::secured_summary(&config)
    );
    let server = idemguard::api::server::start_with(config, &listen, faults).await?;
    stdout::line(format_args!(
        "idemguard serve: listening on http://{}",
        server.addr
    ))?;
    if let Some(m) = server.metrics_addr {
        stdout::line(format_args!(
            "idemguard serve: metrics on http://{m}/metrics"
        ))?;
    }
    let _ = tokio::signal::ctrl_c().await;
    eprintln!("idemguard serve: finishing requests in flight");
    server.shutdown.cancel();
    server.done.await??;
    Ok(ExitCode::SUCCESS)
}
