//! What `serve` and `consume` tell Prometheus: one registry per process, exposed on its own
//! address (`metrics.listen`, `--metrics-listen`) by [`exposition`]. A storm runs its service
//! and consumer in the test's process beside other storms, so its rig gives them a registry of
//! their own ([`crate::trace::Tracer::metered`]) and reads that one back.
//!
//! Every decision of every layer is counted where it is traced ([`crate::trace::Tracer::emit`]),
//! by layer and outcome with the trace events' own names, so a metric and a trace line never
//! disagree and no layer counts twice. What a trace event does not carry is measured where it
//! happens: the API's requests (route and outcome, [`api_request`]), a lock's held time, the
//! consumer's batches, offset commits and DLQ publishes. Gauges that need a query are refreshed
//! by `serve` on an interval ([`gauges`]).
//!
//! Labels are bounded sets only (layer, outcome, route, table): never an orderNo, requestId,
//! eventId, payNo or user, whose values would make one series per request.
//!
//! The crate is the Prometheus project's own `prometheus-client`: typed metric families with
//! its OpenMetrics encoder, no global default registry and no macros.

pub mod exposition;
pub mod gauges;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::contracts::{Layer, Outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub layer: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    pub table: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlagLabels {
    pub flag: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefreshLabels {
    pub gauges: &'static str,
}

type Seconds = Gauge<f64, AtomicU64>;

/// The outcomes of each layer, created at zero when the process starts: a rate over a series
/// that does not exist yet is no data, not 0, and an alert on it could never be tested.
pub const OUTCOMES: &[(Layer, &[Outcome])] = &[
    (
        Layer::Api,
        &[
            Outcome::Claimed,
            Outcome::Replayed,
            Outcome::InFlightRejected,
            Outcome::PayloadMismatch,
            Outcome::KeyRejected,
            Outcome::Reclaimed,
            Outcome::AnsweredFromOrders,
            Outcome::Finalized,
        ],
    ),
    (
        Layer::Lock,
        &[
            Outcome::LockAcquired,
            Outcome::LockContended,
            Outcome::LockRenewed,
            Outcome::LockLost,
            Outcome::LockReleased,
            Outcome::LockReleaseRefused,
        ],
    ),
    (
        Layer::Db,
        &[
            Outcome::OrderCreated,
            Outcome::UniqueViolationReplayed,
            Outcome::StockRejected,
            Outcome::TransitionApplied,
            Outcome::TransitionAlreadyApplied,
            Outcome::TransitionRejected,
            Outcome::FenceRejected,
            Outcome::PaymentRecorded,
            Outcome::DuplicatePayment,
            Outcome::PayNoConflict,
            Outcome::EventPublished,
        ],
    ),
    (
        Layer::Stream,
        &[
            Outcome::DedupHit,
            Outcome::SinkApplied,
            Outcome::SinkDuplicate,
            Outcome::Dlq,
        ],
    ),
];

/// The API's routes and outcomes ([`crate::api::metered`]), created at zero likewise.
pub const API_ROUTES: [&str; 5] = [
    "create_order",
    "payment_callback",
    "get_order",
    "healthz",
    "other",
];
pub const API_OUTCOMES: [&str; 10] = [
    "created",
    "ok",
    "replayed",
    "in_flight_rejected",
    "key_reused",
    "business_refusal",
    "not_found",
    "bad_input",
    "abandoned",
    "error",
];

/// Every metric of the process. Cheap to update from any thread (atomics).
pub struct Metrics {
    registry: Registry,
    pub decisions: Family<DecisionLabels, Counter>,
    pub api_requests: Family<RequestLabels, Counter>,
    pub api_request_seconds: Family<RouteLabels, Histogram>,
    pub lock_acquire_seconds: Family<OutcomeLabels, Histogram>,
    pub lock_held_seconds: Histogram,
    pub consumer_batch_messages: Histogram,
    pub consumer_batch_seconds: Histogram,
    pub consumer_commit_failures: Counter,
    pub dlq_publish_failures: Counter,
    pub processing_records: Gauge,
    pub processing_oldest_seconds: Seconds,
    pub outbox_pending_rows: Gauge,
    pub outbox_oldest_seconds: Seconds,
    pub leaks: Family<TableLabels, Gauge>,
    pub consumer_lag: Family<PartitionLabels, Gauge>,
    pub locks_flagged: Family<FlagLabels, Gauge>,
    pub refresh_seconds: Family<RefreshLabels, Histogram>,
    pub gauge_refresh_failures: Counter,
}

/// 0.5 ms … ~16 s: a replay answered from Redis up to a request that waited on a locked row.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    /// A registry with every series at zero: the process's one ([`global`]), or a storm's own.
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::with_prefix("idemguard"),
            decisions: Family::default(),
            api_requests: Family::default(),
            api_request_seconds: Family::new_with_constructor(latency_buckets),
            lock_acquire_seconds: Family::new_with_constructor(latency_buckets),
            lock_held_seconds: latency_buckets(),
            consumer_batch_messages: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            consumer_batch_seconds: latency_buckets(),
            consumer_commit_failures: Counter::default(),
            dlq_publish_failures: Counter::default(),
            processing_records: Gauge::default(),
            processing_oldest_seconds: Seconds::default(),
            outbox_pending_rows: Gauge::default(),
            outbox_oldest_seconds: Seconds::default(),
            leaks: Family::default(),
            consumer_lag: Family::default(),
            locks_flagged: Family::default(),
            refresh_seconds: Family::new_with_constructor(latency_buckets),
            gauge_refresh_failures: Counter::default(),
        };
        for (layer, outcomes) in OUTCOMES {
            for outcome in *outcomes {
                let labels = DecisionLabels {
                    layer: layer.as_str(),
                    outcome: outcome.as_str(),
                };
                let _ = m.decisions.get_or_create(&labels);
            }
        }
        for route in API_ROUTES {
            for outcome in API_OUTCOMES {
                let _ = m
                    .api_requests
                    .get_or_create(&RequestLabels { route, outcome });
            }
        }
        m.register()
    }

    fn register(mut self) -> Metrics {
        let r = &mut self.registry;
        r.register("decisions", "Decisions of every layer by layer and outcome, named as the trace events' (lock_contended, fence_rejected, dedup_hit, dlq, ...)", self.decisions.clone());
        r.register("api_requests", "Requests answered by the API, by route and outcome (created, replayed, in_flight_rejected, key_reused, bad_input, business_refusal, abandoned, not_found, ok)", self.api_requests.clone());
        r.register_with_unit(
            "api_request_duration",
            "Time to answer a request, by route",
            Unit::Seconds,
            self.api_request_seconds.clone(),
        );
        r.register_with_unit(
            "lock_acquire_duration",
            "Time to acquire a lock, by outcome (lock_acquired, lock_contended)",
            Unit::Seconds,
            self.lock_acquire_seconds.clone(),
        );
        r.register_with_unit(
            "lock_held_duration",
            "Time a lock was held, from acquisition to release",
            Unit::Seconds,
            self.lock_held_seconds.clone(),
        );
        r.register(
            "consumer_batch_messages",
            "Messages per batch applied by the consumer",
            self.consumer_batch_messages.clone(),
        );
        r.register_with_unit(
            "consumer_batch_duration",
            "Time to apply a batch, from the batch in hand to its database commit",
            Unit::Seconds,
            self.consumer_batch_seconds.clone(),
        );
        r.register("consumer_offset_commit_failures", "Offset commits the broker refused (the consumer stops; the batches since are redelivered)", self.consumer_commit_failures.clone());
        r.register(
            "dlq_publish_failures",
            "Poison messages the consumer could not publish to the DLQ (the batch is retried)",
            self.dlq_publish_failures.clone(),
        );
        r.register(
            "processing_records",
            "Idempotency records PROCESSING now",
            self.processing_records.clone(),
        );
        r.register_with_unit(
            "processing_oldest_age",
            "Age of the oldest PROCESSING idempotency record (0 when none)",
            Unit::Seconds,
            self.processing_oldest_seconds.clone(),
        );
        r.register(
            "outbox_pending_rows",
            "Outbox rows the relay has not published yet",
            self.outbox_pending_rows.clone(),
        );
        r.register_with_unit(
            "outbox_oldest_pending_age",
            "Age of the oldest unpublished outbox row (0 when none)",
            Unit::Seconds,
            self.outbox_oldest_seconds.clone(),
        );
        r.register("leaks", "Duplicates that got through: keys with two effects (two orders for one requestId, two payments for one order, ...) among the rows created in metrics.leak_window, by table", self.leaks.clone());
        r.register("consumer_lag_messages", "Messages of the payment topic not yet committed by the consumer's group, by topic and partition", self.consumer_lag.clone());
        r.register("locks_flagged", "Locks on the lock nodes with something wrong, by flag (no_ttl, dead_owner, undecodable, no_quorum, other_type), as the Locks view shows them", self.locks_flagged.clone());
        r.register_with_unit("metrics_refresh_duration", "Time to refresh the query-backed gauges, by what was refreshed (counts: PROCESSING and outbox; locks; leaks; lag): their cost", Unit::Seconds, self.refresh_seconds.clone());
        r.register(
            "metrics_refresh_failures",
            "Refreshes of the query-backed gauges that failed (the gauges keep their last value)",
            self.gauge_refresh_failures.clone(),
        );
        self
    }

    /// The exposition in the OpenMetrics text format (which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String never fails");
        out
    }

    /// One traced decision. Lock acquisitions also give their duration (the event's latency).
    pub fn decision(&self, layer: Layer, outcome: Outcome, latency_us: u64) {
        let labels = DecisionLabels {
            layer: layer.as_str(),
            outcome: outcome.as_str(),
        };
        self.decisions.get_or_create(&labels).inc();
        if matches!(outcome, Outcome::LockAcquired | Outcome::LockContended) {
            self.lock_acquire_seconds
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.as_str(),
                })
                .observe(latency_us as f64 / 1e6);
        }
    }

    /// How many times a layer decided `outcome` since this registry was created.
    pub fn decisions_of(&self, layer: Layer, outcome: Outcome) -> u64 {
        let labels = DecisionLabels {
            layer: layer.as_str(),
            outcome: outcome.as_str(),
        };
        self.decisions.get_or_create(&labels).get()
    }

    /// Payment events the consumer applied (its sinks written), counted as the trace's
    /// `sink_applied` outcome of the stream layer.
    pub fn applied(&self, n: u64) {
        let labels = DecisionLabels {
            layer: Layer::Stream.as_str(),
            outcome: Outcome::SinkApplied.as_str(),
        };
        self.decisions.get_or_create(&labels).inc_by(n);
    }

    /// One answered API request.
    pub fn api_request(&self, route: &'static str, outcome: &'static str, took: Duration) {
        self.api_requests
            .get_or_create(&RequestLabels { route, outcome })
            .inc();
        self.api_request_seconds
            .get_or_create(&RouteLabels { route })
            .observe(took.as_secs_f64());
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
static RECORDING: AtomicBool = AtomicBool::new(false);

/// The process's metrics. One per process: `serve` and `consume` are separate processes.
pub fn global() -> &'static Metrics {
    &METRICS
}

/// The metrics while they are recorded: from the start of an exposition ([`exposition::start`]),
/// so a process without `metrics.listen` pays one relaxed load per decision and nothing more.
pub fn recording() -> Option<&'static Metrics> {
    RECORDING.load(Ordering::Relaxed).then(global)
}

/// Turns recording on or off: the exposition turns it on; the API bench compares both.
pub fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::Relaxed);
}
