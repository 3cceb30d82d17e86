//! The Audit view: the operator actions recorded, newest first.

use super::*;

pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    match &app.actions.audit {
        None => f.render_widget(
            Paragraph::new(Span::styled(" reading ops_audit …", DIM)),
            summary,
        ),
        Some(Err(e)) => f.render_widget(
            Paragraph::new(Span::styled(
                format!(" {}", shown(&e.to_string())),
                Style::new().fg(Color::Red),
            )),
            summary,
        ),
        Some(Ok(all)) => {
            let rows = app.audit_rows();
            f.render_widget(
                Paragraph::new(Line::from(vec![
                    Span::styled(
                        format!(" {} operator action(s)", all.len()),
                        Style::new().add_modifier(Modifier::BOLD),
                    ),
                    Span::styled(
                        " · newest first · every attempt, refused or done, is here",
                        DIM,
                    ),
                ])),
                summary,
            );
            let title = format!(
                " Audit (ops_audit) [{}] ",
                filter_note(app, View::Audit, rows.len(), all.len())
            );
            let (table, panel) = with_hidden_panel(table);
            let shown = windowed_table(
                f,
                table,
                titled(title),
                &TABLE,
                rows.len(),
                Some((app.selected(View::Audit), selected_style(app))),
                |i| {
                    let style = match rows[i].outcome.as_str() {
                        "done" => Style::new().fg(Color::Green),
                        "error" | "attempt" => Style::new().fg(Color::Red),
                        _ => Style::new().fg(Color::Yellow),
                    };
                    (columns::audit_cells(rows[i]), style)
                },
            );
            if let Some(panel) = panel {
                let selected = rows.get(app.selected(View::Audit));
                let cells = selected.map(|r| columns::audit_cells(r));
                draw_hidden_panel(f, panel, &TABLE, &shown, cells);
            }
        }
    }
}

/// The audit's columns: its target identifies what was acted on; when, which ACTION and its
/// OUTCOME answer what was done; the DETAIL (what it found) next, then who and why; the
/// environment gives way first (the header names it).
static TABLE: TableSpec = TableSpec {
    cols: columns::AUDIT,
    keep: columns::AUDIT_ID,
    //          TIME OPERATOR ENV ACTION TARGET OUTCOME REASON DETAIL
    rank: Some(&[0, 2, 4, 0, 0, 0, 3, 1]),
};
