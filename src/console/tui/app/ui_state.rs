//! What the operator sees and steers — the view, the selection, the filters, the popups' scroll,
//! the bottom line, the status message — and nothing the collectors send. Pure: no channel, no
//! service.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::contracts::now_ms;

use crate::console::tui::keymap::{self, View};

/// A view's filter: case-insensitive text; `invert` keeps the rows that do NOT contain it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub invert: bool,
}

impl Filter {
    /// `foo` or `!foo` as typed after `/`.
    pub fn parse(typed: &str) -> Filter {
        match typed.strip_prefix('!') {
            Some(rest) => Filter {
                text: rest.to_string(),
                invert: true,
            },
            None => Filter {
                text: typed.to_string(),
                invert: false,
            },
        }
    }
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
    /// As the operator would type it.
    pub fn typed(&self) -> String {
        format!("{}{}", if self.invert { "!" } else { "" }, self.text)
    }
}

/// What the bottom line is reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Normal,
    Command(String),
    Filter(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Error,
}

pub struct UiState {
    pub view: View,
    pub input: Input,
    pub filters: BTreeMap<View, Filter>,
    pub selected: BTreeMap<View, usize>,
    pub paused: bool,
    paused_at_ms: Option<i64>,
    pub refresh: Duration,
    /// The help popup, when open: its first line on screen (it scrolls, so it is never cut).
    pub help: Option<usize>,
    /// The terminal's size as last drawn (columns, rows): how far the help can scroll.
    pub size: (u16, u16),
    /// Where log lines go while the console owns the terminal (shown in the help screen).
    pub log_file: Option<String>,
    pub message: Option<(String, Level, Instant)>,
    pub quit: bool,
    /// Set when the screen must be drawn again.
    pub dirty: bool,
    /// The last text copied with `y` (and written to the terminal as OSC 52).
    pub copied: Option<String>,
    clipboard_out: Option<String>,
    /// `NO_COLOR` is set (no-color.org): the terminal gets no colours, so the selected row is
    /// shown in reverse video rather than by its background colour alone.
    pub no_color: bool,
}

impl UiState {
    pub fn new(refresh: Duration) -> UiState {
        UiState {
            view: View::Overview,
            input: Input::Normal,
            filters: BTreeMap::new(),
            selected: BTreeMap::new(),
            paused: false,
            paused_at_ms: None,
            refresh,
            help: None,
            size: (80, 24),
            log_file: None,
            message: None,
            quit: false,
            dirty: true,
            copied: None,
            clipboard_out: None,
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        }
    }

    /// "Now" for every relative time on screen; frozen while paused.
    pub fn now_ms(&self) -> i64 {
        self.paused_at_ms.unwrap_or_else(now_ms)
    }

    pub fn toggle_pause(&mut self) {
        self.paused = !self.paused;
        self.paused_at_ms = self.paused.then(now_ms);
        self.say(
            if self.paused {
                "paused: the collectors stop polling (p resumes)"
            } else {
                "resumed"
            },
            Level::Info,
        );
    }

    pub fn filter(&self, view: View) -> Filter {
        self.filters.get(&view).cloned().unwrap_or_default()
    }

    pub fn selected(&self, view: View) -> usize {
        self.selected.get(&view).copied().unwrap_or(0)
    }

    pub fn say(&mut self, text: impl Into<String>, level: Level) {
        self.message = Some((text.into(), level, Instant::now()));
    }

    /// Move the selection of the current view by `delta` within `rows` rows.
    pub fn move_selection(&mut self, delta: i64, rows: usize) {
        let n = rows as i64;
        let cur = self.selected(self.view) as i64;
        let next = if n == 0 {
            0
        } else {
            cur.saturating_add(delta).clamp(0, n - 1)
        };
        self.selected.insert(self.view, next as usize);
    }

    /// The next refresh period of `+` (faster) or `-`.
    pub fn stepped_refresh(&self, faster: bool) -> Duration {
        let steps = keymap::REFRESH_STEPS;
        let i = steps
            .iter()
            .position(|d| *d >= self.refresh)
            .unwrap_or(steps.len() - 1);
        let i = if faster {
            i.saturating_sub(1)
        } else {
            (i + 1).min(steps.len() - 1)
        };
        steps[i]
    }

    /// Copy `text` as it is shown — [escaped](crate::untrusted::escape): an ID another system
    /// wrote must not carry a control character into the shell it is pasted into. The terminal
    /// loop writes it as OSC 52; the status line says what was copied.
    pub fn copy(&mut self, text: String) {
        let shown = crate::untrusted::escape(&text).into_owned();
        self.say(format!("copied to the clipboard: {shown}"), Level::Info);
        self.copied = Some(shown.clone());
        self.clipboard_out = Some(shown);
    }

    /// Text to put on the clipboard (written by the terminal loop as OSC 52).
    pub fn take_clipboard(&mut self) -> Option<String> {
        self.clipboard_out.take()
    }

    /// Scroll the open help by `delta` lines, within what the terminal leaves it.
    pub fn scroll_help(&mut self, delta: i64) {
        let max = help_scroll_max(self.size, self.log_file.is_some()) as i64;
        if let Some(top) = &mut self.help {
            *top = (*top as i64).saturating_add(delta).clamp(0, max) as usize;
        }
    }

    /// Periodic: expire the status message; relative times move on, so draw again.
    pub fn on_tick(&mut self) {
        if self
            .message
            .as_ref()
            .is_some_and(|(_, _, at)| at.elapsed() > Duration::from_secs(5))
        {
            self.message = None;
        }
        if !self.paused {
            self.dirty = true;
        }
    }
}

/// The help's lines after wrapping to the popup's width: the one layout the drawing and the
/// scrolling share ([`crate::console::tui::ui`] draws exactly these rows).
pub fn help_rows(size: (u16, u16), log_file: Option<&str>) -> Vec<(String, String)> {
    let mut lines = keymap::help_lines();
    if let Some(path) = log_file {
        lines.push((String::new(), String::new()));
        lines.push(("LOGS".to_string(), String::new()));
        lines.push(("log file".to_string(), path.to_string()));
    }
    let inner = help_popup_width(size.0).saturating_sub(2) as usize;
    // The help text starts after the key column and wraps under itself.
    let text_width = inner.saturating_sub(help_text_column()).max(10);
    let mut rows = Vec::new();
    for (k, v) in lines {
        if v.is_empty() {
            rows.push((k, v));
            continue;
        }
        for (n, piece) in wrap_words(&v, text_width).into_iter().enumerate() {
            rows.push((if n == 0 { k.clone() } else { String::new() }, piece));
        }
    }
    rows
}

/// The width of the help's key column: its widest key (`:report [html] [ID]`), measured from
/// the keymap's tables so that a longer key never runs into its text.
pub fn help_key_width() -> usize {
    keymap::help_lines()
        .iter()
        .filter(|(_, text)| !text.is_empty())
        .map(|(key, _)| key.chars().count())
        .chain(["log file".len()])
        .max()
        .unwrap_or(0)
}

/// Where the help's text starts in its popup: two spaces, the key column, one space.
pub fn help_text_column() -> usize {
    2 + help_key_width() + 1
}

/// The help popup's width on a terminal `width` columns wide.
pub fn help_popup_width(width: u16) -> u16 {
    width.saturating_sub(4).min(110)
}

/// Rows of the help the popup shows at once (the terminal's height less its border).
pub fn help_visible(size: (u16, u16)) -> usize {
    size.1.saturating_sub(2).max(1) as usize
}

fn help_scroll_max(size: (u16, u16), log_file: bool) -> usize {
    let rows = help_rows(size, log_file.then_some("")).len();
    rows.saturating_sub(help_visible(size))
}

/// Words into lines of at most `width` characters (a longer word is cut into pieces).
pub fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word = word.to_string();
        while word.chars().count() > width {
            if !line.is_empty() {
                out.push(std::mem::take(&mut line));
            }
            let head: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            out.push(head);
        }
        let needed = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if needed > width && !line.is_empty() {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || out.is_empty() {
        out.push(line);
    }
    out
}
