//! `GET /metrics` on its own address, apart from the API: a scrape never competes with orders
//! for the API's connection limit, and the address can be firewalled to the monitoring network.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::db::Database;
use crate::lock::LockInspector;

/// The content type of prometheus-client's encoder, for a scraper that asks for it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The Prometheus text format, for every other reader (`promtool check metrics`, curl).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

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
    config: &Config,
    db: &Database,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Exposition>> {
    if config.metrics.listen.is_empty() {
        return Ok(None);
    }
    let inspector = LockInspector::from_config(config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut exposition = start(config, stop.clone()).await?;
    let gauges = super::gauges::spawn(db.clone(), inspector, config.metrics.clone(), stop.clone());
    exposition.tasks.push(gauges);
    Ok(Some(exposition))
}

/// `consume`'s exposition when `metrics.listen` is set, with the group's lag on `topic`.
pub async fn start_consume(
    config: &Config,
    group: &str,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Exposition>> {
    if config.metrics.listen.is_empty() {
        return Ok(None);
    }
    let mut exposition = start(config, stop.clone()).await?;
    let lag = super::gauges::spawn_lag(
        config.kafka.clone(),
        group.to_string(),
        config.kafka.payment_topic.clone(),
        config.metrics.refresh_interval,
        stop.clone(),
    );
    exposition.tasks.push(lag);
    Ok(Some(exposition))
}

/// Connections the `/metrics` listener serves at once; the rest wait in the listen backlog. A
/// scraper needs one or two: a cap of its own keeps idle or half-sent connections to the scrape
/// port from taking the file descriptors the order API needs (20,000 of them once did, and
/// `POST /orders` and `/healthz` failed with "Too many open files").
pub const MAX_CONNECTIONS: usize = 16;

/// Serves `/metrics` on `metrics.listen` until `stop`, through the API's edge: its header-read
/// and idle timeouts, and [`MAX_CONNECTIONS`].
pub async fn start(config: &Config, stop: CancellationToken) -> anyhow::Result<Exposition> {
    let listen = &config.metrics.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for /metrics on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    super::set_recording(true);
    let app = Router::new().route("/metrics", get(metrics));
    let limits = crate::config::ApiConfig {
        max_connections: MAX_CONNECTIONS,
        ..config.api.clone()
    };
    let done = tokio::spawn(async move {
        crate::api::edge::serve(listener, app, &limits, stop).await;
    });
    tracing::info!(%addr, "serving /metrics");
    Ok(Exposition {
        addr,
        tasks: vec![done],
    })
}

/// OpenMetrics when the scraper accepts it (Prometheus does), else the Prometheus text format.
async fn metrics(headers: HeaderMap) -> impl IntoResponse {
    let openmetrics = headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.contains("application/openmetrics-text"))
    });
    let text = super::global().encode();
    if openmetrics {
        ([(header::CONTENT_TYPE, OPENMETRICS)], text)
    } else {
        (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            prometheus_text(&text),
        )
    }
}

/// OpenMetrics text as the Prometheus text format: a counter's family is named with its
/// `_total` suffix there, and the `# UNIT` and `# EOF` lines do not exist.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::prometheus_text;

    #[test]
    fn a_counter_family_is_named_with_its_total_and_openmetrics_only_lines_go() {
        let openmetrics = "# HELP idemguard_x Things.\n# TYPE idemguard_x counter\n\
                           idemguard_x_total{a=\"b\"} 3\n# HELP idemguard_d Time.\n\
                           # TYPE idemguard_d_seconds histogram\n# UNIT idemguard_d_seconds seconds\n\
                           idemguard_d_seconds_count 0\n# EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP idemguard_x_total Things.\n# TYPE idemguard_x_total counter\n\
             idemguard_x_total{a=\"b\"} 3\n# HELP idemguard_d Time.\n\
             # TYPE idemguard_d_seconds histogram\nidemguard_d_seconds_count 0\n"
        );
    }
}
