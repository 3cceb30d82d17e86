//! `GET /metrics` on its own address, apart from the API: a scrape never competes with orders
//! for the API's connection limit, and the address can be firewalled to the monitoring network.

use std::net::SocketAddr;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::config::MetricsConfig;
use crate::db::Database;

/// The content type of prometheus-client's encoder (OpenMetrics text).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running exposition: its address and the tasks that end when `stop` is cancelled.
pub struct Exposition {
    pub addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Exposition {
    /// Waits for the listener (and `serve`'s gauges) to stop, once `stop` was cancelled.
    pub async fn stop(self) {
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// `serve`'s exposition when `metrics.listen` is set, with the query-backed gauges.
pub async fn start_serve(
    config: &MetricsConfig,
    db: &Database,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Exposition>> {
    if config.listen.is_empty() {
        return Ok(None);
    }
    let mut exposition = start(&config.listen, stop.clone()).await?;
    let gauges = super::gauges::spawn(db.clone(), config.clone(), stop.clone());
    exposition.tasks.push(gauges);
    Ok(Some(exposition))
}

/// `consume`'s exposition when `metrics.listen` is set (its metrics are counted as it works).
pub async fn start_consume(
    config: &MetricsConfig,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Exposition>> {
    if config.listen.is_empty() {
        return Ok(None);
    }
    Ok(Some(start(&config.listen, stop.clone()).await?))
}

/// Serves `/metrics` on `listen` until `stop`.
pub async fn start(listen: &str, stop: CancellationToken) -> anyhow::Result<Exposition> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for /metrics on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    let app = Router::new().route("/metrics", get(metrics));
    let done = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the /metrics listener stopped");
        }
    });
    tracing::info!(%addr, "metrics on http://{addr}/metrics");
    Ok(Exposition {
        addr,
        tasks: vec![done],
    })
}

async fn metrics() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        super::global().encode(),
    )
}
