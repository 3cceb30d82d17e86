//! The time axis of the report's swimlanes: broken, so five clicks 15 ms apart and a consumer
//! 40 s behind them are both readable on one line. A linear axis would give the burst a few
//! pixels; a log scale would squeeze everything late together. Instead every gap longer than
//! [`CUT_MS`] between two consecutive times is cut — at most [`MAX_CUTS`], the longest first —
//! and drawn as a narrow break of fixed width that names the time it cut; each piece after a
//! break is labelled with its time since the first. The pieces share one linear scale, so
//! distances inside any piece compare with each other.

use crate::console::format::age;

/// A gap between two consecutive times longer than this is cut.
pub const CUT_MS: i64 = 50;
/// At most this many cuts (the longest gaps); shorter gaps stay on the scale.
pub const MAX_CUTS: usize = 16;
/// The width a break takes, whatever time it cut.
pub const BREAK_PX: f64 = 22.0;
/// Room on each side of a piece, so a mark at its edge stays clear of the break.
const PAD_PX: f64 = 7.0;
/// The scale never spreads more than this (two events 1 ms apart stay 1 ms apart, not 900 px).
const MAX_PX_PER_MS: f64 = 24.0;
/// Interior ticks at least this far apart.
const TICK_SPACING_PX: f64 = 80.0;

/// A stretch of time drawn linearly: `t0..=t1` at `x0..=x1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub t0: i64,
    pub t1: i64,
    pub x0: f64,
    pub x1: f64,
}

/// A cut gap: drawn from `x0` to `x1`, `gap_ms` of time left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Break {
    pub x0: f64,
    pub x1: f64,
    pub gap_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub x: f64,
    pub label: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub pieces: Vec<Piece>,
    /// Pixels per millisecond inside every piece.
    pub px_per_ms: f64,
    /// The first time (the origin of every `+` label).
    pub origin_ms: i64,
}

impl Axis {
    /// The axis of `times` (any order, repeats allowed) drawn between `left` and `right`.
    pub fn new(times: &[i64], left: f64, right: f64) -> Axis {
        let mut times: Vec<i64> = times.to_vec();
        times.sort_unstable();
        times.dedup();
        if times.is_empty() {
            times.push(0);
        }
        let spans = pieces_of(&times);
        let total: i64 = spans.iter().map(|(a, b)| b - a).sum();
        let n = spans.len() as f64;
        let room = (right - left) - (n - 1.0) * BREAK_PX - n * 2.0 * PAD_PX;
        let px_per_ms = if total > 0 {
            (room.max(0.0) / total as f64).min(MAX_PX_PER_MS)
        } else {
            0.0
        };
        let mut x = left + PAD_PX;
        let mut pieces = Vec::with_capacity(spans.len());
        for (t0, t1) in spans {
            let x1 = x + (t1 - t0) as f64 * px_per_ms;
            pieces.push(Piece { t0, t1, x0: x, x1 });
            x = x1 + 2.0 * PAD_PX + BREAK_PX;
        }
        Axis {
            origin_ms: times[0],
            pieces,
            px_per_ms,
        }
    }

    /// Where `t` is drawn: on its piece's scale, or inside the break that cut it (a bar that
    /// spans a cut crosses the break); clamped to the ends.
    pub fn x(&self, t: i64) -> f64 {
        let first = &self.pieces[0];
        if t <= first.t0 {
            return first.x0;
        }
        for (i, p) in self.pieces.iter().enumerate() {
            if t <= p.t1 {
                return p.x0 + (t - p.t0) as f64 * self.px_per_ms;
            }
            if let Some(next) = self.pieces.get(i + 1) {
                if t < next.t0 {
                    let share = (t - p.t1) as f64 / (next.t0 - p.t1) as f64;
                    return p.x1 + share * (next.x0 - p.x1);
                }
            }
        }
        self.right()
    }

    /// The last x a time is drawn at.
    pub fn right(&self) -> f64 {
        self.pieces.last().map_or(0.0, |p| p.x1)
    }

    pub fn breaks(&self) -> Vec<Break> {
        self.pieces
            .windows(2)
            .map(|w| Break {
                x0: w[0].x1 + PAD_PX,
                x1: w[1].x0 - PAD_PX,
                gap_ms: w[1].t0 - w[0].t1,
            })
            .collect()
    }

    /// A tick at the start of every piece (its time since the origin) and, inside a piece, at
    /// round steps at least [`TICK_SPACING_PX`] apart.
    pub fn ticks(&self) -> Vec<Tick> {
        let mut ticks = Vec::new();
        let step = tick_step(self.px_per_ms);
        for p in &self.pieces {
            ticks.push(Tick {
                x: p.x0,
                label: offset_label(p.t0 - self.origin_ms),
            });
            let Some(step) = step else { continue };
            let from = p.t0 - self.origin_ms;
            let mut at = (from / step + 1) * step;
            while at <= p.t1 - self.origin_ms {
                let x = p.x0 + (at - from) as f64 * self.px_per_ms;
                if x - p.x0 >= TICK_SPACING_PX * 0.75 {
                    ticks.push(Tick {
                        x,
                        label: offset_label(at),
                    });
                }
                at += step;
            }
        }
        ticks
    }

    /// What the axis says of itself, under it.
    pub fn caption(&self) -> String {
        let scale = if self.px_per_ms > 0.0 {
            format!(" · 1 px = {}", per_px(1.0 / self.px_per_ms))
        } else {
            String::new()
        };
        format!(
            "time since {} UTC · broken axis: gaps over {CUT_MS} ms are cut (grey bands; hover one for the time cut){scale}",
            crate::console::format::clock(self.origin_ms)
        )
    }
}

/// The sorted distinct times split at the longest gaps over [`CUT_MS`] (at most [`MAX_CUTS`]):
/// each piece's first and last time.
fn pieces_of(times: &[i64]) -> Vec<(i64, i64)> {
    let mut gaps: Vec<(i64, usize)> = times
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1] - w[0], i))
        .filter(|(g, _)| *g > CUT_MS)
        .collect();
    gaps.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    gaps.truncate(MAX_CUTS);
    let mut cuts: Vec<usize> = gaps.into_iter().map(|(_, i)| i).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for i in cuts {
        pieces.push((times[start], times[i]));
        start = i + 1;
    }
    pieces.push((times[start], times[times.len() - 1]));
    pieces
}

/// The round step (1, 2 or 5 × 10ⁿ ms) whose ticks are at least [`TICK_SPACING_PX`] apart.
fn tick_step(px_per_ms: f64) -> Option<i64> {
    if px_per_ms <= 0.0 {
        return None;
    }
    let mut decade = 1i64;
    loop {
        for m in [1, 2, 5] {
            let step = m * decade;
            if step as f64 * px_per_ms >= TICK_SPACING_PX {
                return Some(step);
            }
        }
        decade = decade.checked_mul(10)?;
    }
}

/// `+0 ms`, `+12 ms`, `+1.25 s`, `+40.1 s`, `+4m12s`.
fn offset_label(ms: i64) -> String {
    match ms {
        i64::MIN..=999 => format!("+{ms} ms"),
        1_000..=9_999 => format!("+{:.2} s", ms as f64 / 1000.0),
        10_000..=59_999 => format!("+{:.1} s", ms as f64 / 1000.0),
        _ => format!("+{}", age(ms)),
    }
}

/// A time per pixel: `0.04 ms`, `2.5 ms`, `1.2 s`.
fn per_px(ms: f64) -> String {
    if ms < 1_000.0 {
        format!("{} ms", round2(ms))
    } else {
        format!("{} s", round2(ms / 1000.0))
    }
}

fn round2(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The length of a cut gap, as its break says it.
pub fn gap_label(ms: i64) -> String {
    age(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's shape: five clicks within 15 ms, the order written, the consumer 40 s later.
    fn burst_and_delay() -> Vec<i64> {
        let t0 = 1_796_068_527_912;
        [0, 1, 3, 4, 15, 21, 40_000, 40_004, 40_009]
            .iter()
            .map(|d| t0 + d)
            .collect()
    }

    #[test]
    fn a_15_ms_burst_and_a_40_s_delay_are_both_readable() {
        let times = burst_and_delay();
        let axis = Axis::new(&times, 140.0, 960.0);
        let xs: Vec<f64> = times.iter().map(|t| axis.x(*t)).collect();
        for w in xs.windows(2) {
            assert!(w[1] > w[0], "time runs left to right: {xs:?}");
        }
        // The clicks 1 ms apart are at least 10 px apart: five distinct marks.
        assert!(xs[1] - xs[0] >= 10.0, "{xs:?}");
        // The 40 s gap is one break, labelled with what it cut; everything fits.
        let breaks = axis.breaks();
        assert_eq!(breaks.len(), 1, "{breaks:?}");
        assert_eq!(breaks[0].gap_ms, 40_000 - 21);
        assert_eq!(gap_label(breaks[0].gap_ms), "39.9s");
        assert!(xs[0] >= 140.0 && xs[8] <= 960.0, "{xs:?}");
        assert!(axis.caption().contains("broken axis"));
    }

    #[test]
    fn close_times_stay_on_one_linear_piece() {
        let axis = Axis::new(&[0, 10, 20, 30], 0.0, 1000.0);
        assert_eq!(axis.pieces.len(), 1);
        assert!(axis.breaks().is_empty());
        let (a, b, c) = (axis.x(0), axis.x(10), axis.x(20));
        assert!(((b - a) - (c - b)).abs() < 1e-9, "linear inside a piece");
    }

    #[test]
    fn only_the_longest_gaps_are_cut_and_a_time_in_a_cut_lies_inside_its_break() {
        let times: Vec<i64> = (0..20).map(|i| i * 1_000 + i * i).collect();
        let axis = Axis::new(&times, 0.0, 1600.0);
        assert_eq!(axis.breaks().len(), MAX_CUTS);
        let b = &axis.pieces[0];
        let next = &axis.pieces[1];
        let inside = axis.x((b.t1 + next.t0) / 2);
        assert!(inside > b.x1 && inside < next.x0);
        assert_eq!(axis.x(i64::MIN), axis.pieces[0].x0);
        assert_eq!(axis.x(i64::MAX), axis.right());
    }

    #[test]
    fn ticks_name_each_piece_by_its_time_since_the_start() {
        let axis = Axis::new(&burst_and_delay(), 140.0, 960.0);
        let labels: Vec<String> = axis.ticks().into_iter().map(|t| t.label).collect();
        assert_eq!(labels.first().map(String::as_str), Some("+0 ms"));
        assert!(labels.iter().any(|l| l == "+40.0 s"), "{labels:?}");
        assert!(
            labels.iter().any(|l| l == "+10 ms" || l == "+5 ms"),
            "{labels:?}"
        );
    }
}
