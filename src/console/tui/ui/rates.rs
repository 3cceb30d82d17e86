//! The Rates view: interceptions per layer per minute, and the consumer's lag per partition.

use super::*;
use crate::console::read::store::RateTable;

/// The summary, the rates table and the lag table, top to bottom.
pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table, lag] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(8),
    ])
    .areas(area);
    let rates = app.stores.trace_log.rates(app.now_ms());
    let reading = app.stores.rates_reading();
    let line = summary_line(app, &rates, reading.as_deref());
    f.render_widget(Paragraph::new(line), summary);
    let rows = app.rate_rows();
    let title = format!(
        " Interceptions per minute, last 60 minutes{} [{}] ",
        if reading.is_some() {
            " (still reading)"
        } else {
            ""
        },
        filter_note(app, View::Rates, rows.len(), rates.series.len())
    );
    windowed_table(
        f,
        table,
        titled(title),
        &TableSpec {
            cols: columns::RATES,
            keep: 1,
            rank: None,
        },
        rows.len(),
        Some((app.selected(View::Rates), selected_style(app))),
        |i| {
            let busy = rows[i][3] != "0";
            (
                rows[i].clone(),
                if busy {
                    Style::new().fg(Color::Yellow)
                } else {
                    DIM
                },
            )
        },
    );
    draw_lag(f, app, lag);
}

/// What was read, or that the hour is still being read.
fn summary_line(app: &App, rates: &RateTable, reading: Option<&str>) -> Line<'static> {
    match reading {
        // Until the hour is read, no count: a 0 would read as "nothing happened".
        Some(r) => Line::from(Span::styled(
            format!(" {r} — the rates are not complete yet"),
            Style::new().add_modifier(Modifier::BOLD),
        )),
        None => Line::from(vec![
            Span::styled(
                format!(" {} trace events read", rates.events_seen),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                match &rates.undecodable_warning {
                    Some(_) => format!(
                        " · {} NOT trace events (see the Overview)",
                        rates.undecodable
                    ),
                    None => String::new(),
                },
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                format!(
                    " · {} payment messages read",
                    app.stores.payments.messages_seen
                ),
                DIM,
            ),
            Span::styled(
                format!(
                    " · interceptions in the last {} minutes: {}",
                    rates.window_minutes,
                    rates
                        .series
                        .iter()
                        .filter(|s| s.outcome != crate::contracts::Outcome::Dlq)
                        .map(|s| s.total)
                        .sum::<u64>()
                ),
                DIM,
            ),
        ]),
    }
}

/// The lag's columns: a partition is its topic and number; its LAG answers, then the committed
/// offset, then the end it is measured to.
static LAG_TABLE: TableSpec = TableSpec {
    cols: columns::LAG,
    keep: 0,
    //          TOPIC PARTITION COMMITTED END LAG
    rank: Some(&[0, 0, 1, 2, 0]),
};

/// The consumer's lag per partition, or why it is not known.
fn draw_lag(f: &mut Frame<'_>, app: &App, lag: Rect) {
    match &app.stores.lag {
        Some(Ok(l)) => {
            windowed_table(
                f,
                lag,
                titled(" Consumer lag per partition ".into()),
                &LAG_TABLE,
                l.len(),
                None,
                |i| {
                    let style = if l[i].lag > 0 {
                        Style::new().fg(Color::Yellow)
                    } else {
                        Style::new()
                    };
                    (columns::lag_cells(&l[i]), style)
                },
            );
        }
        Some(Err(e)) => f.render_widget(
            Paragraph::new(Span::styled(
                format!(" {}", shown(&e.to_string())),
                Style::new().fg(Color::Red),
            ))
            .wrap(Wrap { trim: true })
            .block(titled(" Consumer lag per partition ".into())),
            lag,
        ),
        None => f.render_widget(
            Paragraph::new(Span::styled(" reading …", DIM))
                .block(titled(" Consumer lag per partition ".into())),
            lag,
        ),
    }
}
