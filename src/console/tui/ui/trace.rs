//! The Trace view: one ID's summary, its timeline across every layer, the selected entry.

use super::*;
use crate::console::read::timeline::{Timeline, TimelineEntry};

/// The summary, the timeline and the selected entry, top to bottom.
pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let Some(t) = &app.stores.trace_view else {
        draw_how_to(f, area);
        return;
    };
    let [summary, table, detail] = Layout::vertical([
        Constraint::Length(
            if ids_on_two_lines(t, area.width) {
                7
            } else {
                6
            } + u16::from(!t.warnings.is_empty())
                + u16::from(t.partial),
        ),
        Constraint::Fill(1),
        // A short terminal gives the timeline the rows: the selected entry's first lines only.
        Constraint::Length(if area.height < 30 { 4 } else { 7 }),
    ])
    .areas(area);

    let lines = summary_lines(t, area.width);
    let mut block = titled(" Trace ".into());
    if let Some(note) = trace_read_note(app, area.width < 110) {
        block = block.title_bottom(Line::from(Span::styled(note, DIM)));
    }
    f.render_widget(Paragraph::new(lines).block(block), summary);

    let rows = app.timeline_rows();
    let selected = app.selected(View::Trace).min(rows.len().saturating_sub(1));
    let title = format!(
        " Timeline, oldest first [{}] ",
        filter_note(app, View::Trace, rows.len(), t.entries.len())
    );
    let source_width = source_width(area.width);
    windowed_table(
        f,
        table,
        titled(title),
        &TABLE,
        rows.len(),
        Some((selected, selected_style(app))),
        |i| {
            let (entry, cells) = &rows[i];
            let e = &t.entries[*entry];
            let style = if e.stopped_by.is_some() {
                Style::new().fg(Color::Yellow)
            } else {
                match e.layer {
                    "kafka" => Style::new().fg(Color::Magenta),
                    "lock" => Style::new().fg(Color::Blue),
                    "sink" => Style::new().fg(Color::Green),
                    _ => Style::new(),
                }
            };
            let mut cells = cells.clone();
            if let Some(source) = cells.get_mut(columns::TIMELINE_ID) {
                *source = short_source(source, t, source_width);
            }
            (cells, style)
        },
    );

    let selected_entry = rows.get(selected).map(|(i, _)| &t.entries[*i]);
    let detail_lines = entry_lines(selected_entry);
    f.render_widget(
        Paragraph::new(detail_lines)
            .wrap(Wrap { trim: true })
            .block(titled(" Selected ".into())),
        detail,
    );
}

/// The timeline's columns: TIME and WHAT answer (when, and what happened), then which layer
/// STOPPED BY a duplicate; the SOURCE (shortened: the Selected panel names it whole) and the LAYER
/// (the row's colour says it too) give way first.
static TABLE: TableSpec = TableSpec {
    cols: columns::TIMELINE,
    keep: columns::TIMELINE_ID,
    //          TIME LAYER SOURCE WHAT STOPPED BY
    rank: Some(&[0, 3, 2, 0, 1]),
};

/// How much of a SOURCE cell a terminal `width` wide shows: what is left beyond 80 columns (16
/// at least), so that WHAT keeps about half of a 100-column row; a key whole from 140.
fn source_width(width: u16) -> usize {
    width.saturating_sub(80).max(16) as usize
}

/// A SOURCE cell in at most `max` characters: the IDs the summary above names already (the
/// orderNo in a lock's key, the requestId in a fast-path key) are written `…`, then what is still
/// too long keeps its end, which tells the rows apart (a Kafka copy's `p0@17`).
fn short_source(cell: &str, t: &Timeline, max: usize) -> String {
    if cell.chars().count() <= max {
        return cell.to_string();
    }
    let ids = t.order_no.iter().chain(&t.request_id).chain(&t.event_ids);
    let cell = ids.fold(cell.to_string(), |cell, id| cell.replace(&shown(id), "…"));
    let n = cell.chars().count();
    if n <= max {
        return cell;
    }
    let kept: String = cell.chars().skip(n + 1 - max).collect();
    format!("…{kept}")
}

/// Before any trace: what the view is for and how to ask.
fn draw_how_to(f: &mut Frame<'_>, area: Rect) {
    let text = vec![
        Line::from(""),
        Line::from(Span::styled("Trace one orderNo, requestId or eventId across every layer", Style::new().add_modifier(Modifier::BOLD))),
        Line::from(""),
        Line::from("  :trace ID      e.g. :trace APP:ORDER:20261129:0193a1c2-…   (or press Enter on a lock or a stuck record)"),
        Line::from(""),
        Line::from(Span::styled("  The timeline shows the idempotency record, the Redis lock and fast-path key, the order,", DIM)),
        Line::from(Span::styled("  stock and payment rows, every Kafka copy of the payment event, the consumer's decisions,", DIM)),
        Line::from(Span::styled("  each sink's row — and for every duplicate, the layer that stopped it.", DIM)),
    ];
    f.render_widget(Paragraph::new(text).block(titled(" Trace ".into())), area);
}

/// The summary above the timeline: the ID asked, the orderNo and requestId (one a line when
/// narrow), the duplicates stopped by layer and outcome, the payment events, the first warning.
fn summary_lines(t: &Timeline, width: u16) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if let Some(partial) = t.partial_line() {
        // A source that did not answer comes first: nothing below is the whole answer.
        let style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        lines.push(Line::from(Span::styled(partial, style)));
    }
    lines.push(Line::from(vec![
        Span::styled(format!("{} ", t.kind.replace('_', " ")), DIM),
        Span::styled(shown(&t.query), Style::new().add_modifier(Modifier::BOLD)),
        if t.found {
            Span::raw("")
        } else {
            Span::styled(
                format!("  so far: {}", t.not_found_line()),
                Style::new().fg(Color::Yellow),
            )
        },
    ]));
    let order_no = shown(t.order_no.as_deref().unwrap_or("?"));
    let request_id = shown(t.request_id.as_deref().unwrap_or("?"));
    if ids_on_two_lines(t, width) {
        // Narrow: one ID a line, so both stay whole.
        lines.push(Line::from(vec![
            Span::styled("orderNo   ", DIM),
            Span::raw(order_no),
        ]));
        lines.push(Line::from(vec![
            Span::styled("requestId ", DIM),
            Span::raw(request_id),
        ]));
    } else {
        lines.push(Line::from(vec![
            Span::styled("orderNo ", DIM),
            Span::raw(order_no),
            Span::styled(" · requestId ", DIM),
            Span::raw(request_id),
        ]));
    }
    let stopped = t.stopped_by_layer_and_outcome();
    let stopped_text = if stopped.is_empty() {
        "none seen".to_string()
    } else {
        stopped
            .iter()
            .map(|((l, o), n)| format!("{l} {o} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    lines.push(Line::from(vec![
        Span::styled("duplicates stopped: ", DIM),
        Span::styled(
            format!("{} ", t.stopped_count()),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        Span::raw(stopped_text),
    ]));
    let events: Vec<String> = t
        .events
        .iter()
        .map(|e| {
            format!(
                "{} ×{} in kafka → processed {} · points {} · notifications {}",
                shown(&e.event_id),
                e.kafka_copies,
                e.processed_rows,
                e.points_rows,
                e.notification_rows
            )
        })
        .collect();
    lines.push(Line::from(vec![
        Span::styled("payment events: ", DIM),
        Span::raw(if events.is_empty() {
            "none".into()
        } else {
            events.join(" | ")
        }),
    ]));
    if let Some(first) = t.warnings.first() {
        // What the trace found wrong with what it relied on: before the timeline, never hidden.
        let more = match t.warnings.len() {
            1 => String::new(),
            n => format!(" (+{} more: `idemguard trace` lists them)", n - 1),
        };
        lines.push(Line::from(Span::styled(
            format!("WARNING: {first}{more}"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )));
    }
    lines
}

/// The selected entry, every field.
fn entry_lines(entry: Option<&TimelineEntry>) -> Vec<Line<'static>> {
    match entry {
        Some(e) => {
            let mut v = vec![Line::from(vec![
                Span::styled(format!("{} ", shown(&e.source)), HEADER),
                Span::raw(shown(&e.summary)),
            ])];
            if let Some(obj) = e.fields.as_object() {
                let pairs: Vec<String> = obj
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| format!("{}={}", shown(k), field_text(k, v)))
                    .collect();
                v.push(Line::from(Span::styled(pairs.join("  "), DIM)));
            }
            v
        }
        None => vec![Line::from(Span::styled("no entry selected", DIM))],
    }
}

/// A field of the selected entry as people read it: a time column (`…_at`, `…_until`) holding
/// epoch milliseconds as a UTC time, anything else as it is (escaped).
fn field_text(key: &str, value: &serde_json::Value) -> String {
    let is_time = key.ends_with("_at") || key.ends_with("_until");
    match value.as_i64() {
        Some(ms) if is_time && (1_000_000_000_000..10_000_000_000_000).contains(&ms) => {
            crate::contracts::format_ms(ms)
        }
        _ => value.as_str().map_or_else(|| value.to_string(), shown),
    }
}

/// The trace's status line (the summary's bottom border): while the topics' windows of the
/// trace are read it says so, then what the read cost per topic — messages scanned, windows,
/// partitions read of all — so a slow trace says why; `compact` fits it in 80 columns. `None`
/// before any read was asked.
fn trace_read_note(app: &App, compact: bool) -> Option<String> {
    let (ids, cost) = app.stores.trace_read.as_ref()?;
    if *ids != app.resolved_ids() {
        return None;
    }
    let Some(cost) = cost else {
        let n = app.stores.trace_read_scanned;
        return Some(if compact {
            format!(" reading this trace's windows… {n} msgs ")
        } else {
            format!(" reading the topics' windows of this trace… {n} messages scanned ")
        });
    };
    let trace_topic = app.stores.trace_topic.as_ref().map(|p| p.topic.as_str());
    let topics: Vec<String> = cost
        .topics
        .iter()
        .map(|t| {
            let name = if Some(t.topic.as_str()) == trace_topic {
                "trace"
            } else {
                "payments"
            };
            let (n, w) = (t.messages_scanned, t.windows.len());
            let (p, total) = (t.partitions_read.len(), t.partitions_total);
            if compact {
                format!("{name} {n} msgs/{w} win/{p} of {total} part")
            } else {
                let s = if w == 1 { "" } else { "s" };
                format!("{name} {n} msgs in {w} window{s}, {p}/{total} partitions")
            }
        })
        .collect();
    let answered = app
        .stores
        .trace_view
        .as_ref()
        .is_none_or(|t| t.database_answered());
    let unknown = match (cost.unknown_id_window.is_some(), compact) {
        (false, _) => "",
        (true, true) => " (unknown ID: 24 h)",
        (true, false) if !answered => " (the database did not answer: last 24 h only)",
        (true, false) if cost.rows_without_time => " (no row carries a time: last 24 h only)",
        (true, false) => " (unknown to the database: last 24 h only)",
    };
    Some(format!(" read: {}{unknown} ", topics.join(" · ")))
}

/// The orderNo and the requestId do not fit on one line of the summary (inside its border).
fn ids_on_two_lines(t: &Timeline, width: u16) -> bool {
    let len = |s: &Option<String>| s.as_ref().map_or(1, |s| s.chars().count());
    "orderNo ".len() + len(&t.order_no) + " · requestId ".len() + len(&t.request_id) + 2
        > width as usize
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use crate::config::Config;
    use crate::console::tui::app::App;
    use crate::console::tui::backend::Update;
    use crate::contracts::TraceTarget;

    fn screen(app: &mut App) -> String {
        app.ui.size = (140, 40);
        app.refresh_views();
        let mut t = Terminal::new(TestBackend::new(140, 40)).unwrap();
        t.draw(|f| crate::console::tui::ui::draw(f, app)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..40)
            .map(|y| (0..140).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
            .collect()
    }

    /// A time column's epoch milliseconds are shown as a UTC time; other numbers as they are.
    #[test]
    fn times_in_the_selected_entry_are_times() {
        let ms = serde_json::json!(1_796_667_227_042_i64);
        assert_eq!(
            super::field_text("created_at", &ms),
            "2026-12-07T18:13:47.042Z"
        );
        assert_eq!(
            super::field_text("lease_until", &ms),
            "2026-12-07T18:13:47.042Z"
        );
        assert_eq!(super::field_text("fence", &ms), "1796667227042");
        assert_eq!(
            super::field_text("replay_count", &serde_json::json!(3)),
            "3"
        );
    }

    /// The database's trace read failed: the view says PARTIAL first and never calls the ID
    /// absent from the database.
    #[test]
    fn a_trace_whose_database_did_not_answer_is_partial() {
        let mut app = App::new(&Config::defaults(), None);
        app.run_command("trace 20261129230742123abcdef012345");
        let target = TraceTarget::classify("20261129230742123abcdef012345");
        let error = "database refused the connection".to_string();
        app.apply(Update::TraceRows {
            target,
            result: Err(error),
        });
        let text = screen(&mut app);
        assert!(
            text.contains("PARTIAL: the database did not answer"),
            "{text}"
        );
        assert!(!text.contains("no row, key, message"), "{text}");
        assert!(
            text.contains("the database did not answer, so it may be there"),
            "{text}"
        );
    }
}
