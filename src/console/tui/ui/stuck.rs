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
    let (table, panel) = with_hidden_panel(table);
    let shown = windowed_table(
        f,
        table,
        titled(title),
        &TABLE,
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
    if let Some(panel) = panel {
        let selected = app
            .selected_stuck()
            .map(|s| columns::stuck_cells(&s.shown(&app.stores.mask), now));
        draw_hidden_panel(f, panel, &TABLE, &shown, selected);
    }
}

/// The Stuck records' columns: the request ID identifies a record; whether its owner is ALIVE
/// answers what to do with it, then its AGE and its ORDER; its order's STATUS and its LEASE next;
/// the owner's name and the replays give way first.
static TABLE: TableSpec = TableSpec {
    cols: columns::STUCK,
    keep: columns::STUCK_ID,
    //          REQUEST AGE OWNER ALIVE LEASE REPLAYS ORDER STATUS
    rank: Some(&[0, 1, 4, 0, 3, 5, 1, 2]),
};
