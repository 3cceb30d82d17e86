//! The Overview view: what is wrong now across the three layers, one finding a line.

use super::*;
use crate::console::read::overview::Finding;

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
    // Below 160 columns a finding's text may be cut: the Selected panel shows it whole.
    let (table, panel) = with_hidden_panel(table);
    let shown = windowed_table(
        f,
        table,
        titled(" Overview — what is wrong now, across the three layers ".into()),
        &TABLE,
        findings.len(),
        Some((app.selected(View::Overview), selected_style(app))),
        |i| finding_row(&findings[i]),
    );
    if let Some(panel) = panel {
        let selected = findings
            .get(app.selected(View::Overview))
            .map(|l| finding_row(l).0);
        draw_hidden_panel(f, panel, &TABLE, &shown, selected);
    }
}

/// The Overview's columns, cut left to right: the layer and state are short, the text takes the
/// rest.
static TABLE: TableSpec = TableSpec {
    cols: columns::OVERVIEW,
    keep: 0,
    rank: None,
};

/// A finding's cells and colour: BAD red, WATCH yellow; an item under its finding has no layer
/// or state of its own.
fn finding_row(l: &Finding) -> (Vec<String>, Style) {
    let (state, style) = match l.severity {
        Severity::Bad => (
            "BAD",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        Severity::Warn => ("WATCH", Style::new().fg(Color::Yellow)),
        Severity::Unknown => ("?", Style::new().fg(Color::Magenta)),
        Severity::Ok => ("ok", Style::new().fg(Color::Green)),
    };
    let cells = if l.item {
        vec![String::new(), "  ·".to_string(), shown(&l.text)]
    } else {
        vec![l.layer.to_string(), state.to_string(), shown(&l.text)]
    };
    (cells, style)
}
