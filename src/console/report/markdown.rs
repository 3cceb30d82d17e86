//! The report as Markdown: it pastes into a ticket. Every value another system wrote goes
//! through [`crate::untrusted::markdown`] ([`cell`]).

use std::fmt::Write as _;

use crate::contracts::format_ms;

use super::{provenance, IncidentReport};

/// A value in the report's text or a table cell: escaped and its Markdown neutralized
/// ([`crate::untrusted::markdown`]). Never inside a code span: its backslashes would show.
fn cell(s: &str) -> String {
    crate::untrusted::markdown(s)
}

/// The report as Markdown.
pub fn markdown(r: &IncidentReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Post-incident report — {}",
        r.id.as_deref().map(cell).unwrap_or_else(|| format!(
            "{} → {}",
            format_ms(r.since_ms),
            format_ms(r.until_ms)
        ))
    );
    let _ = writeln!(
        o,
        "\nEnvironment **{}**{} · generated {}\n",
        r.environment.name,
        if r.environment.production {
            " (production)"
        } else {
            ""
        },
        r.generated_at
    );
    summary(&mut o, r);
    leaks_section(&mut o, r);
    contradictions_section(&mut o, r);
    actions_section(&mut o, r);
    dlq_section(&mut o, r);
    rates_section(&mut o, r);
    orders_section(&mut o, r);
    o
}

/// The summary: what was found, counted.
fn summary(o: &mut String, r: &IncidentReport) {
    let _ = writeln!(o, "## Summary\n");
    let _ = writeln!(
        o,
        "- orders: {} ({} with a timeline below)",
        r.orders_in_window,
        r.timelines.len()
    );
    let _ = writeln!(
        o,
        "- duplicates stopped: {} ({})",
        r.duplicates_stopped(),
        provenance::TRACE_EVENTS
    );
    let _ = writeln!(
        o,
        "- **duplicates that got through: {}** ({})",
        r.leaks.len(),
        provenance::ROWS
    );
    let _ = writeln!(
        o,
        "- **records that contradict the orders (duplicate risk): {}** ({})",
        r.contradictions.len(),
        provenance::ROWS
    );
    let _ = writeln!(
        o,
        "- operator actions: {} ({})",
        r.operator_actions.len(),
        provenance::AUDIT
    );
    let _ = writeln!(
        o,
        "- DLQ messages of these orders: {} ({})",
        r.dlq_messages.len(),
        provenance::DLQ
    );
    for e in &r.errors {
        let _ = writeln!(o, "- ⚠ not read: {} (the report is partial)", cell(e));
    }
}

/// Every duplicate that got through.
fn leaks_section(o: &mut String, r: &IncidentReport) {
    let _ = writeln!(o, "\n## Duplicates that got through\n");
    if r.leaks.is_empty() {
        let _ = writeln!(o, "None: no requestId or order has two effects in orders, stock movements, payment flows, points or notifications.");
    } else {
        let _ = writeln!(
            o,
            "| table | rows | shared column = key | first | last |\n|---|---|---|---|---|"
        );
        for l in &r.leaks {
            let _ = writeln!(
                o,
                "| {} | {} | {} = {} | {} | {} |",
                l.table,
                l.rows,
                l.by,
                cell(&l.key),
                cell(&l.first),
                cell(&l.last)
            );
        }
    }
}

/// Records whose status contradicts the order tables.
fn contradictions_section(o: &mut String, r: &IncidentReport) {
    let _ = writeln!(o, "\n## Records that contradict the orders\n");
    if r.contradictions.is_empty() {
        let _ = writeln!(
            o,
            "None: every FAILED record has no order and every SUCCEEDED record's order exists."
        );
    } else {
        let _ = writeln!(o, "A FAILED record with an order told its client to send a new key although the order exists: a second order may follow.\n");
        let _ = writeln!(
            o,
            "| requestId | record status | order | problem |\n|---|---|---|---|"
        );
        for c in &r.contradictions {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                cell(&c.request_id),
                cell(&c.status),
                cell(&c.order_no),
                c.problem.replace('_', " ")
            );
        }
    }
}

/// The DLQ messages of the affected orders, oldest first.
fn dlq_section(o: &mut String, r: &IncidentReport) {
    use super::dlq::{redriven, source, verdict};
    let _ = writeln!(o, "\n## DLQ messages of these orders\n");
    if r.dlq_messages.is_empty() {
        let _ = writeln!(o, "None: no message of the DLQ names these orders.");
        return;
    }
    let _ = writeln!(o, "| time | age | DLQ position | source | order | event | reason | redriven | now |\n|---|---|---|---|---|---|---|---|---|");
    let now = r.generated_ms;
    for m in &r.dlq_messages {
        let at = m.timestamp_ms;
        let _ = writeln!(
            o,
            "| {} | {} | {}@{} | {} | {} | {} | {} | {} | {} |",
            at.map_or("?".into(), format_ms),
            at.map_or("?".into(), |t| crate::console::format::age(now - t)),
            m.partition,
            m.offset,
            cell(&source(m)),
            cell(m.order_no.as_deref().unwrap_or("")),
            cell(m.event_id.as_deref().unwrap_or("")),
            cell(&m.reason),
            cell(&redriven(m)),
            cell(&verdict(&m.verdict))
        );
    }
}

/// The operator actions taken, oldest first.
fn actions_section(o: &mut String, r: &IncidentReport) {
    let _ = writeln!(o, "\n## Operator actions\n");
    if r.operator_actions.is_empty() {
        let _ = writeln!(o, "None.");
    } else {
        let _ = writeln!(o, "| time | operator | action | target | outcome | reason | detail |\n|---|---|---|---|---|---|---|");
        for a in &r.operator_actions {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} |",
                format_ms(a.created_at),
                cell(&a.operator),
                cell(&a.action),
                cell(&a.target),
                cell(&a.outcome),
                cell(a.reason.as_deref().unwrap_or("")),
                cell(a.detail.as_deref().unwrap_or(""))
            );
        }
    }
}

/// Interceptions per layer and outcome.
fn rates_section(o: &mut String, r: &IncidentReport) {
    let _ = writeln!(o, "\n## Rates\n");
    if r.rates.is_empty() {
        let _ = writeln!(o, "No trace events in the window.");
    } else {
        let _ = writeln!(
            o,
            "| layer | outcome | count | per minute |\n|---|---|---|---|"
        );
        for x in &r.rates {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.2} |",
                x.layer, x.outcome, x.count, x.per_minute
            );
        }
    }
}

/// Each order's timeline and the layer that stopped each duplicate.
fn orders_section(o: &mut String, r: &IncidentReport) {
    let _ = writeln!(o, "\n## Orders\n");
    for t in &r.timelines {
        let _ = writeln!(o, "### {} {}\n", t.kind.replace('_', " "), cell(&t.query));
        let _ = writeln!(
            o,
            "orderNo {} · requestId {}\n",
            cell(t.order_no.as_deref().unwrap_or("?")),
            cell(t.request_id.as_deref().unwrap_or("?"))
        );
        if t.interceptions.is_empty() {
            let _ = writeln!(o, "No duplicate of this order was stopped.\n");
        } else {
            let _ = writeln!(o, "Duplicates stopped:\n");
            for i in &t.interceptions {
                let _ = writeln!(
                    o,
                    "- {} by **{}** ({}): {}",
                    i.at_ms.map_or("?".into(), format_ms),
                    i.layer,
                    i.outcome,
                    cell(&i.detail)
                );
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(
            o,
            "| time | layer | source | what | stopped by |\n|---|---|---|---|---|"
        );
        for e in &t.entries {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                e.at_ms.map_or("now".into(), format_ms),
                e.layer,
                cell(&e.source),
                cell(&e.summary),
                e.stopped_by.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::console::read::sources::EnvironmentInfo;
    use crate::console::report::Leak;

    #[test]
    fn the_leaks_table_header_names_its_column_and_no_placeholder() {
        let r = IncidentReport {
            schema: "idemguard.report/v1",
            environment: EnvironmentInfo {
                name: "local".into(),
                color: "green".into(),
                production: false,
                context: None,
            },
            generated_at: "2026-11-29T23:07:42.123Z".into(),
            id: Some("APP:ORDER:20261129:abcdefgh".into()),
            since_ms: 0,
            until_ms: 0,
            orders_in_window: 2,
            timelines: vec![],
            leaks: vec![Leak {
                table: "order_record".into(),
                by: "req_id".into(),
                key: "APP:ORDER:20261129:abcdefgh".into(),
                rows: 2,
                first: "A".into(),
                last: "B".into(),
            }],
            contradictions: vec![],
            operator_actions: vec![],
            dlq_messages: vec![],
            rates: vec![],
            rate_minutes: Default::default(),
            generated_ms: 0,
            errors: vec![],
        };
        let md = markdown(&r);
        assert!(
            md.contains("| table | rows | shared column = key | first | last |"),
            "{md}"
        );
        assert!(
            md.contains("| order_record | 2 | req_id = APP:ORDER:20261129:abcdefgh | A | B |"),
            "{md}"
        );
        assert!(
            !md.contains('{'),
            "a format placeholder was printed literally: {md}"
        );
    }
}
