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
//!
//! Each view is drawn by a file of its own; this file draws what frames them (the header, the
//! backends' line and alerts, the footer, help and the confirmation popup) and holds the table
//! and style helpers the views share.

use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, BorderType, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap,
};
use ratatui::Frame;

use crate::contracts::now_ms;

use crate::console::columns;
use crate::console::format::age;
use crate::console::read::overview::Severity;
use crate::console::tui::app::{ui_state, App, Health, Input, Level};
use crate::console::tui::backend::BackendId;
use crate::console::tui::keymap::{self, View, KEYMAP};
use fit::TableSpec;

mod audit;
mod dlq;
mod fit;
mod locks;
mod overview;
mod rates;
mod stuck;
mod trace;

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
        View::Overview => overview::draw(f, app, body),
        View::Trace => trace::draw(f, app, body),
        View::Locks => locks::draw(f, app, body),
        View::Rates => rates::draw(f, app, body),
        View::Stuck => stuck::draw(f, app, body),
        View::Audit => audit::draw(f, app, body),
        View::Dlq => dlq::draw(f, app, body),
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
/// not fit, the console's name gives way first, then the other views' names (their keys stay).
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
    if let Some(context) = &app.context {
        spans.push(Span::styled(format!(" ctx {} ", shown(context)), bold));
    }
    if app.env.production {
        spans.push(Span::styled(
            " PRODUCTION ",
            bold.bg(Color::Red).fg(Color::White),
        ));
    }
    let fixed: usize = spans.iter().map(|s| s.width()).sum();
    let (label, names) = tab_style(fixed, app.ui.view, left_area.width as usize);
    if label {
        spans.push(Span::styled(" idemguard console ", bold));
    }
    for (i, v) in View::ALL.iter().enumerate() {
        let current = *v == app.ui.view;
        let style = if current {
            bold.fg(Color::Black).bg(Color::Cyan)
        } else {
            DIM
        };
        let tab = if names || current {
            format!(" {}:{} ", i + 1, v.title())
        } else {
            format!(" {} ", i + 1)
        };
        spans.push(Span::styled(tab, style));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), left_area);
    f.render_widget(
        Paragraph::new(right).alignment(Alignment::Right),
        right_area,
    );
}

/// Whether the header shows the console's name, and the names of the views other than the
/// `current` one, after `fixed` columns of `width`: the widest of these that fits.
fn tab_style(fixed: usize, current: View, width: usize) -> (bool, bool) {
    const LABEL: usize = " idemguard console ".len();
    let names: usize = View::ALL.iter().map(|v| v.title().len() + 4).sum();
    // " 2 " for each other view, the current one whole.
    let keys = (View::ALL.len() - 1) * " 2 ".len() + current.title().len() + 4;
    [(true, true), (false, true), (true, false), (false, false)]
        .into_iter()
        .find(|(label, named)| {
            let tabs = if *named { names } else { keys };
            fixed + usize::from(*label) * LABEL + tabs <= width
        })
        .unwrap_or((false, false))
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
/// Its columns are fitted to the width ([`fit::fit`]): `spec.keep` identifies a row and is kept
/// whole at any width; the columns shown and their widths are returned, for a Selected panel to
/// show the rest.
fn windowed_table(
    f: &mut Frame<'_>,
    area: Rect,
    block: Block<'_>,
    spec: &TableSpec,
    total: usize,
    selected: Option<(usize, Style)>,
    mut cells: impl FnMut(usize) -> (Vec<String>, Style),
) -> Vec<(usize, u16)> {
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
    let widest = widest_cells(spec, &shown);
    let fitted = fit::fit(spec, area.width.saturating_sub(2), &widest);
    let pick = |c: &[String]| -> Vec<String> {
        fitted
            .iter()
            .map(|(i, _)| c.get(*i).cloned().unwrap_or_default())
            .collect()
    };
    let rows: Vec<Row<'_>> = shown
        .iter()
        .map(|(c, style)| Row::new(pick(c).into_iter().map(Cell::from)).style(*style))
        .collect();
    let header =
        Row::new(fitted.iter().map(|(i, _)| Cell::from(spec.cols[*i].header))).style(HEADER);
    let widths = fitted.iter().map(|(_, w)| Constraint::Length(*w));
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(highlight_style)
        .column_spacing(1);
    let mut state = TableState::default().with_selected(highlight.then(|| selected - offset));
    f.render_stateful_widget(table, area, &mut state);
    fitted
}

/// Per column, its widest cell among `rows`, its header included.
fn widest_cells(spec: &TableSpec, rows: &[(Vec<String>, Style)]) -> Vec<u16> {
    spec.cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .filter_map(|(cells, _)| cells.get(i))
                .map(|cell| cell.chars().count())
                .chain([c.header.chars().count()])
                .max()
                .unwrap_or(0) as u16
        })
        .collect()
}

/// The cells of the columns a table does not show or cuts (but `except`, shown elsewhere), on
/// one line as `HEADER value · HEADER value`: what a narrow terminal moved from the row to its
/// Selected panel, which wraps it. `None` when every cell is in the table whole.
fn hidden_cells(
    spec: &TableSpec,
    shown: &[(usize, u16)],
    except: &[usize],
    cells: &[String],
) -> Option<Line<'static>> {
    let whole = |i: usize, cell: &str| {
        shown
            .iter()
            .any(|(c, w)| *c == i && cell.chars().count() <= *w as usize)
    };
    let mut spans = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_empty() || except.contains(&i) || whole(i, cell) {
            continue;
        }
        let sep = if spans.is_empty() { " " } else { " · " };
        let column = &spec.cols[i];
        spans.push(Span::styled(format!("{sep}{} ", column.header), DIM));
        // A narrow column's cell keeps its width here too: the panel wraps at the same place
        // whether an age reads 9.5s or 10m05s.
        let width = if column.width <= fit::NARROW {
            column.width as usize
        } else {
            0
        };
        spans.push(Span::raw(format!("{cell:<width$}")));
    }
    (!spans.is_empty()).then(|| Line::from(spans))
}

/// Below 160 columns a table without a Selected panel of its own gets one line-pair under it for
/// the cells its width hid: `(table, panel)`.
fn with_hidden_panel(area: Rect) -> (Rect, Option<Rect>) {
    if area.width >= 160 {
        return (area, None);
    }
    let [table, panel] = Layout::vertical([Constraint::Fill(1), Constraint::Length(4)]).areas(area);
    (table, Some(panel))
}

/// The Selected panel of [`with_hidden_panel`]: the selected row's hidden cells, wrapped.
fn draw_hidden_panel(
    f: &mut Frame<'_>,
    area: Rect,
    spec: &TableSpec,
    shown: &[(usize, u16)],
    selected: Option<Vec<String>>,
) {
    let line = match selected {
        None => Line::from(Span::styled(" no row selected", DIM)),
        Some(cells) => hidden_cells(spec, shown, &[], &cells)
            .unwrap_or_else(|| Line::from(Span::styled(" every column is in the table", DIM))),
    };
    f.render_widget(
        Paragraph::new(line)
            .wrap(Wrap { trim: true })
            .block(titled(" Selected ".into())),
        area,
    );
}

fn filter_note(app: &App, view: View, shown: usize, total: usize) -> String {
    let filter = app.filter(view);
    if filter.is_empty() {
        format!("{total}")
    } else {
        format!("{shown} of {total} · filter /{}", filter.typed())
    }
}

/// A tagged row's ID starts with `*`, a row with an action result with `[outcome]`: the ID's
/// column is the one kept whole at any width, so the marks cover no other cell (the DLQ's first
/// column is its AGE, seven wide).
fn mark(app: &App, view: View, id: &str, cells: &mut [String]) {
    let column = match view {
        View::Locks => columns::LOCKS_ID,
        View::Stuck => columns::STUCK_ID,
        View::Dlq => columns::DLQ_ID,
        _ => 0,
    };
    if let Some(cell) = cells.get_mut(column) {
        if app.actions.is_tagged(view, id) {
            *cell = format!("* {cell}");
        }
        if let Some(r) = app.actions.result(view, id) {
            *cell = format!("[{}] {cell}", r.outcome);
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

/// Draws the bottom line in its three states: the command line, the filter line, and the status
/// message or the keys.
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
            None => key_hints(app, area.width),
        },
    };
    f.render_widget(Paragraph::new(line), area);
}

/// A key the footer names, and how soon it gives way on a narrow terminal (0: never).
struct Hint {
    spans: Vec<Span<'static>>,
    gives_way: u8,
}

/// The footer's keys that fit in `width`: the view's actions, then the keymap's (`footer`); help
/// and quit always, the refresh and view keys first to go.
fn key_hints(app: &App, width: u16) -> Line<'static> {
    let mut hints = action_hints(app);
    let tags = !hints.is_empty();
    for b in KEYMAP.iter().filter(|b| b.footer.is_some()) {
        let label = b.label.split(' ').next().unwrap_or(b.label);
        let what = b.footer.unwrap_or_default();
        // In Locks, Stuck and the DLQ, space tags: pause is on p there.
        let (label, what) = match b.action {
            keymap::UiAction::TagOrPause if tags => ("p", "pause"),
            _ => (label, what),
        };
        hints.push(Hint {
            spans: vec![
                Span::styled(format!(" <{label}>"), Style::new().fg(Color::Cyan)),
                Span::styled(format!(" {what}"), DIM),
            ],
            gives_way: hint_gives_way(b.action),
        });
    }
    let width_of = |h: &[Hint]| -> usize { h.iter().flat_map(|h| &h.spans).map(Span::width).sum() };
    while width_of(&hints) > width as usize {
        let Some(last) = (0..hints.len())
            .filter(|i| hints[*i].gives_way > 0)
            .max_by_key(|i| (hints[*i].gives_way, *i))
        else {
            break;
        };
        hints.remove(last);
    }
    Line::from(hints.into_iter().flat_map(|h| h.spans).collect::<Vec<_>>())
}

/// How soon a keymap key leaves the footer: help and quit never, the refresh keys first.
fn hint_gives_way(action: keymap::UiAction) -> u8 {
    use keymap::UiAction::*;
    match action {
        Help | Quit => 0,
        CommandLine | Drill => 2,
        Filter | Copy => 3,
        TagOrPause => 5,
        NextView => 6,
        _ => 7,
    }
}

/// The current view's action keys (Locks, Stuck, DLQ), crossed out when read-only, and how to
/// enable them.
fn action_hints(app: &App) -> Vec<Hint> {
    let actions: &[(&str, &str)] = match app.ui.view {
        View::Locks => &[("space", "tag"), ("x", "release")],
        View::Stuck => &[("space", "tag"), ("f", "finalize")],
        View::Dlq => &[("space", "tag"), ("r", "redrive")],
        _ => &[],
    };
    let mut hints = Vec::new();
    for (k, what) in actions {
        let style = if app.actions.enabled || *k == "space" {
            Style::new().fg(Color::Yellow)
        } else {
            DIM.add_modifier(Modifier::CROSSED_OUT)
        };
        let what_style = if *k == "space" || app.actions.enabled {
            DIM
        } else {
            style
        };
        hints.push(Hint {
            spans: vec![
                Span::styled(format!(" <{k}>"), style),
                Span::styled(format!(" {what}"), what_style),
            ],
            gives_way: 1,
        });
    }
    if !actions.is_empty() && !app.actions.enabled {
        hints.push(Hint {
            spans: vec![Span::styled(" (read-only: --allow-actions)", DIM)],
            gives_way: 4,
        });
    }
    hints
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
    let keys = ui_state::help_key_width();
    let text: Vec<Line<'_>> = rows
        .into_iter()
        .skip(top)
        .take(visible)
        .map(|(k, v)| {
            if v.is_empty() {
                Line::from(Span::styled(k, HEADER))
            } else {
                Line::from(vec![
                    Span::styled(format!("  {k:<keys$} "), Style::new().fg(Color::Cyan)),
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
