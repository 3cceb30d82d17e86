//! The trace pipeline: every decision of every layer becomes one [`TraceEvent`], written as a
//! structured log line and sent as JSON to the trace topic (key = orderNo, else requestId).
//!
//! Emission never blocks the request path. The broker's client keeps a bounded queue
//! (`trace.buffer`); when it is full, or an event is not delivered within
//! `trace.delivery_timeout`, the event is dropped and counted in [`TraceStats`]. With Kafka
//! down the service keeps working and the drop counter says what was lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::config::Config;
use crate::contracts::{Instance, Outcome, TraceEvent};

/// Counters of the pipeline, readable at any time (doctor, console, tests).
#[derive(Debug, Default)]
pub struct TraceStats {
    emitted: AtomicU64,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

/// A point-in-time copy of [`TraceStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TraceCounts {
    pub emitted: u64,
    pub delivered: u64,
    pub dropped: u64,
}

impl TraceStats {
    pub fn snapshot(&self) -> TraceCounts {
        TraceCounts {
            emitted: self.emitted.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    fn drop_one(&self, why: &str) {
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        // Say it the first time and then every 1000th, so a dead broker is visible in the log
        // without flooding it.
        if n == 1 || n.is_multiple_of(1000) {
            tracing::warn!(
                dropped_total = n,
                reason = why,
                "trace events dropped (the trace topic is not reachable or the buffer is full)"
            );
        }
    }
}

/// Counts deliveries and failed deliveries reported by the producer's background thread.
struct DeliveryCounter {
    stats: Arc<TraceStats>,
}

impl ClientContext for DeliveryCounter {}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.stats.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => self.stats.drop_one(&e.to_string()),
        }
    }
}

/// The emitter every layer holds. Cheap to clone.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<Inner>,
    /// Where this tracer's decisions are counted when not in the process's registry.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

struct Inner {
    instance: String,
    topic: String,
    producer: Option<ThreadedProducer<DeliveryCounter>>,
    stats: Arc<TraceStats>,
}

impl Tracer {
    /// Sends to the configured trace topic (when `trace.enabled`), and logs.
    /// Creating it never contacts the broker, so it succeeds with Kafka down.
    pub fn from_config(config: &Config, instance: &Instance) -> anyhow::Result<Tracer> {
        // No trace topic (a team's system that has none): log only.
        if !config.trace.enabled || config.kafka.trace_topic.is_empty() {
            return Ok(Tracer::log_only(instance));
        }
        let stats = Arc::new(TraceStats::default());
        let producer: ThreadedProducer<DeliveryCounter> =
            crate::kafka_client::producer_config(&config.kafka)
                .set("client.id", format!("idemguard-trace-{}", instance.id))
                .set(
                    "queue.buffering.max.messages",
                    config.trace.buffer.to_string(),
                )
                .set(
                    "message.timeout.ms",
                    config.trace.delivery_timeout.as_millis().to_string(),
                )
                // Trace events never wait for the broker; a longer linger packs more of them into
                // each produce request, which is what the broker's CPU follows (BENCHMARKS.md, API).
                // An event waits at most a tenth of a second before it is sent: still at once for
                // an operator tracing an order.
                .set("linger.ms", "100")
                .set("acks", "1")
                .set("log_level", "3")
                .create_with_context(DeliveryCounter {
                    stats: stats.clone(),
                })
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot create the trace producer for {}: {e}",
                        config.kafka.bootstrap_servers
                    )
                })?;
        Ok(Tracer {
            inner: Arc::new(Inner {
                instance: instance.id.clone(),
                topic: config.kafka.trace_topic.clone(),
                producer: Some(producer),
                stats,
            }),
            metrics: None,
        })
    }

    /// Logs only: for tools and tests that have no broker.
    pub fn log_only(instance: &Instance) -> Tracer {
        Tracer {
            inner: Arc::new(Inner {
                instance: instance.id.clone(),
                topic: String::new(),
                producer: None,
                stats: Arc::new(TraceStats::default()),
            }),
            metrics: None,
        }
    }

    /// Counts this tracer's decisions in `metrics`, always, instead of the process's registry:
    /// a storm's service and consumer, which share their process with other storms.
    pub fn metered(mut self, metrics: Arc<crate::metrics::Metrics>) -> Tracer {
        self.metrics = Some(metrics);
        self
    }

    /// Where what this tracer's holder measures is counted: its own registry
    /// ([`Tracer::metered`]), else the process's while it records.
    pub fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        match &self.metrics {
            Some(m) => Some(m),
            None => crate::metrics::recording(),
        }
    }

    pub fn instance_id(&self) -> &str {
        &self.inner.instance
    }

    /// Record one decision. Returns at once whatever the broker's state.
    pub fn emit(&self, mut event: TraceEvent) {
        event.instance.clone_from(&self.inner.instance);
        log_event(&event);
        if let Some(m) = self.metrics() {
            m.decision(event.layer, event.outcome, event.latency_us);
        }
        let stats = &self.inner.stats;
        stats.emitted.fetch_add(1, Ordering::Relaxed);
        let Some(producer) = &self.inner.producer else {
            return;
        };
        let payload = match serde_json::to_vec(&event) {
            Ok(p) => p,
            Err(e) => return stats.drop_one(&e.to_string()),
        };
        let mut record: BaseRecord<'_, str, [u8]> =
            BaseRecord::to(&self.inner.topic).payload(&payload);
        if let Some(k) = event.key() {
            record = record.key(k);
        }
        // The record's Kafka timestamp is the decision's own time (not when the producer got
        // it): a trace reads the topic in windows by time (console/read/window.rs) and must
        // find each event where its `ts` says it happened.
        if let Some(ms) = humantime::parse_rfc3339_weak(&event.ts)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        {
            record = record.timestamp(ms.as_millis() as i64);
        }
        if let Err((e, _)) = producer.send(record) {
            stats.drop_one(&e.to_string());
        }
    }

    pub fn stats(&self) -> TraceCounts {
        self.inner.stats.snapshot()
    }

    /// Wait up to `timeout` for buffered events to be delivered (on shutdown).
    pub fn flush(&self, timeout: Duration) {
        if let Some(p) = &self.inner.producer {
            let _ = p.flush(timeout);
        }
    }
}

/// The structured log line of an event: every line carries orderNo, requestId and eventId.
fn log_event(e: &TraceEvent) {
    let (o, r, ev) = (
        e.order_no.as_deref().unwrap_or("-"),
        e.request_id.as_deref().unwrap_or("-"),
        e.event_id.as_deref().unwrap_or("-"),
    );
    let warn = matches!(
        e.outcome,
        Outcome::LockLost
            | Outcome::Dlq
            | Outcome::SinkDuplicate
            | Outcome::FenceRejected
            | Outcome::DuplicatePayment
            | Outcome::PayNoConflict
    );
    if warn {
        tracing::warn!(target: "idemguard::trace", layer = e.layer.as_str(), outcome = e.outcome.as_str(),
            order_no = o, request_id = r, event_id = ev, latency_us = e.latency_us, detail = %e.detail, "decision");
    } else {
        tracing::info!(target: "idemguard::trace", layer = e.layer.as_str(), outcome = e.outcome.as_str(),
            order_no = o, request_id = r, event_id = ev, latency_us = e.latency_us, detail = %e.detail, "decision");
    }
}
