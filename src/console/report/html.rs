//! The report as one self-contained HTML page for the post-incident review: the Markdown
//! report's content — summary, duplicates that got through, contradicting records, operator
//! actions, rates — and, per order, its swimlanes ([`super::svg::swimlanes`]) above its table.
//!
//! Safe by construction: every value from the data goes through [`crate::untrusted::html`]
//! ([`cell`]); the page holds no script, loads nothing (no font, image or stylesheet from
//! anywhere) and says so to the browser — its Content-Security-Policy allows no source at all
//! but its own stylesheet, by hash, so even markup that escaped the escaping could neither run
//! nor fetch. It opens offline and can be attached to a postmortem as it is.

use std::fmt::Write as _;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::picture::{picture, row_cells, Lane};
use super::svg::{colour, rates_chart, swimlanes, ALARM};
use super::{provenance, IncidentReport};
use crate::console::read::timeline::Timeline;
use crate::contracts::format_ms;

/// A value in the page's text or in a quoted attribute.
fn cell(s: &str) -> String {
    crate::untrusted::html(s)
}

/// The page's only stylesheet (its hash is the policy's one allowed style; `style`
/// attributes are not allowed, so the chips' lane colours are here too).
fn stylesheet() -> String {
    let chips: String = Lane::LINES_OF_DEFENSE
        .iter()
        .map(|l| format!(".chip[data-lane={}]{{background:{}}}", l.id(), colour(*l)))
        .collect();
    format!(
        "body{{font:14px/1.45 system-ui,sans-serif;color:#0f172a;margin:24px auto;max-width:1040px;padding:0 16px;overflow-wrap:anywhere}}\
h1{{font-size:22px;margin:0 0 4px}}h2{{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #cbd5e1}}\
h3{{font-size:15px;margin:20px 0 4px;word-break:break-all}}\
table{{border-collapse:collapse;width:100%;font-size:12px;margin:8px 0}}\
th,td{{border:1px solid #cbd5e1;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere}}\
th{{background:#f1f5f9;white-space:nowrap}}table.timeline td:first-child{{white-space:nowrap}}tr.stopped td{{background:#f0fdf4}}tr.got-through td{{background:#fee2e2}}\
.verdict{{display:inline-block;padding:6px 12px;border-radius:4px;font-weight:bold;margin:8px 0}}\
.verdict.ok{{background:#15803d;color:#fff}}.verdict.risk{{background:#c2410c;color:#fff}}\
.verdict.alarm{{background:{ALARM};color:#fff}}.alarm-text{{color:{ALARM};font-weight:bold}}\
.chip{{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;margin-right:6px;font-size:12px}}\
svg{{max-width:100%;height:auto;display:block}}figure{{margin:8px 0}}\
figcaption,.muted{{color:#475569;font-size:12px}}.warning{{color:#b45309}}{chips}"
    )
}

/// The report as HTML.
pub fn html(r: &IncidentReport) -> String {
    let mut o = String::new();
    head(&mut o, r);
    summary(&mut o, r);
    orders_section(&mut o, r);
    leaks_section(&mut o, r);
    contradictions_section(&mut o, r);
    actions_section(&mut o, r);
    dlq_section(&mut o, r);
    rates_section(&mut o, r);
    o.push_str("</main>\n</body>\n</html>\n");
    o
}

fn title_of(r: &IncidentReport) -> String {
    r.id.as_deref()
        .map(cell)
        .unwrap_or_else(|| format!("{} → {}", format_ms(r.since_ms), format_ms(r.until_ms)))
}

fn head(o: &mut String, r: &IncidentReport) {
    let css = stylesheet();
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(css.as_bytes()));
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'sha256-{hash}'; base-uri 'none'; form-action 'none'\">\n\
<meta name=\"color-scheme\" content=\"light\">\n<meta name=\"generator\" content=\"idemguard report\">\n\
<title>Post-incident report — {title}</title>\n<style>{css}</style>\n</head>\n<body>\n<main>\n\
<h1>Post-incident report — {title}</h1>\n<p class=\"muted\">Environment <b>{env}</b>{prod} · generated {at}</p>\n",
        title = title_of(r),
        env = cell(&r.environment.name),
        prod = if r.environment.production {
            " (production)"
        } else {
            ""
        },
        at = r.generated_at,
    );
}

/// The verdict first, then what was found, counted.
fn summary(o: &mut String, r: &IncidentReport) {
    o.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n");
    if !r.leaks.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"verdict alarm\">{} duplicate(s) got through</p>",
            r.leaks.len()
        );
    } else {
        let _ = writeln!(
            o,
            "<p class=\"verdict ok\">No duplicate got through · {} stopped</p>",
            r.duplicates_stopped()
        );
    }
    if !r.contradictions.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"verdict risk\">{} record(s) contradict the orders (duplicate risk)</p>",
            r.contradictions.len()
        );
    }
    let from = |source: &str| format!(" <span class=\"muted\">({source})</span>");
    let _ = write!(
        o,
        "<ul>\n<li>orders: {} ({} with a timeline below)</li>\n<li>duplicates stopped: {}{}</li>\n\
<li><b>duplicates that got through: {}</b>{}</li>\n<li><b>records that contradict the orders (duplicate risk): {}</b>{}</li>\n\
<li>operator actions: {}{}</li>\n<li>DLQ messages of these orders: {}{}</li>\n",
        r.orders_in_window,
        r.timelines.len(),
        r.duplicates_stopped(),
        from(provenance::TRACE_EVENTS),
        r.leaks.len(),
        from(provenance::ROWS),
        r.contradictions.len(),
        from(provenance::ROWS),
        r.operator_actions.len(),
        from(provenance::AUDIT),
        r.dlq_messages.len(),
        from(provenance::DLQ)
    );
    for e in &r.errors {
        let _ = writeln!(
            o,
            "<li class=\"warning\">⚠ not read: {} (the report is partial)</li>",
            cell(e)
        );
    }
    o.push_str("</ul>\n</section>\n");
}

/// A table: its header and rows, every cell escaped.
fn table(o: &mut String, class: &str, header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let _ = write!(o, "<table class=\"{class}\">\n<thead><tr>");
    for h in header {
        let _ = write!(o, "<th>{h}</th>");
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        o.push_str("<tr>");
        for c in row {
            let _ = write!(o, "<td>{}</td>", cell(&c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody>\n</table>\n");
}

/// Each order: who stopped what, its swimlanes, then its table.
fn orders_section(o: &mut String, r: &IncidentReport) {
    o.push_str("<section id=\"orders\">\n<h2>Orders</h2>\n");
    for (n, t) in r.timelines.iter().enumerate() {
        let p = picture(t, &r.leaks, &r.operator_actions);
        let _ = write!(
            o,
            "<section class=\"order\" id=\"order-{n}\">\n<h3>{} {}</h3>\n<p>orderNo {} · requestId {}</p>\n",
            t.kind.replace('_', " "),
            cell(&t.query),
            cell(t.order_no.as_deref().unwrap_or("?")),
            cell(t.request_id.as_deref().unwrap_or("?"))
        );
        stopped_by_layer(o, t);
        for l in &p.unplaced_leaks {
            let _ = writeln!(
                o,
                "<p class=\"alarm-text\">Got through: {} (not every row is in this trace; see below)</p>",
                cell(l)
            );
        }
        let caption = format!("timeline of {} {}", t.kind.replace('_', " "), t.query);
        let _ = writeln!(
            o,
            "<figure>{}<figcaption>Hover a mark: its row of the table below.</figcaption></figure>",
            swimlanes(&p, &caption)
        );
        timeline_table(o, n, t, &p);
        o.push_str("</section>\n");
    }
    o.push_str("</section>\n");
}

/// "Duplicates stopped": one chip per layer, then each interception.
fn stopped_by_layer(o: &mut String, t: &Timeline) {
    if t.interceptions.is_empty() {
        o.push_str("<p>No duplicate of this order was stopped.</p>\n");
        return;
    }
    o.push_str("<p>Duplicates stopped: ");
    for lane in Lane::LINES_OF_DEFENSE {
        let n = t
            .interceptions
            .iter()
            .filter(|i| Lane::of_layer(&i.layer) == lane)
            .count();
        if n > 0 {
            let _ = write!(
                o,
                "<span class=\"chip\" data-lane=\"{}\">{} ×{n}</span>",
                lane.id(),
                lane.name()
            );
        }
    }
    o.push_str("</p>\n<ul>\n");
    for i in &t.interceptions {
        let _ = writeln!(
            o,
            "<li>{} by <b>{}</b> ({}): {}</li>",
            i.at_ms.map_or("?".into(), format_ms),
            cell(&i.layer),
            cell(&i.outcome),
            cell(&i.detail)
        );
    }
    o.push_str("</ul>\n");
}

/// The rows the picture draws, one per mark, in the same order (`data-row`).
fn timeline_table(o: &mut String, n: usize, t: &Timeline, p: &super::picture::Picture) {
    o.push_str("<table class=\"timeline\">\n<thead><tr><th>time</th><th>layer</th><th>source</th><th>what</th><th>stopped by</th></tr></thead>\n<tbody>\n");
    for (i, e) in t.entries.iter().enumerate() {
        let class = if p.crossings.iter().any(|c| c.row == i) {
            " class=\"got-through\""
        } else if e.stopped_by.is_some() {
            " class=\"stopped\""
        } else {
            ""
        };
        let _ = write!(o, "<tr id=\"order-{n}-row-{i}\" data-row=\"{i}\"{class}>");
        for c in row_cells(e) {
            let _ = write!(o, "<td>{}</td>", cell(&c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody>\n</table>\n");
}

fn leaks_section(o: &mut String, r: &IncidentReport) {
    o.push_str("<section id=\"leaks\">\n<h2>Duplicates that got through</h2>\n");
    if r.leaks.is_empty() {
        o.push_str("<p>None: no requestId or order has two effects in orders, stock movements, payment flows, points or notifications.</p>\n");
    } else {
        let rows = r.leaks.iter().map(|l| {
            vec![
                l.table.clone(),
                l.rows.to_string(),
                format!("{} = {}", l.by, l.key),
                l.first.clone(),
                l.last.clone(),
            ]
        });
        let header = ["table", "rows", "shared column = key", "first", "last"];
        table(o, "leaks", &header, rows);
    }
    o.push_str("</section>\n");
}

fn contradictions_section(o: &mut String, r: &IncidentReport) {
    o.push_str("<section id=\"contradictions\">\n<h2>Records that contradict the orders</h2>\n");
    if r.contradictions.is_empty() {
        o.push_str("<p>None: every FAILED record has no order and every SUCCEEDED record's order exists.</p>\n");
    } else {
        o.push_str("<p>A FAILED record with an order told its client to send a new key although the order exists: a second order may follow.</p>\n");
        let rows = r.contradictions.iter().map(|c| {
            vec![
                c.request_id.clone(),
                c.status.clone(),
                c.order_no.clone(),
                c.problem.replace('_', " "),
            ]
        });
        let header = ["requestId", "record status", "order", "problem"];
        table(o, "contradictions", &header, rows);
    }
    o.push_str("</section>\n");
}

fn actions_section(o: &mut String, r: &IncidentReport) {
    o.push_str("<section id=\"actions\">\n<h2>Operator actions</h2>\n");
    if r.operator_actions.is_empty() {
        o.push_str("<p>None.</p>\n");
    } else {
        let rows = r.operator_actions.iter().map(|a| {
            vec![
                format_ms(a.created_at),
                a.operator.clone(),
                a.action.clone(),
                a.target.clone(),
                a.outcome.clone(),
                a.reason.clone().unwrap_or_default(),
                a.detail.clone().unwrap_or_default(),
            ]
        });
        let header = [
            "time", "operator", "action", "target", "outcome", "reason", "detail",
        ];
        table(o, "actions", &header, rows);
    }
    o.push_str("</section>\n");
}

/// The DLQ messages of the affected orders, oldest first (each also in its order's timeline).
fn dlq_section(o: &mut String, r: &IncidentReport) {
    use super::dlq::{redriven, source, verdict};
    o.push_str("<section id=\"dlq\">\n<h2>DLQ messages of these orders</h2>\n");
    if r.dlq_messages.is_empty() {
        o.push_str("<p>None: no message of the DLQ names these orders.</p>\n");
    } else {
        let rows = r.dlq_messages.iter().map(|m| {
            let at = m.timestamp_ms;
            vec![
                at.map_or("?".into(), format_ms),
                at.map_or("?".into(), |t| {
                    crate::console::format::age(r.generated_ms - t)
                }),
                format!("{}@{}", m.partition, m.offset),
                source(m),
                m.order_no.clone().unwrap_or_default(),
                m.event_id.clone().unwrap_or_default(),
                m.reason.clone(),
                redriven(m),
                verdict(&m.verdict),
            ]
        });
        let header = [
            "time",
            "age",
            "DLQ position",
            "source",
            "order",
            "event",
            "reason",
            "redriven",
            "now",
        ];
        table(o, "dlq", &header, rows);
    }
    o.push_str("</section>\n");
}

/// The chart of interceptions per layer per minute, then the counts per layer and outcome.
fn rates_section(o: &mut String, r: &IncidentReport) {
    o.push_str("<section id=\"rates\">\n<h2>Rates</h2>\n");
    let _ = writeln!(o, "<figure>{}</figure>", rates_chart(&r.rate_minutes));
    if r.rates.is_empty() {
        o.push_str("<p>No trace events in the window.</p>\n");
    } else {
        let rows = r.rates.iter().map(|x| {
            vec![
                x.layer.clone(),
                x.outcome.clone(),
                x.count.to_string(),
                format!("{:.2}", x.per_minute),
            ]
        });
        let header = ["layer", "outcome", "count", "per minute"];
        table(o, "rates", &header, rows);
    }
    o.push_str("</section>\n");
}
