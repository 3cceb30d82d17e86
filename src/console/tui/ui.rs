//! Drawing: reads the [`App`] and paints one frame. No I/O, no state changes — the same function
//! draws into a real terminal and into ratatui's `TestBackend` for the snapshot tests.
//!
//! Tables draw only the rows on screen (the rest are never turned into cells), so a 10,000-row
//! view costs the same per frame as a 50-row one.
//!
//! Every text another system wrote — IDs, rows, lock keys and values, errors quoting them — is
//! drawn through [`crate::untrusted::escape`] (the table cells in [`columns`], the rest here
//! through `shown`): ratatui drops C0 controls, but not a bidi override or an invisible
//! character, and dropping hides what is there.

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
use crate::console::read::overview::Severity;
use crate::console::tui::app::{ui_state, App, Health, Input, Level};
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
/// The selected row without colours (`NO_COLOR`): a background colour alone would not show.
const SELECTED_NO_COLOR: Style =
    Style::new().add_modifier(Modifier::REVERSED.union(Modifier::BOLD));

/// The selected row's style: its background, or reverse video when there are no colours.
fn selected_style(app: &App) -> Style {
    if app.ui.no_color {
        SELECTED_NO_COLOR
    } else {
        SELECTED
    }
}

/// Text another system wrote, as drawn: [`crate::untrusted::escape`]d.
fn shown(s: &str) -> String {
    crate::untrusted::escape(s).into_owned()
}

pub fn draw(f: &mut Frame<'_>, app: &App) {
    let down: Vec<BackendId> = BackendId::ALL
        .iter()
        .copied()
        .filter(|b| {
            matches!(
                app.stores.backends[b].health,
                Health::Down(_) | Health::Slow(_)
            )
        })
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
    match app.ui.view {
        View::Overview => draw_overview(f, app, body),
        View::Trace => draw_trace(f, app, body),
        View::Locks => draw_locks(f, app, body),
        View::Rates => draw_rates(f, app, body),
        View::Stuck => draw_stuck(f, app, body),
        View::Audit => draw_audit(f, app, body),
        View::Dlq => draw_dlq(f, app, body),
    }
    draw_footer(f, app, footer);
    if let Some(top) = app.ui.help {
        draw_help(f, f.area(), top, app.ui.log_file.as_deref());
    }
    if let Some(c) = &app.actions.confirm {
        draw_confirm(f, app, c, f.area());
    }
    if app.ui.no_color {
        without_colours(f);
    }
}

/// The frame without a colour, its attributes kept. Under `NO_COLOR` crossterm writes a colour
/// change as an empty SGR sequence (`ESC [ m`), which resets every attribute: the selected row's
/// reverse video and the headers' bold would be lost at the first colour change of a frame.
fn without_colours(f: &mut Frame<'_>) {
    for cell in f.buffer_mut().content.iter_mut() {
        cell.set_fg(Color::Reset).set_bg(Color::Reset);
    }
}

/// The header: the environment, the views, and on the right — never cut — whether actions are
/// enabled ("read-only" whole at 80 columns), the refresh period and PAUSED. When the views do
/// not fit, the others are shown by their key only.
fn draw_header(f: &mut Frame<'_>, app: &App, area: Rect) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut right = vec![if app.actions.enabled {
        Span::styled(" ACTIONS ENABLED ", bold.bg(Color::Yellow).fg(Color::Black))
    } else {
        Span::styled("read-only", Style::new().fg(Color::Green))
    }];
    right.push(Span::styled(
        format!(" · refresh {}", humantime::format_duration(app.ui.refresh)),
        DIM,
    ));
    if app.ui.paused {
        right.push(Span::raw(" "));
        right.push(Span::styled(
            " PAUSED ",
            bold.bg(Color::Yellow).fg(Color::Black),
        ));
    }
    let right = Line::from(right);
    let right_width = (right.width() as u16 + 1).min(area.width);
    let [left_area, right_area] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(right_width)]).areas(area);
    let color = env_color(&app.env.color);
    let mut spans = vec![Span::styled(
        format!(" {} ", app.env.name.to_uppercase()),
        bold.bg(color).fg(Color::Black),
    )];
    if app.env.production {
        spans.push(Span::styled(
            " PRODUCTION ",
            bold.bg(Color::Red).fg(Color::White),
        ));
    }
    spans.push(Span::styled(" idemguard console ", bold));
    let fixed: usize = spans.iter().map(|s| s.width()).sum();
    let full: usize = View::ALL.iter().map(|v| v.title().len() + 4).sum();
    let compact = fixed + full > left_area.width as usize;
    for (i, v) in View::ALL.iter().enumerate() {
        let current = *v == app.ui.view;
        let style = if current {
            bold.fg(Color::Black).bg(Color::Cyan)
        } else {
            DIM
        };
        let label = if compact && !current {
            format!(" {} ", i + 1)
        } else {
            format!(" {}:{} ", i + 1, v.title())
        };
        spans.push(Span::styled(label, style));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), left_area);
    f.render_widget(
        Paragraph::new(right).alignment(Alignment::Right),
        right_area,
    );
}

// ---------------------------------------------------------------------------------------------
// Overview
// ---------------------------------------------------------------------------------------------

/// What is wrong now, one finding a line, worst in red; Enter opens a line's view or trace.
fn draw_overview(f: &mut Frame<'_>, app: &App, area: Rect) {
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
        columns::OVERVIEW,
        0,
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

fn draw_backends(f: &mut Frame<'_>, app: &App, area: Rect) {
    let now = now_ms();
    let mut spans = Vec::new();
    for b in BackendId::ALL {
        let s = &app.stores.backends[&b];
        let (dot, style, word) = match &s.health {
            Health::Up => ("●", Style::new().fg(Color::Green), "ok".to_string()),
            Health::Connecting => (
                "○",
                Style::new().fg(Color::Yellow),
                "connecting".to_string(),
            ),
            Health::Degraded(_) => ("◐", Style::new().fg(Color::Yellow), "degraded".to_string()),
            Health::Slow(_) => (
                "◐",
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
                "SLOW".to_string(),
            ),
            Health::Down(_) => (
                "●",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                "DOWN".to_string(),
            ),
        };
        spans.push(Span::styled(format!(" {dot} "), style));
        spans.push(Span::raw(format!("{} ", b.name())));
        spans.push(Span::styled(word, style));
        if let Some(weak) = s.insecurity {
            let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
            spans.push(Span::styled(format!(" {weak}"), red));
        }
        if let (Health::Down(_) | Health::Slow(_), Some(t)) = (&s.health, s.last_ok_ms) {
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
            let s = &app.stores.backends[b];
            let (err, word, colour) = match &s.health {
                Health::Down(e) => (e.as_str(), "DOWN", Color::Red),
                Health::Slow(e) => (e.as_str(), "SLOW", Color::Yellow),
                _ => ("", "", Color::Red),
            };
            let on = if colour == Color::Red {
                Color::White
            } else {
                Color::Black
            };
            let last = s.last_ok_ms.map_or("no data yet".to_string(), |t| {
                format!("last good data {} ago", age(now - t))
            });
            Line::from(vec![
                Span::styled(
                    format!(" {} {word} ", b.name()),
                    Style::new().bg(colour).fg(on).add_modifier(Modifier::BOLD),
                ),
                // An error that says what to do first (a database without the schema: "run
                // `idemguard migrate`: the database … has no schema") is shown first — it names
                // the database itself — so a narrow terminal cuts the rest, not the remedy.
                Span::styled(
                    // So is a slow read's reason: the table it waits for and where to look.
                    if err.starts_with("run `") || word == "SLOW" {
                        format!(" {} · {last}", shown(err))
                    } else {
                        format!(
                            " {last} · {} · {}",
                            app.stores.backend_targets[b],
                            shown(err)
                        )
                    },
                    Style::new().fg(colour),
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
/// Column `keep` identifies a row and is kept whole at any width ([`columns::fit`]).
#[allow(clippy::too_many_arguments)] // one drawing call per table, every part named
fn windowed_table(
    f: &mut Frame<'_>,
    area: Rect,
    block: Block<'_>,
    cols: &[Column],
    keep: usize,
    total: usize,
    selected: Option<(usize, Style)>,
    mut cells: impl FnMut(usize) -> (Vec<String>, Style),
) {
    let highlight_style = selected.map_or(SELECTED, |(_, style)| style);
    let selected = selected.map(|(i, _)| i);
    let inner_height = area.height.saturating_sub(3) as usize; // borders + header
    let highlight = selected.is_some() && total > 0;
    let selected = selected.unwrap_or(0).min(total.saturating_sub(1));
    let offset = if inner_height == 0 || selected < inner_height {
        0
    } else {
        selected + 1 - inner_height
    };
    let end = (offset + inner_height).min(total);
    let shown: Vec<(Vec<String>, Style)> = (offset..end).map(&mut cells).collect();
    let keep_len = shown
        .iter()
        .filter_map(|(c, _)| c.get(keep))
        .map(|c| c.chars().count())
        .chain([cols[keep].header.len()])
        .max()
        .unwrap_or(0) as u16;
    let widths: Vec<Constraint> = columns::fit(cols, area.width.saturating_sub(2), keep, keep_len)
        .into_iter()
        .map(Constraint::Length)
        .collect();
    let rows: Vec<Row<'_>> = shown
        .into_iter()
        .map(|(c, style)| Row::new(c.into_iter().map(Cell::from)).style(style))
        .collect();
    let header = Row::new(cols.iter().map(|c| Cell::from(c.header))).style(HEADER);
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(highlight_style)
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

/// Draws the summary, the timeline and the selected entry: one view drawn top to bottom, long because each part is a few spans.
fn draw_trace(f: &mut Frame<'_>, app: &App, area: Rect) {
    let Some(t) = &app.stores.trace_view else {
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
        Constraint::Length(
            if ids_on_two_lines(t, area.width) {
                7
            } else {
                6
            } + u16::from(!t.warnings.is_empty()),
        ),
        Constraint::Fill(1),
        // A short terminal gives the timeline the rows: the selected entry's first lines only.
        Constraint::Length(if area.height < 30 { 4 } else { 7 }),
    ])
    .areas(area);

    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} ", t.kind.replace('_', " ")), DIM),
        Span::styled(shown(&t.query), Style::new().add_modifier(Modifier::BOLD)),
        if t.found {
            Span::raw("")
        } else {
            Span::styled(
                "  unknown so far: no row, key, message or event names it",
                Style::new().fg(Color::Yellow),
            )
        },
    ])];
    let order_no = shown(t.order_no.as_deref().unwrap_or("?"));
    let request_id = shown(t.request_id.as_deref().unwrap_or("?"));
    if ids_on_two_lines(t, area.width) {
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
    windowed_table(
        f,
        table,
        titled(title),
        columns::TIMELINE,
        columns::TIMELINE_ID,
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
            (cells.clone(), style)
        },
    );

    // The selected entry, every field.
    let detail_lines: Vec<Line<'_>> = match rows.get(selected).map(|(i, _)| &t.entries[*i]) {
        Some(e) => {
            let mut v = vec![Line::from(vec![
                Span::styled(format!("{} ", shown(&e.source)), HEADER),
                Span::raw(shown(&e.summary)),
            ])];
            if let Some(obj) = e.fields.as_object() {
                let pairs: Vec<String> = obj
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| {
                        format!(
                            "{}={}",
                            shown(k),
                            v.as_str().map_or_else(|| v.to_string(), shown)
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
    let unknown = match (cost.unknown_id_window.is_some(), compact) {
        (false, _) => "",
        (true, false) => " (unknown to the database: last 24 h only)",
        (true, true) => " (unknown ID: 24 h)",
    };
    Some(format!(" read: {}{unknown} ", topics.join(" · ")))
}

/// The orderNo and the requestId do not fit on one line of the summary (inside its border).
fn ids_on_two_lines(t: &crate::console::read::timeline::Timeline, width: u16) -> bool {
    let len = |s: &Option<String>| s.as_ref().map_or(1, |s| s.chars().count());
    "orderNo ".len() + len(&t.order_no) + " · requestId ".len() + len(&t.request_id) + 2
        > width as usize
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

/// Draws the summary line, the nodes and the table, top to bottom; long because each span is styled.
fn draw_locks(f: &mut Frame<'_>, app: &App, area: Rect) {
    let now = app.now_ms();
    let [summary, table] =
        Layout::vertical([Constraint::Length(2), Constraint::Fill(1)]).areas(area);
    let Some(scan) = &app.stores.locks else {
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
    let rows = app
        .stores
        .filtered
        .get(&View::Locks)
        .cloned()
        .unwrap_or_default();
    let title = format!(
        " Locks [{}{}] ",
        filter_note(app, View::Locks, rows.len(), scan.locks.len()),
        tag_note(app, View::Locks)
    );
    let table = results_panel(f, app, View::Locks, table);
    windowed_table(
        f,
        table,
        titled(title),
        columns::LOCKS,
        columns::LOCKS_ID,
        rows.len(),
        Some((app.selected(View::Locks), selected_style(app))),
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
            crate::lock::LockFlag::DeadOwner
                | crate::lock::LockFlag::NoQuorum
                | crate::lock::LockFlag::HeldLong
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
        if app.actions.is_tagged(view, id) {
            *first = format!("* {first}");
        }
        if let Some(r) = app.actions.result(view, id) {
            *first = format!("[{}] {first}", r.outcome);
        }
    }
}

fn tag_note(app: &App, view: View) -> String {
    match app.actions.tagged.get(&view).map_or(0, |t| t.len()) {
        0 => String::new(),
        n => format!(" · {n} tagged"),
    }
}

/// The last batch's per-row results under the table (when there is one); returns the table's area.
fn results_panel(f: &mut Frame<'_>, app: &App, view: View, area: Rect) -> Rect {
    let batch = app.actions.last_batch(view);
    let headline = app.actions.headline(view);
    if batch.is_empty() && headline.is_none() {
        return area;
    }
    let mut lines: Vec<Line<'_>> = batch
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
                Span::raw(format!(
                    "{} {} — {}",
                    r.action,
                    shown(&r.target),
                    shown(&r.detail)
                )),
            ])
        })
        .collect();
    // The batch's progress, then its summary (counts and words of idemguard's own).
    if let Some(h) = headline {
        lines.insert(
            0,
            Line::from(Span::styled(
                format!(" {h}"),
                Style::new().add_modifier(Modifier::BOLD),
            )),
        );
    }
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

/// Draws the summary, the rates table and the lag table, top to bottom; long because each span is styled.
fn draw_rates(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table, lag] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(8),
    ])
    .areas(area);
    let rates = app.stores.trace_log.rates(app.now_ms());
    let reading = app.stores.rates_reading();
    let line = match &reading {
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
    };
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
        columns::RATES,
        1,
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
    match &app.stores.lag {
        Some(Ok(l)) => {
            windowed_table(
                f,
                lag,
                titled(" Consumer lag per partition ".into()),
                columns::LAG,
                0,
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

// ---------------------------------------------------------------------------------------------
// Stuck
// ---------------------------------------------------------------------------------------------

fn draw_stuck(f: &mut Frame<'_>, app: &App, area: Rect) {
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
        columns::STUCK,
        columns::STUCK_ID,
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

// ---------------------------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------------------------

fn draw_audit(f: &mut Frame<'_>, app: &App, area: Rect) {
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
            windowed_table(
                f,
                table,
                titled(title),
                columns::AUDIT,
                columns::AUDIT_ID,
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
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DLQ
// ---------------------------------------------------------------------------------------------

fn draw_dlq(f: &mut Frame<'_>, app: &App, area: Rect) {
    let [summary, table] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
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
        .map(|l| Line::from(Span::raw(format!(" {}", shown(l)))))
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
        Span::raw(shown(&c.typed)),
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

/// Draws the bottom line in its three states (command, filter, normal); long because each span is styled.
fn draw_footer(f: &mut Frame<'_>, app: &App, area: Rect) {
    let line = match &app.ui.input {
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
                Span::raw(shown(s)),
                Span::styled("█", Style::new().fg(Color::Cyan)),
                Span::styled(format!("   {}", hint.join("  ")), DIM),
            ])
        }
        Input::Filter(s) => {
            let current = app.filter(app.ui.view);
            let now = if current.is_empty() {
                "none".to_string()
            } else {
                format!("/{}", current.typed())
            };
            Line::from(vec![
                Span::styled("/", Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
                Span::raw(shown(s)),
                Span::styled("█", Style::new().fg(Color::Cyan)),
                Span::styled(format!("   filter of {} (now {now}) · !text inverts · enter applies (empty clears) · esc cancels", app.ui.view.title()), DIM),
            ])
        }
        Input::Normal => match &app.ui.message {
            Some((m, level, _)) => Line::from(Span::styled(
                format!(" {}", shown(m)),
                if *level == Level::Error {
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
                } else {
                    Style::new().fg(Color::Green)
                },
            )),
            None => {
                let mut spans = Vec::new();
                let actions: &[(&str, &str)] = match app.ui.view {
                    View::Locks => &[("space", "tag"), ("x", "release")],
                    View::Stuck => &[("space", "tag"), ("f", "finalize")],
                    View::Dlq => &[("space", "tag"), ("r", "redrive")],
                    _ => &[],
                };
                for (k, what) in actions {
                    let style = if app.actions.enabled || *k == "space" {
                        Style::new().fg(Color::Yellow)
                    } else {
                        DIM.add_modifier(Modifier::CROSSED_OUT)
                    };
                    spans.push(Span::styled(format!(" <{k}>"), style));
                    spans.push(Span::styled(
                        format!(" {what}"),
                        if *k == "space" || app.actions.enabled {
                            DIM
                        } else {
                            style
                        },
                    ));
                }
                if !actions.is_empty() && !app.actions.enabled {
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

/// The help, scrolled to `top`: its rows are [`ui_state::help_rows`] — wrapped to the popup's
/// width, the same rows the scroll keys count — so it is never cut, only scrolled.
fn draw_help(f: &mut Frame<'_>, area: Rect, top: usize, log_file: Option<&str>) {
    let size = (area.width, area.height);
    let rows = ui_state::help_rows(size, log_file);
    let visible = ui_state::help_visible(size);
    let top = top.min(rows.len().saturating_sub(visible));
    let height = (rows.len() as u16 + 2).min(area.height);
    let width = ui_state::help_popup_width(area.width);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let text: Vec<Line<'_>> = rows
        .into_iter()
        .skip(top)
        .take(visible)
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
    let total = ui_state::help_rows(size, log_file).len();
    let title = if total > visible {
        format!(
            " Help {}–{} of {total} · j/k pgdn/pgup scroll · other keys close ",
            top + 1,
            (top + visible).min(total)
        )
    } else {
        " Help — any key closes ".to_string()
    };
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(text)
            .block(titled(title).border_style(Style::new().fg(Color::Cyan)))
            .alignment(Alignment::Left),
        popup,
    );
}
