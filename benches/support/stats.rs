//! Medians and percentiles of a bench's samples, one definition for every bench (each uses a
//! part of it).
#![allow(dead_code)]

/// The `p` quantile (0.0–1.0) of `v` by nearest rank; 0 when there are no samples.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut sorted = v.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The median of `v` (the upper one of an even count, as every bench has always reported).
pub fn median(v: &[f64]) -> f64 {
    percentile(v, 0.5)
}

/// A bench's size or round count from the environment (`IDEMGUARD_BENCH_*`), `_` allowed as a
/// digit separator (`20_000_000`); `default` when unset or not a number.
pub fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}
