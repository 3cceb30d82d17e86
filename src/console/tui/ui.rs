//! Drawing: reads the [`App`] and paints one frame. No I/O, no state changes — the same function
//! draws into a real terminal and into ratatui's `TestBackend` for the snapshot tests.
//!
//! Tables draw only the rows on screen (the rest are never turned into cells), so a 10,000-row
//! view costs the same per frame as a 50-row one.

use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, BorderType, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap,
};
use ratatui::Frame;

use crate::contracts::now_ms;

use crate::console::columns::{self, Column};
use crate::console::format::age;
use crate::console::tui::app::{App, Health, Input, Level};
use crate::console::tui::backend::BackendId;
use crate::console::tui::keymap::{self, View, KEYMAP};

pub fn env_color(name: &str) -> Color {
    match name {
        "green" => Color::Green,
        "yellow" => Color::Yellow,
        "red" => Color::Red,
        "blue" => Color::Blue,
        "magenta" => Color::Magenta,
        "cyan" => Color::Cyan,
        _ => Color::White,
    }
}

const DIM: Style = Style::new().fg(Color::DarkGray);
const HEADER: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
const SELECTED: Style = Style::new()
    .bg(Color::DarkGray)
    .add_modifier(Modifier::BOLD);

pub fn draw(f: &mut Frame<'_>, app: &App) {
    let down: Vec<BackendId> = BackendId::ALL
        .iter()
        .copied()
        .filter(|b| matches!(app.backends[b].health, Health::Down(_)))
        .collect();
    let [header, status, alerts, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(down.len() as u16),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    draw_header(f, app, header);
    draw_backends(f, app, status);
    draw_alerts(f, app, &down, alerts);
    match app.view {
        View::Trace => draw_trace(f, app, body),
        View::Locks => draw_locks(f, app, body),
        View::Rates => draw_rates(f, app, body),
        View::Stuck => draw_stuck(f, app, body),
        View::Audit => draw_audit(f, app, body),
    }
    draw_footer(f, app, footer);
    if app.show_help {
        draw_help(f, f.area(), app.log_file.as_deref());
    }
    if let Some(c) = &app.confirm {
        draw_confirm(f, app, c, f.area());
    }
}

fn draw_header(f: &mut Frame<'_>, app: &App, area: Rect) {
    let color = env_color(&app.env.color);
    let mut spans = vec![Span::styled(
        format!(" {} ", app.env.name.to_uppercase()),
        Style::new()
            .bg(color)
            .fg(Color::Black)
            .add_modifier(Modifier::BOLD),
    )];
    if app.env.production {
        spans.push(Span::styled(
            " PRODUCTION ",
            Style::new()
                .bg(Color::Red)
                .fg(Color::White)
                .add_modifier(Modifier::BOLD),
        ));
    }
    spans.push(Span::styled(
        " idemguard console ",
        Style::new().add_modifier(Modifier::BOLD),
    ));
    for (i, v) in View::ALL.iter().enumerate() {
        let style = if *v == app.view {
            Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD)
        } else {
            DIM
        };
        spans.push(Span::styled(format!(" {}:{} ", i + 1, v.title()), style));
    }
    spans.push(Span::raw("  "));
    if app.actions_enabled {
        spans.push(Span::styled(
            " ACTIONS ENABLED ",
            Style::new()
                .bg(Color::Yellow)
                .fg(Color::Black)
                .add_modifier(Modifier::BOLD),
        ));
    } else {
        spans.push(Span::styled("read-only", Style::new().fg(Color::Green)));
    }
    spans.push(Span::styled(
        format!(" · refresh {}", humantime::format_duration(app.refresh)),
        DIM,
    ));
    if app.paused {
        spans.push(Span::raw(" "));
        spans.push(Span::styled(
            " PAUSED ",
            Style::new()
                .bg(Color::Yellow)
                .fg(Color::Black)
                .add_modifier(Modifier::BOLD),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_backends(f: &mut Frame<'_>, app: &App, area: Rect) {
    let now = now_ms();
    let mut spans = Vec::new();
    for b in BackendId::ALL {
        let s = &app.backends[&b];
        let (dot, style, word) = match &s.health {
            Health::Up => ("●", Style::new().fg(Color::Green), "ok".to_string()),
            Health::Connecting => (
                "○",
                Style::new().fg(Color::Yellow),
                "connecting".to_string(),
            ),
            Health::Degraded(_) => ("◐", Style::new().fg(Color::Yellow), "degraded".to_string()),
            Health::Down(_) => (
                "●",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                "DOWN".to_string(),
            ),
        };
        spans.push(Span::styled(format!(" {dot} "), style));
        spans.push(Span::raw(format!("{} ", b.name())));
        spans.push(Span::styled(word, style));
        if let (Health::Down(_), Some(t)) = (&s.health, s.last_ok_ms) {
            spans.push(Span::styled(format!(" (data {} old)", age(now - t)), DIM));
        }
        spans.push(Span::raw("  "));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_alerts(f: &mut Frame<'_>, app: &App, down: &[BackendId], area: Rect) {
    let now = now_ms();
    let lines: Vec<Line<'_>> = down
        .iter()
        .map(|b| {
            let s = &app.backends[b];
            let err = if let Health::Down(e) = &s.health {
                e.as_str()
            } else {
                ""
            };
            let last = s.last_ok_ms.map_or("no data yet".to_string(), |t| {
                format!("last good data {} ago", age(now - t))
            });
            Line::from(vec![
                Span::styled(
                    format!(" {} DOWN ", b.name()),
                    Style::new()
                        .bg(Color::Red)
                        .fg(Color::White)
                        .add_modifier(Modifier::BOLD),
                ),
                // An error that says what to do first (a database without the schema: "run
                // `idemguard migrate`: the database … has no schema") is shown first — it names
                // the database itself — so a narrow terminal cuts the rest, not the remedy.
                Span::styled(
                    if err.starts_with("run `") {
                        format!(" {err} · {last}")
                    } else {
                        format!(" {last} · {} · {}", app.backend_targets[b], err)
                    },
                    Style::new().fg(Color::Red),
                ),
            ])
        })
        .collect();
    f.render_widget(Paragraph::new(lines), area);
}

fn titled(title: String) -> Block<'static> {
    Block::new()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .title(Span::styled(title, HEADER))
        .border_style(DIM)
}

/// A table of which only the rows on screen are built: `cells(i)` is called for those alone.
fn windowed_table(
    f: &mut Frame<'_>,
    area: Rect,
    block: Block<'_>,
    cols: &[Column],
    total: usize,
    selected: Option<usize>,
    mut cells: impl FnMut(usize) -> (Vec<String>, Style),
) {
    let inner_height = area.height.saturating_sub(3) as usize; // borders + header
    let highlight = selected.is_some() && total > 0;
    let selected = selected.unwrap_or(0).min(total.saturating_sub(1));
    let offset = if inner_height == 0 || selected < inner_height {
        0
    } else {
        selected + 1 - inner_height
    };
    let end = (offset + inner_height).min(total);
    let rows: Vec<Row<'_>> = (offset..end)
        .map(|i| {
            let (c, style) = cells(i);
            Row::new(c.into_iter().map(Cell::from)).style(style)
        })
        .collect();
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|c| {
            if c.width == 0 {
                Constraint::Fill(1)
            } else {
                Constraint::Length(c.width)
            }
        })
        .collect();
    let header = Row::new(cols.iter().map(|c| Cell::from(c.header))).style(HEADER);
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(SELECTED)
        .column_spacing(1);
    let mut state = TableState::default().with_selected(highlight.then(|| selected - offset));
    f.render_stateful_widget(table, area, &mut state);
}

fn filter_note(app: &App, view: View, shown: usize, total: usize) -> String {
    let filter = app.filter(view);
    if filter.is_empty() {
        format!("{total}")
    } else {
        format!("{shown} of {total} · filter /{}", filter.typed())
    }
}

// ---------------------------------------------------------------------------------------------
// Trace
// ---------------------------------------------------------------------------------------------

fn draw_trace(f: &mut Frame<'_>, app: &App, area: Rect) {
    let Some(t) = &app.trace_view else {
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
        return;
    };
    let [summary, table, detail] = Layout::vertical([
        Constraint::Length(6),
        Constraint::Fill(1),
        Constraint::Length(7),
    ])
    .areas(area);

    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} ", t.kind.replace('_', " ")), DIM),
        Span::styled(t.query.clone(), Style::new().add_modifier(Modifier::BOLD)),
        if t.found {
            Span::raw("")
        } else {
            Span::styled(
                "  unknown so far: no row, key, message or event names it",
                Style::new().fg(Color::Yellow),
            )
        },
    ])];
    lines.push(Line::from(vec![
        Span::styled("orderNo ", DIM),
        Span::raw(t.order_no.clone().unwrap_or_else(|| "?".into())),
        Span::styled(" · requestId ", DIM),
        Span::raw(t.request_id.clone().unwrap_or_else(|| "?".into())),
    ]));
    let mut stopped: std::collections::BTreeMap<(String, String), usize> =
        std::collections::BTreeMap::new();
    for i in &t.interceptions {
        *stopped
            .entry((i.layer.clone(), i.outcome.clone()))
            .or_default() += 1;
    }
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
                e.event_id, e.kafka_copies, e.processed_rows, e.points_rows, e.notification_rows
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
    f.render_widget(
        Paragraph::new(lines).block(titled(" Trace ".into())),
        summary,
    );

    let rows = app.timeline_rows();
    let selected = app.selected(View::Trace).min(rows.len().saturating_sub(1));
    let title = format!(
        " Timeline, oldest first [{}] ",
        filter_note(app, View::Trace, rows.len(), t.entries.len())
    );
    windowed_table(
        f,
        table,
        titled(title),
        columns::TIMELINE,
        rows.len(),
        Some(selected),
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
            (cells.clone(), style)
        },
    );

    // The selected entry, every field.
    let detail_lines: Vec<Line<'_>> = match rows.get(selected).map(|(i, _)| &t.entries[*i]) {
        Some(e) => {
            let mut v = vec![Line::from(vec![
                Span::styled(format!("{} ", e.source), HEADER),
                Span::raw(e.summary.clone()),
            ])];
            if let Some(obj) = e.fields.as_object() {
                let pairs: Vec<String> = obj
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| {
                        format!(
                            "{k}={}",
                            v.as_str().map_or_else(|| v.to_string(), str::to_string)
                        )
                    })
                    .collect();
                v.push(Line::from(Span::styled(pairs.join("  "), DIM)));
            }
            v
        }
        None => vec![Line::from(Span::styled("no entry selected", DIM))],
    };
    f.render_widget(
        Paragraph::new(detail_lines)
            .wrap(Wrap { trim: true })
            .block(titled(" Selected ".into())),
        detail,
    );
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

fn draw_locks(f: &mut Frame<'_>, app: &App, area: Rect) {
    let now = app.now_ms();
    let [summary, table] =
        Layout::vertical([Constraint::Length(2), Constraint::Fill(1)]).areas(area);
    let Some(scan) = &app.locks else {
        f.render_widget(
            Paragraph::new(Span::styled(" scanning lock:* …", DIM)),
            summary,
        );
        return;
    };
    let count = |flag: crate::lock::LockFlag| {
        scan.locks
            .iter()
            .filter(|l| l.flags.contains(&flag))
            .count()
    };
    let nodes: Vec<Span<'_>> = scan
        .nodes
        .iter()
        .flat_map(|n| {
            let style = if n.ok {
                Style::new().fg(Color::Green)
            } else {
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
            };
            [
                Span::styled(
                    format!(
                        " {} {}",
                        n.node,
                        if n.ok {
                            format!("{} keys", n.keys)
                        } else {
                            "DOWN".into()
                        }
                    ),
                    style,
                ),
                Span::raw(" "),
            ]
        })
        .collect();
    let line1 = Line::from(vec![
        Span::styled(
            format!(" {} locks", scan.locks.len()),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(" · "),
        Span::styled(
            format!("{} no TTL", count(crate::lock::LockFlag::NoTtl)),
            Style::new().fg(Color::Yellow),
        ),
        Span::raw(" · "),
        Span::styled(
            format!("{} dead owner", count(crate::lock::LockFlag::DeadOwner)),
            Style::new().fg(Color::Red),
        ),
        Span::raw(" · "),
        Span::styled(
            format!("{} no quorum", count(crate::lock::LockFlag::NoQuorum)),
            Style::new().fg(Color::Red),
        ),
        Span::styled(
            format!(
                " · SCAN of {} node(s) took {:.0}ms",
                scan.nodes.len(),
                scan.scan_ms
            ),
            DIM,
        ),
    ]);
    f.render_widget(Paragraph::new(vec![line1, Line::from(nodes)]), summary);
    let rows = app.filtered.get(&View::Locks).cloned().unwrap_or_default();
    let title = format!(
        " Locks [{}{}] ",
        filter_note(app, View::Locks, rows.len(), scan.locks.len()),
        tag_note(app, View::Locks)
    );
    let table = results_panel(f, app, table);
    windowed_table(
        f,
        table,
        titled(title),
        columns::LOCKS,
        rows.len(),
        Some(app.selected(View::Locks)),
        |i| {
            let l = &scan.locks[rows[i]];
            let (mut cells, style) = lock_row(l, now);
            mark(app, View::Locks, &l.key, &mut cells);
            (cells, style)
        },
    );
}

fn lock_row(l: &crate::lock::LockView, now: i64) -> (Vec<String>, Style) {
    let style = if l.flags.iter().any(|f| {
        matches!(
            f,
            crate::lock::LockFlag::DeadOwner | crate::lock::LockFlag::NoQuorum
        )
    }) {
        Style::new().fg(Color::Red)
    } else if !l.flags.is_empty() {
        Style::new().fg(Color::Yellow)
    } else {
        Style::new()
    };
    (columns::lock_cells(l, now), style)
}

/// A tagged row's first cell starts with `*`, a row with an action result with `[outcome]`.
fn mark(app: &App, view: View, id: &str, cells: &mut [String]) {
    if let Some(first) = cells.first_mut() {
        if app.is_tagged(view, id) {
            *first = format!("* {first}");
        }
        if let Some(r) = app.results.get(id) {
            *first = format!("[{}] {first}", r.outcome);
        }
    }
}

fn tag_note(app: &App, view: View) -> String {
    match app.tagged.get(&view).map_or(0, |t| t.len()) {
        0 => String::new(),
        n => format!(" · {n} tagged"),
    }
}

/// The last batch's per-row results under the table (when there is one); returns the table's area.
fn results_panel(f: &mut Frame<'_>, app: &App, area: Rect) -> Rect {
    if app.last_batch.is_empty() {
        return area;
    }
    let lines: Vec<Line<'_>> = app
        .last_batch
        .iter()
        .map(|r| {
            let style = match r.outcome {
                crate::ops::ActionOutcome::Done => Style::new().fg(Color::Green),
                crate::ops::ActionOutcome::Changed | crate::ops::ActionOutcome::Refused => {
                    Style::new().fg(Color::Yellow)
                }
                crate::ops::ActionOutcome::Error => {
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
                }
            };
            Line::from(vec![
                Span::styled(format!(" {:<8}", r.outcome.as_str()), style),
                Span::raw(format!("{} {} — {}", r.action, r.target, r.detail)),
            ])
        })
        .collect();
    let inner = area.width.saturating_sub(2).max(1) as usize;
    let rows: usize = lines.iter().map(|l| l.width().max(1).div_ceil(inner)).sum();
    let h = (rows as u16 + 2).min(area.height / 2).max(3);
    let [table, panel] = Layout::vertical([Constraint::Fill(1), Constraint::Length(h)]).areas(area);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(titled(" Last actions, per row ".into())),
        panel,
    );
    table
}

// ---------------------------------------------------------------------------------------------
// Rates
// ---------------------------------------------------------------------------------------------

fn draw_rates(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table, lag] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(8),
    ])
    .areas(area);
    let rates = app.trace_log.rates(app.now_ms());
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                format!(" {} trace events read", rates.events_seen),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                format!(" · {} payment messages read", app.payments.messages_seen),
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
        ])),
        summary,
    );
    let rows = app.rate_rows();
    let title = format!(
        " Interceptions per minute, last 60 minutes [{}] ",
        filter_note(app, View::Rates, rows.len(), rates.series.len())
    );
    windowed_table(
        f,
        table,
        titled(title),
        columns::RATES,
        rows.len(),
        Some(app.selected(View::Rates)),
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
    match &app.lag {
        Some(Ok(l)) => {
            windowed_table(
                f,
                lag,
                titled(" Consumer lag per partition ".into()),
                columns::LAG,
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
            Paragraph::new(Span::styled(format!(" {e}"), Style::new().fg(Color::Red)))
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

// ---------------------------------------------------------------------------------------------
// Stuck
// ---------------------------------------------------------------------------------------------

fn draw_stuck(f: &mut Frame<'_>, app: &App, area: Rect) {
    let now = app.now_ms();
    let [summary, table] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let Some(stuck) = &app.stuck else {
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
                    humantime::format_duration(app.stuck_threshold)
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
    let rows = app.filtered.get(&View::Stuck).cloned().unwrap_or_default();
    let title = format!(
        " Stuck records [{}{}] ",
        filter_note(app, View::Stuck, rows.len(), stuck.len()),
        tag_note(app, View::Stuck)
    );
    let table = results_panel(f, app, table);
    windowed_table(
        f,
        table,
        titled(title),
        columns::STUCK,
        rows.len(),
        Some(app.selected(View::Stuck)),
        |i| {
            let s = &stuck[rows[i]];
            let style = if s.owner_alive == Some(false) {
                Style::new().fg(Color::Red)
            } else {
                Style::new()
            };
            let mut cells = columns::stuck_cells(s, now);
            mark(app, View::Stuck, &s.request_id, &mut cells);
            (cells, style)
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------------------------

fn draw_audit(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    match &app.audit {
        None => f.render_widget(
            Paragraph::new(Span::styled(" reading ops_audit …", DIM)),
            summary,
        ),
        Some(Err(e)) => f.render_widget(
            Paragraph::new(Span::styled(format!(" {e}"), Style::new().fg(Color::Red))),
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
            windowed_table(
                f,
                table,
                titled(title),
                columns::AUDIT,
                rows.len(),
                Some(app.selected(View::Audit)),
                |i| {
                    let style = match rows[i].outcome.as_str() {
                        "done" => Style::new().fg(Color::Green),
                        "error" | "attempt" => Style::new().fg(Color::Red),
                        _ => Style::new().fg(Color::Yellow),
                    };
                    (columns::audit_cells(rows[i]), style)
                },
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The confirmation popup
// ---------------------------------------------------------------------------------------------

fn draw_confirm(
    f: &mut Frame<'_>,
    app: &App,
    c: &crate::console::tui::confirm::Confirm,
    area: Rect,
) {
    let mut text: Vec<Line<'_>> = c
        .lines
        .iter()
        .map(|l| Line::from(Span::raw(format!(" {l}"))))
        .collect();
    text.push(Line::from(""));
    if app.env.production {
        text.push(Line::from(Span::styled(
            format!(" environment {} is PRODUCTION", app.env.name),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )));
    }
    let prompt = match (&c.phrase, c.needs_reason) {
        (Some(p), true) => {
            format!(" type `{p}`, then the reason (required: forced), then enter · esc cancels")
        }
        (Some(p), false) => {
            format!(" type `{p}` (then an optional reason) and enter · esc cancels")
        }
        (None, true) => " type the reason (required: forced) and enter · esc cancels".to_string(),
        (None, false) => " enter runs it (type an optional reason first) · esc cancels".to_string(),
    };
    text.push(Line::from(Span::styled(
        prompt,
        Style::new().fg(Color::Cyan),
    )));
    text.push(Line::from(vec![
        Span::styled(
            " > ",
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ),
        Span::raw(c.typed.clone()),
        Span::styled("█", Style::new().fg(Color::Cyan)),
    ]));
    if let Some(m) = c.missing() {
        text.push(Line::from(Span::styled(format!(" {m}"), DIM)));
    }
    let width = area.width.saturating_sub(4);
    // Values are shown whole (they are what is compared), wrapped: count the wrapped rows.
    let inner = width.saturating_sub(2).max(1) as usize;
    let rows: usize = text.iter().map(|l| l.width().max(1).div_ceil(inner)).sum();
    let height = (rows as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(titled(c.title.clone()).border_style(Style::new().fg(Color::Yellow))),
        popup,
    );
}

// ---------------------------------------------------------------------------------------------
// Footer and help
// ---------------------------------------------------------------------------------------------

fn draw_footer(f: &mut Frame<'_>, app: &App, area: Rect) {
    let line = match &app.input {
        Input::Command(s) => {
            let word = s.split_whitespace().next().unwrap_or("");
            let hint: Vec<String> = keymap::COMMANDS
                .iter()
                .filter(|c| !word.is_empty() && !s.contains(' ') && c.name.starts_with(word))
                .map(|c| format!(":{} {}", c.name, c.args))
                .collect();
            Line::from(vec![
                Span::styled(
                    ":",
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
                ),
                Span::raw(s.clone()),
                Span::styled("█", Style::new().fg(Color::Cyan)),
                Span::styled(format!("   {}", hint.join("  ")), DIM),
            ])
        }
        Input::Filter(s) => {
            let current = app.filter(app.view);
            let now = if current.is_empty() {
                "none".to_string()
            } else {
                format!("/{}", current.typed())
            };
            Line::from(vec![
                Span::styled("/", Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
                Span::raw(s.clone()),
                Span::styled("█", Style::new().fg(Color::Cyan)),
                Span::styled(format!("   filter of {} (now {now}) · !text inverts · enter applies (empty clears) · esc cancels", app.view.title()), DIM),
            ])
        }
        Input::Normal => match &app.message {
            Some((m, level, _)) => Line::from(Span::styled(
                format!(" {m}"),
                if *level == Level::Error {
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
                } else {
                    Style::new().fg(Color::Green)
                },
            )),
            None => {
                let mut spans = Vec::new();
                let actions: &[(&str, &str)] = match app.view {
                    View::Locks => &[("space", "tag"), ("x", "release")],
                    View::Stuck => &[("space", "tag"), ("f", "finalize")],
                    _ => &[],
                };
                for (k, what) in actions {
                    let style = if app.actions_enabled || *k == "space" {
                        Style::new().fg(Color::Yellow)
                    } else {
                        DIM.add_modifier(Modifier::CROSSED_OUT)
                    };
                    spans.push(Span::styled(format!(" <{k}>"), style));
                    spans.push(Span::styled(
                        format!(" {what}"),
                        if *k == "space" || app.actions_enabled {
                            DIM
                        } else {
                            style
                        },
                    ));
                }
                if !actions.is_empty() && !app.actions_enabled {
                    spans.push(Span::styled(" (read-only: --allow-actions)", DIM));
                }
                for b in KEYMAP.iter().filter(|b| b.footer.is_some()) {
                    let label = b.label.split(' ').next().unwrap_or(b.label);
                    // In Locks and Stuck, space tags: pause is on p there.
                    let (label, what) = if b.action == keymap::UiAction::TagOrPause {
                        if actions.is_empty() {
                            (label, b.footer.unwrap_or_default())
                        } else {
                            ("p", "pause")
                        }
                    } else {
                        (label, b.footer.unwrap_or_default())
                    };
                    spans.push(Span::styled(
                        format!(" <{label}>"),
                        Style::new().fg(Color::Cyan),
                    ));
                    spans.push(Span::styled(format!(" {what}"), DIM));
                }
                Line::from(spans)
            }
        },
    };
    f.render_widget(Paragraph::new(line), area);
}

fn draw_help(f: &mut Frame<'_>, area: Rect, log_file: Option<&str>) {
    let mut lines = keymap::help_lines();
    if let Some(path) = log_file {
        lines.push((String::new(), String::new()));
        lines.push(("LOGS".to_string(), String::new()));
        lines.push(("log file".to_string(), path.to_string()));
    }
    let height = (lines.len() as u16 + 2).min(area.height);
    let width = area.width.saturating_sub(8).min(100);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let text: Vec<Line<'_>> = lines
        .into_iter()
        .map(|(k, v)| {
            if v.is_empty() {
                Line::from(Span::styled(k, HEADER))
            } else {
                Line::from(vec![
                    Span::styled(format!("  {k:<18}"), Style::new().fg(Color::Cyan)),
                    Span::raw(v),
                ])
            }
        })
        .collect();
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(text)
            .block(
                titled(" Help — any key closes ".into()).border_style(Style::new().fg(Color::Cyan)),
            )
            .alignment(Alignment::Left),
        popup,
    );
}
