//! The DLQ view: the dead-letter topic's messages, why each went there, and their redrive; the
//! selected one's consumer that dead-lettered it and its whole reason below the table (at 100
//! columns the table has no room for them).

use super::*;

pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table, detail] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        // A short terminal gives the table the rows: the selected message's first lines only.
        Constraint::Length(if area.height < 30 { 5 } else { 6 }),
    ])
    .areas(area);
    let listing = match &app.stores.dlq {
        None => {
            let text = " reading the DLQ (its last 7 days) …";
            return f.render_widget(Paragraph::new(Span::styled(text, DIM)), summary);
        }
        Some(Err(e)) => {
            let text = format!(" {}", shown(e));
            let style = Style::new().fg(Color::Red);
            return f.render_widget(Paragraph::new(Span::styled(text, style)), summary);
        }
        Some(Ok(l)) => l,
    };
    let rows = app.dlq_rows();
    let more = if listing.truncated {
        " (more: idemguard dlq --since)"
    } else {
        ""
    };
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                format!(
                    " {} message(s) in {}",
                    listing.messages.len(),
                    shown(&listing.topic)
                ),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                format!(
                    " · last 7 days, newest first{more} · NOW: what the consumer would do today"
                ),
                DIM,
            ),
        ])),
        summary,
    );
    let title = format!(
        " DLQ [{}{}] ",
        filter_note(app, View::Dlq, rows.len(), listing.messages.len()),
        tag_note(app, View::Dlq)
    );
    let now = app.now_ms();
    let table = results_panel(f, app, View::Dlq, table);
    windowed_table(
        f,
        table,
        titled(title),
        columns::DLQ,
        columns::DLQ_ID,
        rows.len(),
        Some((app.selected(View::Dlq), selected_style(app))),
        |i| {
            use crate::console::read::dlq::Verdict;
            let m = rows[i];
            let style = match m.verdict {
                Verdict::WouldApply => Style::new().fg(Color::Green),
                Verdict::StillPoison { .. } => Style::new().fg(Color::Red),
                _ => Style::new().fg(Color::Yellow),
            };
            let mut cells = columns::dlq_cells(m, now);
            mark(app, View::Dlq, &m.target, &mut cells);
            (cells, style)
        },
    );
    let lines = match app.selected_dlq() {
        None => vec![Line::from(Span::styled(" no message selected", DIM))],
        Some(m) => vec![
            Line::from(vec![
                Span::styled(" by     ", DIM),
                Span::raw(columns::dlq_by(m, now)),
            ]),
            Line::from(vec![
                Span::styled(" reason ", DIM),
                // Cut: a reason anyone writing to the DLQ could make 100 KB long.
                Span::raw(crate::console::format::short(&m.reason, REASON_SHOWN)),
            ]),
        ],
    };
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(titled(" Selected ".into())),
        detail,
    );
}

/// At most this many characters of the selected message's reason: more than its pane holds.
const REASON_SHOWN: usize = 1024;
