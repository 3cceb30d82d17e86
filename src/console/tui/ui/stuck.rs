//! The Stuck view: PROCESSING records older than the threshold, with their owner's liveness.

use super::*;

pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let now = app.now_ms();
    let [summary, table] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let Some(stuck) = &app.stores.stuck else {
        f.render_widget(
            Paragraph::new(Span::styled(" reading PROCESSING records …", DIM)),
            summary,
        );
        return;
    };
    let dead = stuck
        .iter()
        .filter(|s| s.owner_alive == Some(false))
        .count();
    let ordered = stuck.iter().filter(|s| s.order_exists).count();
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                format!(
                    " {} PROCESSING records older than {}",
                    stuck.len(),
                    humantime::format_duration(app.stores.stuck_threshold)
                ),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(" · "),
            Span::styled(
                format!("{dead} with a dead owner"),
                Style::new().fg(Color::Red),
            ),
            Span::raw(" · "),
            Span::styled(
                format!("{ordered} whose order exists"),
                Style::new().fg(Color::Yellow),
            ),
            Span::styled(" · oldest first", DIM),
        ])),
        summary,
    );
    let rows = app
        .stores
        .filtered
        .get(&View::Stuck)
        .cloned()
        .unwrap_or_default();
    let title = format!(
        " Stuck records [{}{}] ",
        filter_note(app, View::Stuck, rows.len(), stuck.len()),
        tag_note(app, View::Stuck)
    );
    let table = results_panel(f, app, View::Stuck, table);
    windowed_table(
        f,
        table,
        titled(title),
        &TableSpec {
            cols: columns::STUCK,
            keep: columns::STUCK_ID,
            rank: None,
        },
        rows.len(),
        Some((app.selected(View::Stuck), selected_style(app))),
        |i| {
            let s = &stuck[rows[i]];
            let style = if s.owner_alive == Some(false) {
                Style::new().fg(Color::Red)
            } else {
                Style::new()
            };
            let mut cells = columns::stuck_cells(&s.shown(&app.stores.mask), now);
            mark(app, View::Stuck, &s.request_id, &mut cells);
            (cells, style)
        },
    );
}
