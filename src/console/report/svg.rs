//! The HTML report's pictures as inline SVG: one order's swimlanes ([`swimlanes`]) and the
//! interceptions per layer per minute ([`rates_chart`]). Self-contained — colours and sizes are
//! attributes, no stylesheet, font or script is needed — and every text from the data goes
//! through [`crate::untrusted::html`] ([`text`]). Each mark is a `<g class="mark">` whose
//! `<title>` is its row of the table (shown on hover) and whose `data-row` names that row.

use std::fmt::Write as _;

use super::axis::{gap_label, Axis};
use super::picture::{Lane, MarkKind, Picture};
use crate::console::read::store::RateTable;

/// The colour of what got through: used for nothing else, so a reader (and the test that
/// looks at the screenshot) finds it only where a duplicate got through.
pub const ALARM: &str = "#e00000";
const WIDTH: f64 = 1000.0;
const PLOT_LEFT: f64 = 140.0;
const PLOT_RIGHT: f64 = WIDTH - 16.0;
/// The column of rows without a time of their own.
const UNTIMED_W: f64 = 70.0;
const LANES_TOP: f64 = 46.0;
const SUB_ROW: f64 = 15.0;
const BAR_ROW: f64 = 8.0;
const MIN_LANE: f64 = 34.0;

/// A value from the data, as SVG text or attribute value.
fn text(s: &str) -> String {
    crate::untrusted::html(s)
}

/// The lane's colour: its marks, its bars, its label.
pub fn colour(lane: Lane) -> &'static str {
    match lane {
        Lane::Api => "#2563eb",
        Lane::Locks => "#7c3aed",
        Lane::Database => "#0f766e",
        Lane::StreamAndSinks => "#b45309",
        Lane::Operator => "#334155",
        Lane::Logs => "#6b7280",
    }
}

/// Where each lane is and where each of its marks and bars goes inside it.
struct Layout {
    axis: Axis,
    /// The x of the untimed column, when there are untimed rows.
    untimed_x: Option<f64>,
    /// (lane, top, height)
    lanes: Vec<(Lane, f64, f64)>,
    /// per mark: (x, y), in the picture's mark order
    marks: Vec<(f64, f64)>,
    /// per hold: (x0, x1, y)
    holds: Vec<(f64, f64, f64)>,
}

impl Layout {
    fn of(p: &Picture) -> Layout {
        let untimed = p.marks.iter().any(|m| m.at_ms.is_none());
        let right = PLOT_RIGHT - if untimed { UNTIMED_W } else { 0.0 };
        let axis = Axis::new(&p.times(), PLOT_LEFT, right);
        let untimed_x = untimed.then_some(PLOT_RIGHT - UNTIMED_W / 2.0);
        let x_of = |at: Option<i64>| at.map_or(untimed_x.unwrap_or(right), |t| axis.x(t));
        let mut marks = vec![(0.0, 0.0); p.marks.len()];
        let mut holds = vec![(0.0, 0.0, 0.0); p.holds.len()];
        let mut lanes = Vec::new();
        let mut top = LANES_TOP;
        for lane in p.lanes() {
            let mine: Vec<usize> = (0..p.marks.len())
                .filter(|i| p.marks[*i].lane == lane)
                .collect();
            let rows = stack(mine.iter().map(|i| x_of(p.marks[*i].at_ms)), 13.0);
            let sub_rows = rows.iter().copied().max().map_or(1, |r| r + 1);
            for (i, row) in mine.iter().zip(&rows) {
                let x = x_of(p.marks[*i].at_ms);
                marks[*i] = (x, top + 8.0 + SUB_ROW / 2.0 + *row as f64 * SUB_ROW);
            }
            let bars: Vec<usize> = (0..p.holds.len())
                .filter(|i| p.holds[*i].lane == lane)
                .collect();
            let spans: Vec<(f64, f64)> = bars
                .iter()
                .map(|i| (axis.x(p.holds[*i].from_ms), axis.x(p.holds[*i].to_ms)))
                .collect();
            let bar_rows = stack_spans(&spans);
            let bars_top = top + 8.0 + sub_rows as f64 * SUB_ROW + 2.0;
            for ((i, (x0, x1)), row) in bars.iter().zip(&spans).zip(&bar_rows) {
                holds[*i] = (*x0, x1.max(x0 + 6.0), bars_top + *row as f64 * BAR_ROW);
            }
            let n_bar_rows = bar_rows.iter().copied().max().map_or(0, |r| r + 1);
            let height = (16.0 + sub_rows as f64 * SUB_ROW + n_bar_rows as f64 * BAR_ROW + 2.0)
                .max(MIN_LANE);
            lanes.push((lane, top, height));
            top += height;
        }
        Layout {
            axis,
            untimed_x,
            lanes,
            marks,
            holds,
        }
    }

    fn bottom(&self) -> f64 {
        self.lanes.last().map_or(LANES_TOP, |(_, top, h)| top + h)
    }

    fn lane(&self, lane: Lane) -> (f64, f64) {
        self.lanes
            .iter()
            .find(|(l, _, _)| *l == lane)
            .map_or((LANES_TOP, MIN_LANE), |(_, top, h)| (*top, *h))
    }
}

/// Sub-rows for points in drawing order: each goes to the first sub-row whose last point is at
/// least `gap` to its left, so no two marks cover each other.
fn stack(xs: impl Iterator<Item = f64>, gap: f64) -> Vec<usize> {
    let mut last: Vec<f64> = Vec::new();
    xs.map(|x| {
        let row = last
            .iter()
            .position(|l| x - l >= gap || l - x >= gap)
            .unwrap_or(last.len());
        if row == last.len() {
            last.push(x);
        } else {
            last[row] = x;
        }
        row
    })
    .collect()
}

/// Rows for bars: each on the first row where it overlaps no other.
fn stack_spans(spans: &[(f64, f64)]) -> Vec<usize> {
    let mut rows: Vec<Vec<(f64, f64)>> = Vec::new();
    spans
        .iter()
        .map(|&(a, b)| {
            let free = |r: &Vec<(f64, f64)>| r.iter().all(|&(c, d)| b + 3.0 < c || d + 3.0 < a);
            let row = rows.iter().position(free).unwrap_or(rows.len());
            if row == rows.len() {
                rows.push(Vec::new());
            }
            rows[row].push((a, b));
            row
        })
        .collect()
}

/// One order's swimlanes.
pub fn swimlanes(p: &Picture, caption: &str) -> String {
    let layout = Layout::of(p);
    let height = layout.bottom() + 58.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="swimlanes" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" font-family="system-ui, sans-serif" font-size="12"><title>{}</title>"#,
        text(caption)
    );
    legend(&mut o, !p.crossings.is_empty());
    lanes(&mut o, &layout);
    breaks(&mut o, &layout);
    holds(&mut o, p, &layout);
    flags(&mut o, p, &layout);
    crossings(&mut o, p, &layout);
    marks(&mut o, p, &layout);
    axis(&mut o, &layout);
    o.push_str("</svg>");
    o
}

/// What the marks mean, laid out left to right; "got through" only when something did (the
/// alarm colour is nowhere else then).
fn legend(o: &mut String, got_through: bool) {
    let grey = "#64748b";
    let mut items: Vec<(String, &str)> = vec![
        (
            format!(r#"<circle r="4.5" fill="{grey}"/>"#),
            "row, decision",
        ),
        (
            format!(r#"<path d="M0,-5.5 L5.5,0 L0,5.5 L-5.5,0Z" fill="{grey}"/>"#),
            "Kafka copy",
        ),
        (stop_mark(grey), "stopped by this lane's layer"),
        (
            format!(r#"<rect x="-8" y="-2.5" width="16" height="5" fill="{grey}"/>"#),
            "lock held, record claimed (dashed: lease)",
        ),
        (
            format!(
                r#"<path d="M-3,-7 l10,3.5 l-10,3.5Z M-3,-7 L-3,7" fill="{grey}" stroke="{grey}"/>"#
            ),
            "operator action",
        ),
    ];
    if got_through {
        items.push((
            format!(r#"<rect x="-1.5" y="-8" width="3" height="16" fill="{ALARM}"/>"#),
            "got through",
        ));
    }
    o.push_str(r##"<g class="legend" fill="#334155" font-size="11">"##);
    let mut x = 14.0;
    for (symbol, label) in items {
        let _ = write!(
            o,
            r#"<g transform="translate({x} 14)">{symbol}</g><text x="{tx}" y="18">{label}</text>"#,
            tx = x + 12.0,
        );
        x += 12.0 + label.chars().count() as f64 * 6.0 + 16.0;
    }
    o.push_str("</g>");
}

/// The "stopped here" mark: a square with a cross, in the lane's colour.
fn stop_mark(fill: &str) -> String {
    format!(
        r##"<rect x="-6.5" y="-6.5" width="13" height="13" rx="2" fill="{fill}"/><path d="M-3.5,-3.5 L3.5,3.5 M3.5,-3.5 L-3.5,3.5" stroke="#ffffff" stroke-width="2"/>"##
    )
}

fn lanes(o: &mut String, l: &Layout) {
    for (i, (lane, top, h)) in l.lanes.iter().enumerate() {
        let shade = if i % 2 == 0 { "#f8fafc" } else { "#eef2f7" };
        let _ = write!(
            o,
            r##"<g class="lane" data-lane="{id}"><rect class="lane-band" x="0" y="{top}" width="{WIDTH}" height="{h}" fill="{shade}"/><text x="10" y="{ty}" fill="{c}" font-weight="bold">{name}</text></g>"##,
            id = lane.id(),
            ty = top + h / 2.0 + 4.0,
            c = colour(*lane),
            name = lane.name(),
        );
    }
    if let Some(x) = l.untimed_x {
        let _ = write!(
            o,
            r##"<line x1="{x0}" y1="{LANES_TOP}" x2="{x0}" y2="{b}" stroke="#94a3b8" stroke-dasharray="3 3"/><text x="{x}" y="{ty}" text-anchor="middle" fill="#475569">no time</text>"##,
            x0 = x - UNTIMED_W / 2.0 + 4.0,
            b = l.bottom(),
            ty = l.bottom() + 16.0,
        );
    }
}

/// Each cut gap: a grey band across the lanes with the axis's break sign, naming on hover the
/// time it cut.
fn breaks(o: &mut String, l: &Layout) {
    let bottom = l.bottom();
    for b in l.axis.breaks() {
        let mid = (b.x0 + b.x1) / 2.0;
        let _ = write!(
            o,
            r##"<g class="break" data-gap-ms="{gap}"><title>{label} cut from the axis: nothing happened then</title><rect x="{x0:.1}" y="{LANES_TOP}" width="{w:.1}" height="{h}" fill="#dbe2ea"/><path d="M{a:.1},{b1} l5,-8 M{c:.1},{b1} l5,-8" stroke="#475569" stroke-width="1.5"/></g>"##,
            gap = b.gap_ms,
            x0 = b.x0,
            w = b.x1 - b.x0,
            h = bottom - LANES_TOP,
            a = mid - 5.0,
            c = mid,
            b1 = bottom + 4.0,
            label = gap_label(b.gap_ms),
        );
    }
}

fn holds(o: &mut String, p: &Picture, l: &Layout) {
    for (h, (x0, x1, y)) in p.holds.iter().zip(&l.holds) {
        let (class, dash) = if h.released {
            ("hold", "")
        } else {
            (
                "hold lease",
                r#" stroke-dasharray="4 3" fill-opacity="0.25""#,
            )
        };
        let _ = write!(
            o,
            r##"<rect class="{class}" data-lane="{lane}" x="{x0}" y="{y}" width="{w}" height="5" fill="{c}" stroke="{c}"{dash}><title>{t}</title></rect>"##,
            lane = h.lane.id(),
            w = x1 - x0,
            c = colour(h.lane),
            t = text(&h.title),
        );
    }
}

fn flags(o: &mut String, p: &Picture, l: &Layout) {
    let (top, h) = l.lane(Lane::Operator);
    let c = colour(Lane::Operator);
    for f in &p.flags {
        let x = l.axis.x(f.at_ms);
        let _ = write!(
            o,
            r##"<g class="flag" data-lane="operator"><title>{t}</title><line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="{c}" stroke-width="1.5"/><path d="M{x},{y0} l12,4 l-12,4Z" fill="{c}"/><text x="{tx}" y="{ty}" fill="{c}" font-size="10">{label}</text></g>"##,
            t = text(&f.title),
            y0 = top + 4.0,
            y1 = top + h - 3.0,
            tx = x + 14.0,
            ty = top + 12.0,
            label = text(&crate::console::format::short(&f.label, 18)),
        );
    }
}

/// A copy that got through: a line across every lane, in the alarm colour, labelled.
fn crossings(o: &mut String, p: &Picture, l: &Layout) {
    for c in &p.crossings {
        let x = l.axis.x(c.at_ms).floor() + 0.5;
        // The label stays inside the picture, whichever edge the crossing is near.
        let anchor = match x {
            x if x > WIDTH - 50.0 => "end",
            x if x < 50.0 => "start",
            _ => "middle",
        };
        let _ = write!(
            o,
            r#"<g class="crossing" data-row="{row}"><title>{t}</title><line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="{ALARM}" stroke-width="3"/><text x="{x}" y="{ty}" fill="{ALARM}" font-weight="bold" text-anchor="{anchor}">got through</text></g>"#,
            row = c.row,
            t = text(&c.title),
            y0 = LANES_TOP - 12.0,
            y1 = l.bottom(),
            ty = LANES_TOP - 15.0,
        );
    }
}

fn marks(o: &mut String, p: &Picture, l: &Layout) {
    for (m, (x, y)) in p.marks.iter().zip(&l.marks) {
        let c = colour(m.lane);
        let (class, shape) = match m.kind {
            MarkKind::Event => ("mark", format!(r#"<circle r="4.5" fill="{c}"/>"#)),
            MarkKind::KafkaCopy => (
                "mark copy",
                format!(r#"<path d="M0,-5.5 L5.5,0 L0,5.5 L-5.5,0Z" fill="{c}"/>"#),
            ),
            MarkKind::Stopped => ("mark stopped", stop_mark(c)),
            MarkKind::GotThrough => (
                "mark got-through",
                format!(
                    r##"<circle r="6.5" fill="{ALARM}" stroke="#ffffff" stroke-width="1.5"/>"##
                ),
            ),
        };
        let stopped_by = m
            .stopped_by
            .as_deref()
            .map(|s| format!(r#" data-stopped-by="{}""#, text(s)))
            .unwrap_or_default();
        let _ = write!(
            o,
            r#"<g class="{class}" data-row="{row}" data-lane="{lane}"{stopped_by} transform="translate({x:.1} {y:.1})"><title>{t}</title>{shape}</g>"#,
            row = m.row,
            lane = m.lane.id(),
            t = text(&m.title),
        );
    }
}

fn axis(o: &mut String, l: &Layout) {
    let y = l.bottom();
    let _ = write!(
        o,
        r##"<g class="axis" data-scale="broken" fill="#334155" font-size="11"><line x1="{PLOT_LEFT}" y1="{y}" x2="{PLOT_RIGHT}" y2="{y}" stroke="#64748b"/>"##
    );
    // Labels go on the first of two rows where they overlap no other; a tick whose label
    // fits nowhere keeps its line (pieces a few pixels apart).
    let mut row_ends = [f64::MIN; 2];
    for t in l.axis.ticks() {
        let _ = write!(
            o,
            r##"<line x1="{x:.1}" y1="{y}" x2="{x:.1}" y2="{y2}" stroke="#64748b"/>"##,
            x = t.x,
            y2 = y + 5.0,
        );
        let half = t.label.chars().count() as f64 * 3.3;
        let Some(row) = row_ends.iter().position(|end| t.x - half > end + 4.0) else {
            continue;
        };
        row_ends[row] = t.x + half;
        let _ = write!(
            o,
            r#"<text x="{x:.1}" y="{ty}" text-anchor="middle">{label}</text>"#,
            x = t.x,
            ty = y + 17.0 + row as f64 * 13.0,
            label = t.label,
        );
    }
    let _ = write!(
        o,
        r#"<text class="axis-caption" x="{PLOT_LEFT}" y="{cy}" font-style="italic">{caption}</text></g>"#,
        cy = y + 47.0,
        caption = text(&l.axis.caption()),
    );
}

/// The chart's plot area: top and height.
const CHART_TOP: f64 = 28.0;
const CHART_H: f64 = 110.0;

/// One lane's interceptions in one column of the chart, with its outcomes (label, count).
struct LaneCount<'a> {
    lane: Lane,
    count: u64,
    outcomes: Vec<(&'a str, u64)>,
}

/// Interceptions per layer per minute, stacked, from the Rates view's table. Each column's
/// `data-*` carry its counts per lane and its `<title>` the counts per outcome.
pub fn rates_chart(rates: &RateTable) -> String {
    let minutes = rates.window_minutes.max(1);
    // A long window is drawn in columns of several minutes (said under the chart).
    let per_column = minutes.div_ceil(240);
    let columns = minutes.div_ceil(per_column);
    let lanes = [Lane::Api, Lane::Locks, Lane::Database, Lane::StreamAndSinks];
    let counts: Vec<Vec<LaneCount>> = (0..columns)
        .map(|c| column_counts(rates, &lanes, c * per_column, per_column))
        .collect();
    let top = counts
        .iter()
        .map(|c| c.iter().map(|l| l.count).sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let col_w = (PLOT_RIGHT - PLOT_LEFT) / columns as f64;
    let minute_of = |c: usize| rates.first_minute_ms + (c * per_column) as i64 * 60_000;
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="rates" viewBox="0 0 {WIDTH} 180" width="{WIDTH}" height="180" role="img" font-family="system-ui, sans-serif" font-size="11" fill="#334155"><title>interceptions per layer per minute</title>"##
    );
    for (i, lane) in lanes.iter().enumerate() {
        let x = PLOT_LEFT + i as f64 * 150.0;
        let _ = write!(
            o,
            r#"<rect x="{x}" y="6" width="10" height="10" fill="{c}"/><text x="{tx}" y="15">{name}</text>"#,
            c = colour(*lane),
            tx = x + 14.0,
            name = lane.name(),
        );
    }
    let _ = write!(
        o,
        r##"<text x="{lx}" y="{ty}" text-anchor="end">{top}</text><text x="{lx}" y="{by}" text-anchor="end">0</text><line x1="{PLOT_LEFT}" y1="{by}" x2="{PLOT_RIGHT}" y2="{by}" stroke="#64748b"/>"##,
        lx = PLOT_LEFT - 8.0,
        ty = CHART_TOP + 4.0,
        by = CHART_TOP + CHART_H,
    );
    for (c, column) in counts.iter().enumerate() {
        let x = PLOT_LEFT + c as f64 * col_w;
        chart_column(&mut o, column, minute_of(c), x, col_w, top as f64);
    }
    for c in (0..columns).step_by((columns / 8).max(1)) {
        let _ = write!(
            o,
            r#"<text x="{x}" y="158">{t}</text>"#,
            x = PLOT_LEFT + c as f64 * col_w,
            t = &crate::console::format::clock(minute_of(c))[..5],
        );
    }
    let _ = write!(
        o,
        r#"<text x="{PLOT_LEFT}" y="174" font-style="italic">UTC · each column {per_column} minute(s) · interceptions (and DLQ) per layer: the outcomes of the Rates view</text></svg>"#
    );
    o
}

/// One column's counts per lane.
fn column_counts<'a>(
    rates: &'a RateTable,
    lanes: &[Lane],
    from: usize,
    len: usize,
) -> Vec<LaneCount<'a>> {
    lanes
        .iter()
        .map(|lane| {
            let outcomes: Vec<(&str, u64)> = rates
                .series
                .iter()
                .filter(|s| Lane::of_layer(s.layer.as_str()) == *lane)
                .map(|s| (s.label, s.per_minute.iter().skip(from).take(len).sum()))
                .filter(|(_, n)| *n > 0)
                .collect();
            LaneCount {
                lane: *lane,
                count: outcomes.iter().map(|(_, n)| n).sum(),
                outcomes,
            }
        })
        .collect()
}

/// One column: its counts as data, its outcomes as hover text, a bar per lane stacked.
fn chart_column(o: &mut String, column: &[LaneCount], minute_ms: i64, x: f64, w: f64, top: f64) {
    let title: Vec<String> = column
        .iter()
        .filter(|l| l.count > 0)
        .map(|l| {
            let each: Vec<String> = l.outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
            format!("{} {} ({})", l.lane.name(), l.count, each.join(", "))
        })
        .collect();
    let data: String = column
        .iter()
        .map(|l| format!(r#" data-{}="{}""#, l.lane.id(), l.count))
        .collect();
    let _ = write!(
        o,
        r#"<g class="minute" data-minute-ms="{minute_ms}"{data}><title>{} UTC · {}</title>"#,
        &crate::console::format::clock(minute_ms)[..5],
        if title.is_empty() {
            "no interception".to_string()
        } else {
            title.join(" · ")
        }
    );
    let mut y = CHART_TOP + CHART_H;
    for l in column.iter().filter(|l| l.count > 0) {
        let h = l.count as f64 / top * CHART_H;
        y -= h;
        let _ = write!(
            o,
            r#"<rect x="{x0:.1}" y="{y:.1}" width="{bw:.1}" height="{h:.1}" fill="{c}"/>"#,
            x0 = x + 0.5,
            bw = (w - 1.0).max(0.5),
            c = colour(l.lane),
        );
    }
    // The whole column answers hover, even where it is empty.
    let _ = write!(
        o,
        r#"<rect x="{x:.1}" y="{CHART_TOP}" width="{w:.1}" height="{CHART_H}" fill="transparent"/></g>"#,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::report::picture::picture;
    use crate::console::report::picture::tests::{demo_like, points_leak};

    fn translate(g: &str) -> (f64, f64) {
        let t = g.split("translate(").nth(1).unwrap();
        let mut it = t.split(')').next().unwrap().split(' ');
        (
            it.next().unwrap().parse().unwrap(),
            it.next().unwrap().parse().unwrap(),
        )
    }

    #[test]
    fn every_mark_is_drawn_once_and_none_covers_another() {
        let p = picture(&demo_like(), &[], &[]);
        let svg = swimlanes(&p, "order");
        let marks: Vec<&str> = svg.split(r#"<g class="mark"#).skip(1).collect();
        assert_eq!(marks.len(), p.marks.len());
        let xy: Vec<(f64, f64)> = marks.iter().map(|g| translate(g)).collect();
        for (i, a) in xy.iter().enumerate() {
            for b in &xy[i + 1..] {
                let apart = (a.0 - b.0).abs() >= 12.0 || (a.1 - b.1).abs() >= 12.0;
                assert!(apart, "{a:?} covers {b:?}");
            }
        }
        assert!(
            !svg.contains(ALARM),
            "nothing got through: no alarm colour, not even in the legend"
        );
    }

    #[test]
    fn a_copy_that_got_through_crosses_every_lane_in_the_alarm_colour() {
        let p = picture(&demo_like(), &[points_leak()], &[]);
        let svg = swimlanes(&p, "order");
        let crossing = svg.split(r#"<g class="crossing""#).nth(1).unwrap();
        let y = |name: &str| -> f64 {
            let v = crossing.split(&format!(r#"{name}=""#)).nth(1).unwrap();
            v.split('"').next().unwrap().parse().unwrap()
        };
        assert!(y("y1") < LANES_TOP, "starts above the first lane");
        assert!(y("y2") >= Layout::of(&p).bottom(), "ends under the last");
        assert!(crossing.contains(ALARM));
    }

    #[test]
    fn a_flag_stands_on_the_operator_lane() {
        let mut p = picture(&demo_like(), &[], &[]);
        let t0 = p.marks[0].at_ms.unwrap();
        p.flags.push(crate::console::report::picture::Flag {
            at_ms: t0 + 30,
            label: "finalize".into(),
            title: "finalize <by> bob".into(),
        });
        let layout = Layout::of(&p);
        let (top, h) = layout.lane(Lane::Operator);
        let svg = swimlanes(&p, "order");
        let flag = svg.split(r#"<g class="flag""#).nth(1).unwrap();
        let y = |name: &str| -> f64 {
            let v = flag.split(&format!(r#"{name}=""#)).nth(1).unwrap();
            v.split('"').next().unwrap().parse().unwrap()
        };
        assert!(y("y1") >= top && y("y2") <= top + h, "{flag}");
        assert!(flag.contains("finalize &lt;by&gt; bob"));
    }

    #[test]
    fn a_row_without_a_time_is_drawn_in_a_column_of_its_own() {
        let mut t = demo_like();
        t.entries
            .push(crate::console::read::timeline::TimelineEntry {
                at_ms: None,
                layer: "db",
                source: "source profile".into(),
                summary: "points_ledger is absent in the source profile".into(),
                stopped_by: None,
                fields: serde_json::Value::Null,
            });
        let p = picture(&t, &[], &[]);
        let layout = Layout::of(&p);
        let (x, _) = layout.marks[t.entries.len() - 1];
        let timed = layout.marks[..t.entries.len() - 1]
            .iter()
            .map(|(x, _)| *x)
            .fold(f64::MIN, f64::max);
        assert!(x > timed + 20.0, "{x} vs {timed}");
        assert!(swimlanes(&p, "order").contains(">no time</text>"));
    }

    #[test]
    fn hostile_values_are_text_in_the_svg() {
        let mut t = demo_like();
        t.entries[1].summary = "<script>alert(1)</script> javascript:alert(2)".into();
        let svg = swimlanes(&picture(&t, &[], &[]), "<b>caption</b>");
        assert!(!svg.contains("<script>") && !svg.contains("<b>"));
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt; javascript:alert(2)"));
    }

    #[test]
    fn the_chart_counts_each_layer_per_minute() {
        use crate::contracts::Outcome;
        let rates = RateTable::over(10, 12, |m, o| match (m, o) {
            (10, Outcome::InFlightRejected) => 4,
            (10, Outcome::Replayed) => 1,
            (12, Outcome::DedupHit) => 2,
            _ => 0,
        });
        let svg = rates_chart(&rates);
        let columns: Vec<&str> = svg.split(r#"<g class="minute""#).skip(1).collect();
        assert_eq!(columns.len(), 3);
        assert!(columns[0].contains(r#"data-api="5""#), "{}", columns[0]);
        assert!(columns[0].contains("API 5 (replays 1, 409 in flight 4)"));
        assert!(columns[1].contains(r#"data-api="0""#) && columns[1].contains("no interception"));
        assert!(columns[2].contains(r#"data-stream="2""#));
    }
}
