//! The DLQ view: the dead-letter topic's messages, why each went there, and their redrive; the
//! selected one's consumer that dead-lettered it and its whole reason below the table (at 100
//! columns the table has no room for them).

use super::*;

pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table, detail] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        // A short terminal gives the table the rows: the selected message's first lines only; a
        // narrow one moves cells from the table to the panel, and wraps it more.
        Constraint::Length(
            if area.height < 30 { 5 } else { 6 } + if area.width < 160 { 2 } else { 0 },
        ),
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
    let shown = windowed_table(
        f,
        table,
        titled(title),
        &TABLE,
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
        Some(m) => selected_lines(m, &shown, now),
    };
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(titled(" Selected ".into())),
        detail,
    );
}

/// The DLQ's columns: the order identifies a message; what the consumer would do NOW and the
/// REASON answer the view's question, then whether it was REDRIVEN. Who dead-lettered it (the
/// Selected panel says it whole), the source and the event ID give way first.
static TABLE: TableSpec = TableSpec {
    cols: columns::DLQ,
    keep: columns::DLQ_ID,
    //          AGE AT SOURCE ORDER EVENT REDRIVEN NOW BY REASON
    rank: Some(&[4, 3, 6, 0, 5, 2, 0, 7, 1]),
};

/// The selected message: who dead-lettered it, the cells of the columns the width hid, and its
/// reason whole (wrapped, last: it may be long).
fn selected_lines(
    m: &crate::console::read::dlq::DlqMessage,
    shown: &[(usize, u16)],
    now: i64,
) -> Vec<Line<'static>> {
    const BY: usize = 7;
    const REASON: usize = 8;
    let mut lines = vec![Line::from(vec![
        Span::styled(" by     ", DIM),
        Span::raw(columns::dlq_by(m, now)),
    ])];
    let cells = columns::dlq_cells(m, now);
    lines.extend(hidden_cells(&TABLE, shown, &[BY, REASON], &cells));
    lines.push(Line::from(vec![
        Span::styled(" reason ", DIM),
        // Cut: a reason anyone writing to the DLQ could make 100 KB long.
        Span::raw(crate::console::format::short(&m.reason, REASON_SHOWN)),
    ]));
    lines
}

/// At most this many characters of the selected message's reason: more than its pane holds.
const REASON_SHOWN: usize = 1024;
