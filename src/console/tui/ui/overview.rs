//! The Overview view: what is wrong now across the three layers, one finding a line.

use super::*;

/// What is wrong now, one finding a line, worst in red; Enter opens a line's view or trace.
pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let findings = app.findings();
    let count = |s: Severity| findings.iter().filter(|l| l.severity == s).count();
    let (bad, warn) = (count(Severity::Bad), count(Severity::Warn));
    let head = if bad + warn == 0 {
        Span::styled(
            " nothing wrong seen",
            Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        )
    } else {
        Span::styled(
            format!(" {bad} bad · {warn} to watch"),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )
    };
    f.render_widget(
        Paragraph::new(Line::from(vec![
            head,
            Span::styled(" · enter opens a line's view or trace", DIM),
        ])),
        summary,
    );
    windowed_table(
        f,
        table,
        titled(" Overview — what is wrong now, across the three layers ".into()),
        &TableSpec {
            cols: columns::OVERVIEW,
            keep: 0,
            rank: None,
        },
        findings.len(),
        Some((app.selected(View::Overview), selected_style(app))),
        |i| {
            let l = &findings[i];
            let (state, style) = match l.severity {
                Severity::Bad => (
                    "BAD",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                ),
                Severity::Warn => ("WATCH", Style::new().fg(Color::Yellow)),
                Severity::Unknown => ("?", Style::new().fg(Color::Magenta)),
                Severity::Ok => ("ok", Style::new().fg(Color::Green)),
            };
            // An item is drawn under its finding: no layer, no state of its own.
            let cells = if l.item {
                vec![String::new(), "  ·".to_string(), shown(&l.text)]
            } else {
                vec![l.layer.to_string(), state.to_string(), shown(&l.text)]
            };
            (cells, style)
        },
    );
}
