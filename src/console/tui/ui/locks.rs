//! The Locks view: the lock keys of every node with their holder, TTL and flags.

use super::*;
use crate::lock::LockScan;

/// The counts, the nodes and the table, top to bottom.
pub(super) fn draw(f: &mut Frame<'_>, app: &App, area: Rect) {
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
    f.render_widget(Paragraph::new(summary_lines(scan)), summary);
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
    let (table, panel) = with_hidden_panel(table);
    let shown = windowed_table(
        f,
        table,
        titled(title),
        &TABLE,
        rows.len(),
        Some((app.selected(View::Locks), selected_style(app))),
        |i| {
            let l = &scan.locks[rows[i]];
            let (mut cells, style) = lock_row(l, now);
            mark(app, View::Locks, &l.key, &mut cells);
            (cells, style)
        },
    );
    if let Some(panel) = panel {
        let selected = app.selected_lock().map(|l| lock_row(l, now).0);
        draw_hidden_panel(f, panel, &TABLE, &shown, selected);
    }
}

/// The Locks' columns: the key identifies a lock; whether its OWNER is alive, its PTTL and its
/// FLAGS answer whether it is stuck; the holder and how long it is held next; the fence, the PID
/// and the quorum give way first.
static TABLE: TableSpec = TableSpec {
    cols: columns::LOCKS,
    keep: columns::LOCKS_ID,
    //          KEY SCOPE HOLDER PID HELD PTTL FENCE OWNER QUORUM FLAGS
    rank: Some(&[0, 4, 2, 6, 3, 1, 7, 0, 5, 1]),
};

/// The counts of locks by flag and how long the scan took; then each node, red when down.
fn summary_lines(scan: &LockScan) -> Vec<Line<'static>> {
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
    vec![line1, Line::from(nodes)]
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
