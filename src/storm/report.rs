//! The summary of a run: throughput, latency percentiles, replies and errors by kind, the
//! per-layer interception table, what the metrics counted, and the invariants — as text for
//! people, JSON for machines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::client::{HttpLog, ReplyKind};
use super::interception::InterceptionTable;
use super::invariants::Check;
use super::metered::MetricsSeen;

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(latencies_us: &[u64]) -> Latency {
        let mut v = latencies_us.to_vec();
        v.sort_unstable();
        let at = |q: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i] as f64 / 1000.0
        };
        Latency {
            p50_ms: at(0.50),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
            max_ms: v.last().map_or(0.0, |m| *m as f64 / 1000.0),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpSummary {
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_second: f64,
    pub latency: Latency,
    pub replies: BTreeMap<ReplyKind, u64>,
    /// Replies that are errors (transport, 5xx, unexpected 4xx), by kind.
    pub errors: BTreeMap<ReplyKind, u64>,
    pub error_samples: Vec<String>,
}

impl HttpSummary {
    pub fn of(log: &HttpLog, seconds: f64) -> HttpSummary {
        let requests = log.latencies_us.len() as u64;
        HttpSummary {
            requests,
            seconds,
            requests_per_second: if seconds > 0.0 {
                requests as f64 / seconds
            } else {
                0.0
            },
            latency: Latency::of(&log.latencies_us),
            replies: log.by_kind.clone(),
            errors: log
                .by_kind
                .iter()
                .filter(|(k, _)| k.is_error())
                .map(|(k, v)| (*k, *v))
                .collect(),
            error_samples: log.error_samples.clone(),
        }
    }
}

/// The whole result of `idemguard storm` (`--json` prints this).
#[derive(Debug, Clone, Serialize)]
pub struct StormReport {
    pub scenario: String,
    pub run_id: String,
    pub database: String,
    /// The fault-injection switches were off (API record, fast path, request lock).
    pub broken: bool,
    /// Size asked for (requests, keys, orders or users, per scenario).
    pub size: usize,
    pub http: HttpSummary,
    pub interception: InterceptionTable,
    /// What `idemguard_decisions_total` counted during the run, beside the database's counts.
    pub metrics: MetricsSeen,
    pub invariants: Vec<Check>,
    /// What the scenario did, in a few lines.
    pub notes: Vec<String>,
    /// Trace events dropped by the storm's own producers (the service's are logged).
    pub trace_dropped: u64,
    /// The in-process consumers' own counters.
    pub consumer: super::rig::ConsumerCounts,
    pub passed: bool,
}

impl StormReport {
    pub fn violations(&self) -> impl Iterator<Item = &Check> {
        self.invariants.iter().filter(|c| !c.passed)
    }

    /// The report as printed, section by section in print order.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "storm {} — run {} on {}{}",
            self.scenario,
            self.run_id,
            self.database,
            if self.broken {
                " — BROKEN CONFIGURATION (API record, fast path, request lock off)"
            } else {
                ""
            }
        );
        for n in &self.notes {
            let _ = writeln!(s, "  {n}");
        }
        render_http(&mut s, &self.http);
        self.render_interception(&mut s);
        render_metrics(&mut s, &self.metrics);
        let _ = writeln!(s, "\ninvariants (read from the database)");
        render_invariants(&mut s, &self.invariants);
        let _ = writeln!(
            s,
            "\n{}",
            if self.passed {
                "PASSED: nothing was processed twice"
            } else {
                "FAILED: an invariant does not hold (offending IDs above)"
            }
        );
        s
    }

    /// The duplicates each layer stopped (from the run's trace), the consumer's counts and
    /// what did not add up.
    fn render_interception(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\nduplicates stopped, per layer (from {} trace events of this run)",
            self.interception.events_read
        );
        let _ = writeln!(
            s,
            "  {:<8} {:<28} {:>9} {:>12}",
            "layer", "decision", "stopped", "counted by"
        );
        for r in &self.interception.rows {
            let seen = r.http_seen.map_or("-".to_string(), |v| v.to_string());
            let _ = writeln!(
                s,
                "  {:<8} {:<28} {:>9} {:>12}",
                r.layer.as_str(),
                r.outcome.as_str(),
                r.stopped,
                seen
            );
        }
        let c = &self.consumer;
        let _ = writeln!(s, "  consumer: {} received, {} applied, {} dedup hits, {} sink duplicates, {} to the DLQ, {} batches retried after a database error", c.received, c.applied, c.dedup_hits, c.sink_duplicates, c.dlq, c.db_retries);
        let per_layer: Vec<String> = self
            .interception
            .by_layer
            .iter()
            .map(|(l, n)| format!("{} {n}", l.as_str()))
            .collect();
        let _ = writeln!(s, "  total by layer: {}", per_layer.join(", "));
        for m in &self.interception.mismatches {
            let _ = writeln!(s, "  note: {m}");
        }
        if self.trace_dropped > 0 {
            let _ = writeln!(
                s,
                "  note: {} trace events dropped by the storm's producers",
                self.trace_dropped
            );
        }
    }
}

/// The HTTP side: requests, latency, replies and errors (with samples).
fn render_http(s: &mut String, h: &HttpSummary) {
    let _ = writeln!(
        s,
        "\nrequests  {} in {:.2}s = {:.0} req/s",
        h.requests, h.seconds, h.requests_per_second
    );
    let l = &h.latency;
    let _ = writeln!(
        s,
        "latency   p50 {:.1} ms  p95 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms
    );
    let replies: Vec<String> = h
        .replies
        .iter()
        .map(|(k, v)| {
            format!(
                "{} {v}",
                serde_json::to_value(k)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            )
        })
        .collect();
    let _ = writeln!(s, "replies   {}", replies.join(", "));
    if h.errors.is_empty() {
        let _ = writeln!(s, "errors    none");
    } else {
        let errs: Vec<String> = h.errors.iter().map(|(k, v)| format!("{k:?} {v}")).collect();
        let _ = writeln!(s, "errors    {}", errs.join(", "));
        for e in &h.error_samples {
            let _ = writeln!(s, "          {e}");
        }
    }
}

/// Each invariant and its first offenders.
fn render_invariants(s: &mut String, invariants: &[Check]) {
    for c in invariants {
        let _ = writeln!(
            s,
            "  {} {:<40} {}",
            if c.passed { "ok  " } else { "FAIL" },
            c.name,
            c.rule
        );
        for o in c.offenders.iter().take(20) {
            let _ = writeln!(s, "         {o}");
        }
        if c.offenders.len() > 20 {
            let _ = writeln!(
                s,
                "         … and {} more (--json lists all)",
                c.offenders.len() - 20
            );
        }
    }
}

/// The metrics section: each decision counter that moved, and the database's count beside the
/// ones it can count (a disagreement fails `metrics_agree_with_database` below).
fn render_metrics(s: &mut String, m: &MetricsSeen) {
    let _ = writeln!(
        s,
        "\nmetrics during the run (idemguard_decisions_total, the run's own registry)"
    );
    let _ = writeln!(
        s,
        "  {:<8} {:<28} {:>9} {:>9}",
        "layer", "outcome", "counted", "database"
    );
    for d in &m.deltas {
        let db = d.database.map_or("-".to_string(), |v| v.to_string());
        let _ = writeln!(
            s,
            "  {:<8} {:<28} {:>9} {:>9}",
            d.layer, d.outcome, d.counted, db
        );
    }
    if let Some(why) = &m.not_compared {
        let _ = writeln!(s, "  not compared with the database: {why}");
    }
}
