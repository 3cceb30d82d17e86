//! What a reader of the HTML report must see, checked on the DOM a browser built from it
//! (`--dump-dom`, parsed with html5ever): the page did nothing but show itself, each order has
//! its five lanes, every row of its table is a mark on its layer's lane whose hover text is
//! that row, every stopped duplicate is marked on the lane of the layer that stopped it, and a
//! copy that got through crosses every lane.
#![allow(dead_code)]

use idemguard::console::read::timeline::Timeline;
use idemguard::console::report::IncidentReport;
use scraper::{ElementRef, Html, Selector};

pub const LINES_OF_DEFENSE: [&str; 5] = ["api", "locks", "database", "stream", "operator"];

/// The lane a timeline layer is drawn on, as the report promises it.
pub fn lane_of(layer: &str) -> &'static str {
    match layer {
        "api" => "api",
        "lock" => "locks",
        "db" => "database",
        "kafka" | "stream" | "sink" => "stream",
        "console" => "operator",
        "log" => "logs",
        other => panic!("no lane for layer {other}"),
    }
}

pub fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn attr<'a>(e: &ElementRef<'a>, name: &str) -> &'a str {
    e.value()
        .attr(name)
        .unwrap_or_else(|| panic!("<{}> has no {name}", e.value().name()))
}

fn num(e: &ElementRef<'_>, name: &str) -> f64 {
    attr(e, name).parse().unwrap()
}

fn has_class(e: &ElementRef<'_>, class: &str) -> bool {
    e.value().classes().any(|c| c == class)
}

/// A mark's centre, from its `translate(x y)`.
fn centre(e: &ElementRef<'_>) -> (f64, f64) {
    let t = attr(e, "transform");
    let inner = t
        .strip_prefix("translate(")
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("transform {t}"));
    let mut it = inner.split([' ', ',']).filter(|s| !s.is_empty());
    (
        it.next().unwrap().parse().unwrap(),
        it.next().unwrap().parse().unwrap(),
    )
}

fn text(e: &ElementRef<'_>) -> String {
    e.text().collect()
}

/// Nothing on the page can act: no script, frame, object, image, link, form or base; no event
/// handler attribute and no `javascript:` value anywhere.
pub fn assert_inert(dom: &Html) {
    let active = [
        "script",
        "iframe",
        "object",
        "embed",
        "img",
        "link",
        "a",
        "form",
        "base",
        "image",
        "use",
        "foreignobject",
    ];
    for e in dom
        .root_element()
        .descendants()
        .filter_map(ElementRef::wrap)
    {
        let name = e.value().name().to_ascii_lowercase();
        assert!(!active.contains(&name.as_str()), "a <{name}> on the page");
        for (k, v) in e.value().attrs() {
            assert!(!k.starts_with("on"), "<{name} {k}=…>");
            assert!(
                !v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("javascript:"),
                "<{name} {k}={v:?}>"
            );
        }
    }
}

/// Every check of a report page (the DOM as the browser parsed it); `leaked`: a copy got
/// through in the first order. Returns the number of stopped marks per lane of each order.
pub fn assert_report_page(
    dom_text: &str,
    r: &IncidentReport,
    leaked: bool,
) -> Vec<Vec<(String, usize)>> {
    let dom = Html::parse_document(dom_text);
    assert_inert(&dom);
    let orders: Vec<ElementRef> = dom.select(&sel("section.order")).collect();
    assert_eq!(orders.len(), r.timelines.len(), "one section per order");
    let mut stopped = Vec::new();
    for (i, (order, t)) in orders.iter().zip(&r.timelines).enumerate() {
        stopped.push(assert_order(order, t, leaked && i == 0));
    }
    let verdict = dom.select(&sel(".verdict.alarm")).count();
    assert_eq!(
        verdict,
        usize::from(!r.leaks.is_empty()),
        "the alarm verdict"
    );
    assert_rates_chart(&dom, r);
    stopped
}

/// One order: lanes, a mark per row on its lane with the row as its hover text, the stopped
/// marks, and the crossing of a copy that got through.
fn assert_order(order: &ElementRef<'_>, t: &Timeline, leaked: bool) -> Vec<(String, usize)> {
    let svg = order
        .select(&sel("svg.swimlanes"))
        .next()
        .expect("the order's picture");
    let lanes: Vec<(String, f64, f64)> = svg
        .select(&sel("g.lane"))
        .map(|g| {
            let band = g.select(&sel("rect")).next().unwrap();
            let y = num(&band, "y");
            (
                attr(&g, "data-lane").to_string(),
                y,
                y + num(&band, "height"),
            )
        })
        .collect();
    let names: Vec<&str> = lanes.iter().map(|(l, _, _)| l.as_str()).collect();
    assert_eq!(names[..5], LINES_OF_DEFENSE, "the five lanes, in order");
    let band = |lane: &str| lanes.iter().find(|(l, _, _)| l == lane).unwrap().clone();
    let rows: Vec<ElementRef> = order.select(&sel("table.timeline tbody tr")).collect();
    assert_eq!(rows.len(), t.entries.len(), "the table: one row per entry");
    let marks: Vec<ElementRef> = svg.select(&sel("g.mark")).collect();
    assert_eq!(marks.len(), rows.len(), "one mark per row");
    for (i, (row, e)) in rows.iter().zip(&t.entries).enumerate() {
        assert_eq!(attr(row, "data-row"), i.to_string());
        let mine: Vec<&ElementRef> = marks
            .iter()
            .filter(|m| attr(m, "data-row") == i.to_string())
            .collect();
        assert_eq!(mine.len(), 1, "row {i} has one mark");
        let mark = mine[0];
        let lane = lane_of(e.layer);
        assert_eq!(attr(mark, "data-lane"), lane, "row {i}: {}", e.summary);
        let (_, top, bottom) = band(lane);
        let (_, y) = centre(mark);
        assert!(
            top < y && y < bottom,
            "row {i}'s mark lies in the {lane} lane"
        );
        let title = text(&mark.select(&sel("title")).next().expect("hover text"));
        for cell in row.select(&sel("td")).map(|c| text(&c)) {
            assert!(
                title.contains(&cell),
                "row {i}: hover {title:?} lacks {cell:?}"
            );
        }
        match &e.stopped_by {
            Some(by) => {
                assert!(has_class(mark, "stopped") || has_class(mark, "got-through"));
                assert_eq!(attr(mark, "data-stopped-by"), by);
                assert_eq!(
                    lane,
                    lane_of(by),
                    "stopped on the lane of the layer that did"
                );
            }
            None => assert!(!has_class(mark, "stopped"), "row {i} stopped nothing"),
        }
    }
    assert_crossings(svg, &rows, &marks, &lanes, leaked);
    LINES_OF_DEFENSE
        .iter()
        .map(|lane| {
            let n = marks
                .iter()
                .filter(|m| has_class(m, "stopped") && attr(m, "data-lane") == *lane)
                .count();
            (lane.to_string(), n)
        })
        .collect()
}

/// A copy that got through: a line from above the first lane to under the last, on a mark
/// and a row marked as such; none when nothing got through.
fn assert_crossings(
    svg: ElementRef<'_>,
    rows: &[ElementRef<'_>],
    marks: &[ElementRef<'_>],
    lanes: &[(String, f64, f64)],
    leaked: bool,
) {
    let crossings: Vec<ElementRef> = svg.select(&sel("g.crossing")).collect();
    if !leaked {
        assert!(crossings.is_empty(), "nothing got through: no crossing");
        return;
    }
    assert!(!crossings.is_empty(), "the copy that got through is drawn");
    for c in crossings {
        let line = c.select(&sel("line")).next().unwrap();
        assert!(
            num(&line, "y1") <= lanes[0].1,
            "starts above the first lane"
        );
        assert!(
            num(&line, "y2") >= lanes.last().unwrap().2,
            "ends under the last lane"
        );
        let row = attr(&c, "data-row");
        let mark = marks.iter().find(|m| attr(m, "data-row") == row).unwrap();
        assert!(has_class(mark, "got-through"));
        let tr = rows.iter().find(|r| attr(r, "data-row") == row).unwrap();
        assert!(has_class(tr, "got-through"));
        let dx = centre(mark).0 - num(&line, "x1");
        assert!(
            dx.abs() <= 1.0,
            "the crossing runs through its mark ({dx} px off)"
        );
    }
}

/// The chart's columns add up, per lane, to the interceptions of the report's timelines.
fn assert_rates_chart(dom: &Html, r: &IncidentReport) {
    let chart = dom
        .select(&sel("svg.rates"))
        .next()
        .expect("the rates chart");
    for lane in ["api", "locks", "database", "stream"] {
        let drawn: u64 = chart
            .select(&sel("g.minute"))
            .map(|g| attr(&g, &format!("data-{lane}")).parse::<u64>().unwrap())
            .sum();
        if r.id.is_some() {
            let expected = r
                .timelines
                .iter()
                .flat_map(|t| &t.interceptions)
                .filter(|i| lane_of(&i.layer) == lane)
                .count() as u64;
            assert_eq!(drawn, expected, "{lane}: interceptions charted");
        }
    }
}
