//! Every key and every `:` command of the console, in one table each. Key handling looks keys up
//! here and the help screen (`?`) and the footer are generated from the same tables, so the help
//! always says what the keys really do.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::console::report::ReportFormat;

/// The views, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum View {
    /// What is wrong now, across the three layers: the first screen.
    Overview,
    Trace,
    Locks,
    Rates,
    Stuck,
    Audit,
    /// The DLQ's messages and what the consumer would do with each now.
    Dlq,
}

impl View {
    pub const ALL: [View; 7] = [
        View::Overview,
        View::Trace,
        View::Locks,
        View::Rates,
        View::Stuck,
        View::Audit,
        View::Dlq,
    ];

    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Trace => "Trace",
            View::Locks => "Locks",
            View::Rates => "Rates",
            View::Stuck => "Stuck",
            View::Audit => "Audit",
            View::Dlq => "DLQ",
        }
    }

    pub fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }

    /// The view's name as `:` commands and `idemguard console --view` spell it: the name of its
    /// command in [`COMMANDS`].
    pub fn name(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Trace => "trace",
            View::Locks => "locks",
            View::Rates => "rates",
            View::Stuck => "stuck",
            View::Audit => "audit",
            View::Dlq => "dlq",
        }
    }

    /// The view a name or an alias of its command names (`dlq`, `d`, `Locks`); the error lists
    /// the views and the nearest one to a typo, as the command line does.
    pub fn named(word: &str) -> Result<View, String> {
        let found = COMMANDS
            .iter()
            .find(|c| is_called(c, word))
            .and_then(|c| View::ALL.into_iter().find(|v| v.name() == c.name));
        found.ok_or_else(|| {
            let names: Vec<&str> = View::ALL.iter().map(|v| v.name()).collect();
            let guess = nearest_command(word)
                .filter(|n| names.contains(n))
                .map_or(String::new(), |n| format!(": did you mean `{n}`?"));
            format!("unknown view `{word}`{guess} (views: {})", names.join(", "))
        })
    }

    /// The command line that opens the console on this view.
    pub fn opening_command(self) -> String {
        format!("idemguard console --view {}", self.name())
    }
}

/// What a key does. Nothing here writes anywhere: the destructive keys ([`UiAction::Release`],
/// [`UiAction::Finalize`]) only build [`crate::ops::Action`] values and open the
/// confirmation popup; the action runs once confirmed, in the executor task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiAction {
    Quit,
    Help,
    CommandLine,
    Filter,
    Pause,
    /// Space: tag / untag the row in the Locks and Stuck views (bulk actions); pause elsewhere.
    TagOrPause,
    /// Tag every row the DLQ view shows (narrowed with its filter, e.g. to one reason).
    TagShown,
    /// Release the selected (or tagged) lock(s) — Locks view.
    Release,
    /// Finalize the selected (or tagged) stuck record(s) — Stuck view.
    Finalize,
    /// Redrive the selected (or tagged) DLQ message(s) — DLQ view.
    Redrive,
    Faster,
    Slower,
    Copy,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    NextView,
    PrevView,
    Show(View),
    /// Enter: open what the selected row names — a finding's view or trace (Overview), the
    /// trace of a lock's orderNo/requestId or of a stuck record.
    Drill,
    /// Esc: close the help, clear the filter.
    Back,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Code(KeyCode),
}

impl Key {
    fn matches(self, e: &KeyEvent) -> bool {
        match self {
            Key::Char(c) => {
                e.code == KeyCode::Char(c)
                    && !e.modifiers.contains(KeyModifiers::CONTROL)
                    && !e.modifiers.contains(KeyModifiers::ALT)
            }
            Key::Ctrl(c) => {
                e.code == KeyCode::Char(c) && e.modifiers.contains(KeyModifiers::CONTROL)
            }
            Key::Code(k) => e.code == k,
        }
    }
}

pub struct Binding {
    pub keys: &'static [Key],
    /// How the help writes the keys.
    pub label: &'static str,
    pub action: UiAction,
    pub help: &'static str,
    /// Shown in the footer when set (the most useful keys only).
    pub footer: Option<&'static str>,
}

/// The keymap. Order = order in the help screen.
pub static KEYMAP: &[Binding] = &[
    Binding { keys: &[Key::Char(':')], label: ":", action: UiAction::CommandLine, help: "command line (:overview, :trace ID, :locks, :rates, :stuck, :audit, :dlq)", footer: Some("cmd") },
    Binding { keys: &[Key::Char('/')], label: "/", action: UiAction::Filter, help: "filter this view's rows (/!text inverts); remembered per view", footer: Some("filter") },
    Binding { keys: &[Key::Code(KeyCode::Enter)], label: "enter", action: UiAction::Drill, help: "Overview: open the finding's view or trace; Locks, Stuck, DLQ: trace the row", footer: Some("open") },
    Binding { keys: &[Key::Char('y')], label: "y", action: UiAction::Copy, help: "copy the selected ID to the clipboard (OSC 52): the row's ID, the traced ID in Trace; in a view without one, the command that opens it (idemguard console --view rates)", footer: Some("copy") },
    Binding { keys: &[Key::Char(' ')], label: "space", action: UiAction::TagOrPause, help: "Locks, Stuck, DLQ: tag / untag the row for a bulk action; elsewhere: pause / resume", footer: Some("pause") },
    Binding { keys: &[Key::Char('T')], label: "T", action: UiAction::TagShown, help: "DLQ: tag every row shown — narrow them with / to a reason first (a whole reason for a bulk redrive)", footer: None },
    Binding { keys: &[Key::Char('p')], label: "p", action: UiAction::Pause, help: "pause / resume live updates (every view)", footer: None },
    Binding { keys: &[Key::Char('x')], label: "x", action: UiAction::Release, help: "Locks: release the selected (or tagged) lock(s) — compare-and-delete of the value shown; needs --allow-actions", footer: None },
    Binding { keys: &[Key::Char('f')], label: "f", action: UiAction::Finalize, help: "Stuck: finalize the selected (or tagged) record(s) after reconciling; needs --allow-actions", footer: None },
    Binding { keys: &[Key::Char('r')], label: "r", action: UiAction::Redrive, help: "DLQ: redrive the selected (or tagged) message(s) to their source topic, each once, one after the other with progress (n of N, published / refused / failed); needs --allow-actions", footer: None },
    Binding { keys: &[Key::Char('+'), Key::Char('=')], label: "+", action: UiAction::Faster, help: "refresh faster", footer: Some("faster") },
    Binding { keys: &[Key::Char('-')], label: "-", action: UiAction::Slower, help: "refresh slower", footer: Some("slower") },
    Binding { keys: &[Key::Char('1')], label: "1", action: UiAction::Show(View::Overview), help: "Overview: what is wrong now (the first screen)", footer: None },
    Binding { keys: &[Key::Char('2')], label: "2", action: UiAction::Show(View::Trace), help: "Trace view", footer: None },
    Binding { keys: &[Key::Char('3')], label: "3", action: UiAction::Show(View::Locks), help: "Locks view", footer: None },
    Binding { keys: &[Key::Char('4')], label: "4", action: UiAction::Show(View::Rates), help: "Rates view", footer: None },
    Binding { keys: &[Key::Char('5')], label: "5", action: UiAction::Show(View::Stuck), help: "Stuck view", footer: None },
    Binding { keys: &[Key::Char('6')], label: "6", action: UiAction::Show(View::Audit), help: "Audit view (operator actions)", footer: None },
    Binding { keys: &[Key::Char('7')], label: "7", action: UiAction::Show(View::Dlq), help: "DLQ view: the DLQ's messages, what the consumer would do with each now", footer: None },
    Binding { keys: &[Key::Code(KeyCode::Tab)], label: "tab", action: UiAction::NextView, help: "next view", footer: Some("view") },
    Binding { keys: &[Key::Code(KeyCode::BackTab)], label: "shift-tab", action: UiAction::PrevView, help: "previous view", footer: None },
    Binding { keys: &[Key::Char('j'), Key::Code(KeyCode::Down)], label: "j ↓", action: UiAction::Down, help: "next row", footer: None },
    Binding { keys: &[Key::Char('k'), Key::Code(KeyCode::Up)], label: "k ↑", action: UiAction::Up, help: "previous row", footer: None },
    Binding { keys: &[Key::Code(KeyCode::PageDown), Key::Ctrl('f')], label: "pgdn ctrl-f", action: UiAction::PageDown, help: "page down", footer: None },
    Binding { keys: &[Key::Code(KeyCode::PageUp), Key::Ctrl('b')], label: "pgup ctrl-b", action: UiAction::PageUp, help: "page up", footer: None },
    Binding { keys: &[Key::Char('g'), Key::Code(KeyCode::Home)], label: "g home", action: UiAction::Top, help: "first row", footer: None },
    Binding { keys: &[Key::Char('G'), Key::Code(KeyCode::End)], label: "G end", action: UiAction::Bottom, help: "last row", footer: None },
    Binding { keys: &[Key::Code(KeyCode::Esc)], label: "esc", action: UiAction::Back, help: "stop a running batch between actions (what ran is audited, the rest is not run); else clear this view's filter", footer: None },
    Binding { keys: &[Key::Char('?')], label: "?", action: UiAction::Help, help: "this help", footer: Some("help") },
    Binding { keys: &[Key::Char('q'), Key::Ctrl('c')], label: "q ctrl-c", action: UiAction::Quit, help: "quit (the terminal is restored)", footer: Some("quit") },
];

pub fn action_for(e: &KeyEvent) -> Option<UiAction> {
    KEYMAP
        .iter()
        .find(|b| b.keys.iter().any(|k| k.matches(e)))
        .map(|b| b.action)
}

/// What a key does while a popup or the bottom line has the keyboard. Keys not in a popup's
/// table type a character (the command line, the filter line, the confirmation) or close the
/// popup (the help).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopupKey {
    /// Leave without doing anything.
    Cancel,
    /// Run the line / the confirmed batch.
    Submit,
    /// Delete the last character (on an empty command or filter line: leave it, as in k9s).
    DeleteChar,
    ClearLine,
    /// Complete a unique command name.
    Complete,
    Quit,
    ScrollUp,
    ScrollDown,
    PageUp,
    PageDown,
    Top,
    Bottom,
}

/// A key of a popup's table: like [`Binding`], for the keys that hold while it is open.
pub struct PopupBinding {
    pub keys: &'static [Key],
    pub label: &'static str,
    pub action: PopupKey,
    pub help: &'static str,
}

/// The command line (`:`) and the filter line (`/`).
pub static LINE_KEYS: &[PopupBinding] = &[
    PopupBinding {
        keys: &[Key::Code(KeyCode::Enter)],
        label: "enter",
        action: PopupKey::Submit,
        help: "run the command / apply the filter (an empty filter clears it)",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::Esc)],
        label: "esc",
        action: PopupKey::Cancel,
        help: "leave the line, nothing changes",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::Backspace)],
        label: "backspace",
        action: PopupKey::DeleteChar,
        help: "delete a character; on an empty line, leave it",
    },
    PopupBinding {
        keys: &[Key::Ctrl('u')],
        label: "ctrl-u",
        action: PopupKey::ClearLine,
        help: "clear the line",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::Tab)],
        label: "tab",
        action: PopupKey::Complete,
        help: "complete a command name",
    },
    PopupBinding {
        keys: &[Key::Ctrl('c')],
        label: "ctrl-c",
        action: PopupKey::Quit,
        help: "quit",
    },
];

/// The confirmation popup of an action: it takes every key until it runs or is cancelled.
pub static CONFIRM_KEYS: &[PopupBinding] = &[
    PopupBinding {
        keys: &[Key::Code(KeyCode::Enter)],
        label: "enter",
        action: PopupKey::Submit,
        help: "run the actions shown (once the phrase and a required reason are typed)",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::Esc), Key::Ctrl('c')],
        label: "esc ctrl-c",
        action: PopupKey::Cancel,
        help: "cancel: nothing is done",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::Backspace)],
        label: "backspace",
        action: PopupKey::DeleteChar,
        help: "delete a character",
    },
    PopupBinding {
        keys: &[Key::Ctrl('u')],
        label: "ctrl-u",
        action: PopupKey::ClearLine,
        help: "clear what was typed",
    },
];

/// The help popup: it scrolls, so it is never cut; any other key closes it.
pub static HELP_KEYS: &[PopupBinding] = &[
    PopupBinding {
        keys: &[Key::Char('j'), Key::Code(KeyCode::Down)],
        label: "j ↓",
        action: PopupKey::ScrollDown,
        help: "scroll the help down",
    },
    PopupBinding {
        keys: &[Key::Char('k'), Key::Code(KeyCode::Up)],
        label: "k ↑",
        action: PopupKey::ScrollUp,
        help: "scroll the help up",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::PageDown), Key::Ctrl('f'), Key::Char(' ')],
        label: "pgdn space",
        action: PopupKey::PageDown,
        help: "a page down",
    },
    PopupBinding {
        keys: &[Key::Code(KeyCode::PageUp), Key::Ctrl('b')],
        label: "pgup",
        action: PopupKey::PageUp,
        help: "a page up",
    },
    PopupBinding {
        keys: &[Key::Char('g'), Key::Code(KeyCode::Home)],
        label: "g home",
        action: PopupKey::Top,
        help: "the top of the help",
    },
    PopupBinding {
        keys: &[Key::Char('G'), Key::Code(KeyCode::End)],
        label: "G end",
        action: PopupKey::Bottom,
        help: "the end of the help",
    },
    PopupBinding {
        keys: &[Key::Char('q'), Key::Ctrl('c')],
        label: "q ctrl-c",
        action: PopupKey::Quit,
        help: "quit",
    },
];

/// The action of `e` in a popup's table, if it has one.
pub fn popup_key(table: &[PopupBinding], e: &KeyEvent) -> Option<PopupKey> {
    table
        .iter()
        .find(|b| b.keys.iter().any(|k| k.matches(e)))
        .map(|b| b.action)
}

/// One `:` command.
pub struct CommandSpec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub args: &'static str,
    pub help: &'static str,
}

pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec { name: "overview", aliases: &["o", "ov"], args: "", help: "what is wrong now: leaked duplicates, stuck records, bad locks, DLQ, lag, rates" },
    CommandSpec { name: "trace", aliases: &["t", "tr"], args: "ID", help: "trace an orderNo, requestId or eventId across every layer" },
    CommandSpec { name: "locks", aliases: &["l", "lk", "lock"], args: "", help: "every lock:* key, its holder, PTTL and owner" },
    CommandSpec { name: "rates", aliases: &["r", "rate"], args: "", help: "interceptions per layer per minute; consumer lag" },
    CommandSpec { name: "stuck", aliases: &["s", "st"], args: "", help: "PROCESSING records older than the stuck threshold" },
    CommandSpec { name: "audit", aliases: &["a", "au"], args: "", help: "operator actions from ops_audit, newest first" },
    CommandSpec { name: "dlq", aliases: &["d", "dead"], args: "", help: "the DLQ's messages (last 7 days), their reason and what the consumer would do now" },
    CommandSpec { name: "report", aliases: &["rep"], args: "[html] [ID]", help: "write the report of ID (default: the order traced) to console.report_dir, as Markdown or html" },
    CommandSpec { name: "refresh", aliases: &["rf"], args: "DURATION", help: "polling period, e.g. :refresh 2s" },
    CommandSpec { name: "ctx", aliases: &["context"], args: "NAME", help: "switch to a context of the config file (idemguard contexts lists them): its Overview, read-only unless its own allow_actions" },
    CommandSpec { name: "help", aliases: &["h"], args: "", help: "keys and commands" },
    CommandSpec { name: "quit", aliases: &["q", "q!", "exit"], args: "", help: "leave the console" },
];

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Trace(String),
    Show(View),
    Refresh(Duration),
    /// `:report [html] [ID]`; no ID = the order on screen.
    Report {
        id: Option<String>,
        format: ReportFormat,
    },
    Help,
    Quit,
    /// `:ctx NAME`: the console reopens on that context of the config file.
    Context(String),
}

/// `trace ID`, `t ID`, `locks`, … ; the error says what is known.
pub fn parse_command(line: &str) -> Result<Command, String> {
    let line = line.trim().trim_start_matches(':').trim();
    let (word, rest) = line
        .split_once(char::is_whitespace)
        .map_or((line, ""), |(w, r)| (w, r.trim()));
    let spec = COMMANDS
        .iter()
        .find(|c| is_called(c, word))
        .ok_or_else(|| {
            let known: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
            let guess = nearest_command(word)
                .map_or(String::new(), |name| format!(": did you mean `:{name}`?"));
            format!(
                "unknown command `{word}`{guess} (known: {})",
                known.join(", ")
            )
        })?;
    if let Some(view) = View::ALL.into_iter().find(|v| v.name() == spec.name) {
        return Ok(match view {
            View::Trace if !rest.is_empty() => Command::Trace(rest.to_string()),
            view => Command::Show(view),
        });
    }
    match spec.name {
        "refresh" => humantime::parse_duration(rest)
            .map_err(|e| format!("`{rest}` is not a duration ({e}); e.g. :refresh 2s"))
            .and_then(|d| {
                if d < Duration::from_millis(100) {
                    Err("the refresh period must be at least 100ms".into())
                } else {
                    Ok(Command::Refresh(d))
                }
            }),
        "report" => Ok(report_command(rest)),
        "ctx" if rest.is_empty() => Err(":ctx needs a context's name, e.g. :ctx prod".into()),
        "ctx" => Ok(Command::Context(rest.to_string())),
        "help" => Ok(Command::Help),
        _ => Ok(Command::Quit),
    }
}

/// `word` is the command's name or one of its aliases, in any case.
fn is_called(c: &CommandSpec, word: &str) -> bool {
    c.name.eq_ignore_ascii_case(word) || c.aliases.iter().any(|a| a.eq_ignore_ascii_case(word))
}

/// The command a mistyped word was meant to be, as clap answers a mistyped subcommand: the
/// nearest name within two edits (a swapped pair of letters is one: `trcae`) that keeps at
/// least half of its letters — a short word of other letters is no one's typo.
fn nearest_command(word: &str) -> Option<&'static str> {
    let word = word.to_ascii_lowercase();
    COMMANDS
        .iter()
        .map(|c| (strsim::osa_distance(c.name, &word), c.name))
        .filter(|(edits, name)| *edits <= 2 && edits * 2 <= name.len())
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, name)| name)
}

/// `:report [html|md] [ID]`: the format word first, if any (no ID is spelled `html` or `md`).
fn report_command(rest: &str) -> Command {
    let (word, id) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(w, r)| (w, r.trim()));
    let (format, id) = match word.to_ascii_lowercase().as_str() {
        "html" => (ReportFormat::Html, id),
        "md" | "markdown" => (ReportFormat::Markdown, id),
        _ => (ReportFormat::Markdown, rest),
    };
    Command::Report {
        id: (!id.is_empty()).then(|| id.to_string()),
        format,
    }
}

/// Refresh periods `+` and `-` step through.
pub const REFRESH_STEPS: &[Duration] = &[
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
];

/// The help text, generated from [`KEYMAP`] and [`COMMANDS`].
pub fn help_lines() -> Vec<(String, String)> {
    let mut out = vec![("KEYS".to_string(), String::new())];
    for b in KEYMAP {
        out.push((b.label.to_string(), b.help.to_string()));
    }
    for (title, table) in [
        ("IN THE HELP (any other key closes it)", HELP_KEYS),
        ("ON THE : AND / LINES", LINE_KEYS),
        ("IN A CONFIRMATION", CONFIRM_KEYS),
    ] {
        out.push((String::new(), String::new()));
        out.push((title.to_string(), String::new()));
        for b in table {
            out.push((b.label.to_string(), b.help.to_string()));
        }
    }
    out.push((String::new(), String::new()));
    out.push(("COMMANDS".to_string(), String::new()));
    for c in COMMANDS {
        let mut names = format!(":{}", c.name);
        if !c.args.is_empty() {
            names.push(' ');
            names.push_str(c.args);
        }
        let aliases = c
            .aliases
            .iter()
            .map(|a| format!(":{a}"))
            .collect::<Vec<_>>()
            .join(" ");
        out.push((names, format!("{} (aliases {aliases})", c.help)));
    }
    out
}

/// The help as Markdown, one table per section of [`help_lines`] (`idemguard console --keys`;
/// the README's keymap is this text).
pub fn help_markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::new();
    for (key, text) in help_lines() {
        if key.is_empty() && text.is_empty() {
            out.push('\n');
        } else if text.is_empty() {
            out.push_str(&format!(
                "**{}**\n\n| Key | What it does |\n|---|---|\n",
                sentence(&key)
            ));
        } else {
            out.push_str(&format!("| `{}` | {} |\n", key, cell(&text)));
        }
    }
    out
}

/// `IN THE HELP (any other key closes it)` → `In the help (any other key closes it)`.
fn sentence(title: &str) -> String {
    let (caps, rest) = title.split_at(title.find(" (").unwrap_or(title.len()));
    let lower = caps.to_lowercase();
    let mut chars = lower.chars();
    let first = chars.next().map(|c| c.to_uppercase().collect::<String>());
    format!("{}{}{rest}", first.unwrap_or_default(), chars.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's keymap is what `?` shows: the text between its markers is
    /// [`help_markdown`], so a key added, changed or removed changes the README with it.
    #[test]
    fn the_readmes_keymap_is_the_help() {
        let readme = include_str!("../../../README.md");
        let (start, end) = (
            "<!-- keymap: idemguard console --keys -->\n",
            "<!-- /keymap -->",
        );
        let from = readme
            .find(start)
            .expect("README.md has the keymap's start marker")
            + start.len();
        let to = readme[from..]
            .find(end)
            .expect("README.md has the keymap's end marker")
            + from;
        assert_eq!(
            readme[from..to].trim(),
            help_markdown().trim(),
            "README.md's keymap differs from the console's: put the output of \
             `idemguard console --keys` between the markers"
        );
    }

    #[test]
    fn commands_and_aliases_parse() {
        assert_eq!(
            parse_command(":trace APP:ORDER:20261129:abcdefgh"),
            Ok(Command::Trace("APP:ORDER:20261129:abcdefgh".into()))
        );
        assert_eq!(parse_command("t  O123 "), Ok(Command::Trace("O123".into())));
        assert_eq!(parse_command("lk"), Ok(Command::Show(View::Locks)));
        assert_eq!(parse_command("rate"), Ok(Command::Show(View::Rates)));
        assert_eq!(parse_command("st"), Ok(Command::Show(View::Stuck)));
        assert_eq!(parse_command("q!"), Ok(Command::Quit));
        assert_eq!(
            parse_command("refresh 2s"),
            Ok(Command::Refresh(Duration::from_secs(2)))
        );
        assert!(parse_command("refresh 1ms").is_err());
        assert!(parse_command("pods")
            .unwrap_err()
            .contains("known: overview, trace, locks"));
    }

    #[test]
    fn report_takes_a_format_word_then_an_id() {
        let report = |id: Option<&str>, format| {
            Ok(Command::Report {
                id: id.map(str::to_string),
                format,
            })
        };
        assert_eq!(
            parse_command("report"),
            report(None, ReportFormat::Markdown)
        );
        assert_eq!(parse_command("rep html"), report(None, ReportFormat::Html));
        assert_eq!(
            parse_command(":report HTML 2026112915552791788bf4f7b15dd"),
            report(Some("2026112915552791788bf4f7b15dd"), ReportFormat::Html)
        );
        assert_eq!(
            parse_command("report APP:ORDER:20261129:x"),
            report(Some("APP:ORDER:20261129:x"), ReportFormat::Markdown)
        );
        assert_eq!(
            parse_command("report md O1"),
            report(Some("O1"), ReportFormat::Markdown)
        );
    }

    #[test]
    fn every_key_is_bound_once_and_in_the_help() {
        let mut seen = std::collections::HashSet::new();
        for b in KEYMAP {
            for k in b.keys {
                assert!(seen.insert(format!("{k:?}")), "{k:?} is bound twice");
            }
        }
        let help = help_lines();
        assert!(KEYMAP
            .iter()
            .all(|b| help.iter().any(|(k, _)| k == b.label)));
        assert!(help
            .iter()
            .any(|(k, v)| k == ":trace ID" && v.contains(":t :tr")));
        for table in [LINE_KEYS, CONFIRM_KEYS, HELP_KEYS] {
            let mut seen = std::collections::HashSet::new();
            for b in table {
                for k in b.keys {
                    assert!(
                        seen.insert(format!("{k:?}")),
                        "{k:?} is bound twice in a popup"
                    );
                }
                assert!(help.iter().any(|(k, v)| k == b.label && v == b.help));
            }
        }
    }

    /// `--view` and the `:` commands read one table of names: every view's name is its
    /// command's, its aliases open it too, and a typo is answered with the nearest view.
    #[test]
    fn a_view_is_named_as_its_command() {
        for v in View::ALL {
            assert_eq!(View::named(v.name()), Ok(v));
            assert_eq!(parse_command(v.name()), Ok(Command::Show(v)));
            assert!(COMMANDS.iter().any(|c| c.name == v.name()), "{v:?}");
        }
        assert_eq!(View::named("DLQ"), Ok(View::Dlq));
        assert_eq!(View::named("lk"), Ok(View::Locks));
        let e = View::named("dql").unwrap_err();
        assert!(e.contains("did you mean `dlq`?"), "{e}");
        assert!(
            e.contains("(views: overview, trace, locks, rates, stuck, audit, dlq)"),
            "{e}"
        );
        let e = View::named("report").unwrap_err();
        assert!(e.starts_with("unknown view `report` (views:"), "{e}");
        assert_eq!(View::Dlq.opening_command(), "idemguard console --view dlq");
    }

    #[test]
    fn the_overview_is_key_1_and_the_other_views_follow() {
        let key = |c| action_for(&KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        assert_eq!(View::ALL[0], View::Overview);
        for (i, v) in View::ALL.iter().enumerate() {
            let c = char::from_digit(i as u32 + 1, 10).unwrap();
            assert_eq!(key(c), Some(UiAction::Show(*v)), "key {c}");
        }
        assert_eq!(parse_command("ov"), Ok(Command::Show(View::Overview)));
    }
}
