//! Which layer stopped each duplicate: the run's trace events, read back from the run's own
//! trace topic, counted per layer and outcome, and cross-checked with the HTTP statuses the
//! storm's client saw.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::Serialize;

use super::client::ReplyKind;
use crate::contracts::{Layer, Outcome, TraceEvent};

/// One row of the interception table.
#[derive(Debug, Clone, Serialize)]
pub struct Interception {
    pub layer: Layer,
    pub outcome: Outcome,
    /// Trace events of this decision in the run.
    pub stopped: u64,
    /// The same decision as the storm's HTTP client (api rows) or the in-process consumers'
    /// own counters (stream rows) counted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_seen: Option<u64>,
}

/// The table, with every decision counted (not only the stops).
#[derive(Debug, Clone, Serialize, Default)]
pub struct InterceptionTable {
    pub rows: Vec<Interception>,
    /// Duplicates stopped per layer.
    pub by_layer: BTreeMap<Layer, u64>,
    /// Every trace event of the run per "layer/outcome".
    pub all_decisions: BTreeMap<String, u64>,
    pub events_read: u64,
    /// Rows where the trace and the client disagree (dropped trace events, or a bug).
    pub mismatches: Vec<String>,
}

impl InterceptionTable {
    /// `http`: replies the storm's client saw; `consumed`: the in-process consumers' own
    /// counters (dedup hits, sink duplicates) — each cross-checks the trace where it can.
    pub fn build(
        events: &[TraceEvent],
        http: &BTreeMap<ReplyKind, u64>,
        consumed: &super::rig::ConsumerCounts,
    ) -> InterceptionTable {
        let mut counts: BTreeMap<(Layer, Outcome), u64> = BTreeMap::new();
        let mut all = BTreeMap::new();
        for e in events {
            *counts.entry((e.layer, e.outcome)).or_insert(0) += 1;
            *all.entry(format!("{}/{}", e.layer.as_str(), e.outcome.as_str()))
                .or_insert(0) += 1;
        }
        // Every duplicate-stopping decision, in the order of the request path.
        let stops = [
            (
                Layer::Api,
                Outcome::Replayed,
                Some(http.get(&ReplyKind::Replayed).copied().unwrap_or(0)),
            ),
            (
                Layer::Api,
                Outcome::InFlightRejected,
                Some(http.get(&ReplyKind::InFlight).copied().unwrap_or(0)),
            ),
            (
                Layer::Api,
                Outcome::PayloadMismatch,
                Some(http.get(&ReplyKind::KeyReused).copied().unwrap_or(0)),
            ),
            (Layer::Api, Outcome::AnsweredFromOrders, None),
            (Layer::Lock, Outcome::LockContended, None),
            (Layer::Db, Outcome::UniqueViolationReplayed, None),
            (Layer::Db, Outcome::TransitionAlreadyApplied, None),
            (Layer::Db, Outcome::FenceRejected, None),
            (Layer::Stream, Outcome::DedupHit, Some(consumed.dedup_hits)),
            (
                Layer::Stream,
                Outcome::SinkDuplicate,
                Some(consumed.sink_duplicates),
            ),
        ];
        let mut table = InterceptionTable {
            all_decisions: all,
            events_read: events.len() as u64,
            ..Default::default()
        };
        for (layer, outcome, seen) in stops {
            debug_assert!(outcome.stops_duplicate());
            let stopped = counts.get(&(layer, outcome)).copied().unwrap_or(0);
            let http_seen = seen;
            if let Some(h) = http_seen {
                if h != stopped {
                    table.mismatches.push(format!(
                        "{}/{}: {stopped} in the trace, {h} counted by the client / consumer",
                        layer.as_str(),
                        outcome.as_str()
                    ));
                }
            }
            *table.by_layer.entry(layer).or_insert(0) += stopped;
            table.rows.push(Interception {
                layer,
                outcome,
                stopped,
                http_seen,
            });
        }
        table
    }

    /// The layer that stopped the most duplicates (None when nothing was stopped).
    pub fn main_stopper(&self) -> Option<Layer> {
        self.by_layer
            .iter()
            .filter(|(_, n)| **n > 0)
            .max_by_key(|(_, n)| **n)
            .map(|(l, _)| *l)
    }

    pub fn stopped(&self, layer: Layer, outcome: Outcome) -> u64 {
        self.rows
            .iter()
            .find(|r| r.layer == layer && r.outcome == outcome)
            .map_or(0, |r| r.stopped)
    }
}

/// Reads every event on `topic` from the beginning up to the high watermarks, then until the
/// topic is quiet (bounded by `within`). Blocking: call from `spawn_blocking`.
pub fn read_trace(
    kafka: &crate::config::KafkaConfig,
    topic: &str,
    within: Duration,
) -> anyhow::Result<Vec<TraceEvent>> {
    let bootstrap_servers = &kafka.bootstrap_servers;
    let consumer: BaseConsumer = crate::kafka_client::client_config(kafka)
        .set(
            "group.id",
            format!("idemguard-storm-reader-{}", uuid::Uuid::now_v7()),
        )
        .set("enable.auto.commit", "false")
        .set("log_level", "3")
        .create()
        .map_err(|e| anyhow::anyhow!("kafka {bootstrap_servers}: {e}"))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| anyhow::anyhow!("kafka {bootstrap_servers}: metadata of {topic}: {e} (is the broker running? scripts/stack status)"))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut tpl = TopicPartitionList::new();
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    for p in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        if high > low {
            remaining.insert(p, high);
            tpl.add_partition_offset(topic, p, Offset::Offset(low))?;
        }
    }
    let mut events = Vec::new();
    if remaining.is_empty() {
        return Ok(events);
    }
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + within;
    // The broker's high watermark can lag behind acknowledged writes (seen with tansu), so after
    // reaching it keep reading until the topic has been quiet for QUIET.
    const QUIET: Duration = Duration::from_millis(1500);
    let mut last_message = Instant::now();
    while !remaining.is_empty() || last_message.elapsed() < QUIET {
        if Instant::now() > deadline {
            anyhow::bail!("the trace topic {topic} was not read to its end within {within:?} ({} events so far)", events.len());
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                last_message = Instant::now();
                if let Some(Ok(e)) = m.payload().map(serde_json::from_slice::<TraceEvent>) {
                    events.push(e);
                }
                if let Some(high) = remaining.get(&m.partition()) {
                    if m.offset() + 1 >= *high {
                        remaining.remove(&m.partition());
                    }
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "trace read error; retrying"),
            None => {}
        }
    }
    Ok(events)
}
