//! The terminal and the main loop. The loop waits on one `select!` over the terminal's events,
//! the collectors' updates, a tick and a render interval; it never waits on a backend, so the
//! console answers keys whatever the services do. The terminal is restored on every way out:
//! `q`, Ctrl-C (a key in raw mode), SIGINT, SIGTERM, SIGHUP (the terminal went away: an ssh
//! session dropped), SIGQUIT, an error, or a panic (panic hook).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste, Event, EventStream};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use futures::{Stream, StreamExt};
use ratatui::backend::{Backend, CrosstermBackend};
use ratatui::Terminal;
use tokio::sync::mpsc;

use crate::config::{Config, ConfigSource};

use crate::console::tui::app::{App, Level, Opening};
use crate::console::tui::backend::{Backends, Update};
use crate::console::tui::ui;

/// Relative times (ages, PTTLs) move on at this pace.
pub const TICK: Duration = Duration::from_millis(500);
/// At most this many frames per second are drawn, and only when something changed.
pub const RENDER: Duration = Duration::from_millis(50);

/// Whether the console has taken the terminal (raw mode, alternate screen) and not given it
/// back. Restoring twice is not harmless: leaving the alternate screen again moves the cursor
/// back to where it was when the console started (tmux, xterm), so the panic hook's message
/// would be written over by the shell.
static TERMINAL_TAKEN: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back as it was: raw mode off, main screen, cursor shown. Only the first
/// call after the console took the terminal does anything: safe to call twice.
pub fn restore_terminal() {
    if !TERMINAL_TAKEN.swap(false, Ordering::SeqCst) {
        return;
    }
    let _ = disable_raw_mode();
    let _ = execute!(
        io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
}

/// Restores the terminal when dropped (normal exit, `?` on an error).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// The console's output to the terminal, held until ratatui flushes a complete frame, which then
/// leaves in one write inside a synchronized update (DEC mode 2026; a terminal without it ignores
/// it). Written straight through stdout's 1 KB line buffer, a frame reached the terminal in
/// pieces, and a terminal (or `tmux capture-pane`) could show half of one: a table's title
/// without its rows or right border. A frame not flushed (a panic mid-draw) is dropped, never
/// written after the terminal is restored.
struct WholeFrames<W: Write> {
    out: W,
    frame: Vec<u8>,
}

impl<W: Write> WholeFrames<W> {
    fn new(out: W) -> Self {
        WholeFrames {
            out,
            frame: Vec::new(),
        }
    }
}

impl<W: Write> Write for WholeFrames<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.frame.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.frame.is_empty() {
            let mut whole = Vec::with_capacity(self.frame.len() + 16);
            crossterm::queue!(whole, crossterm::terminal::BeginSynchronizedUpdate)?;
            whole.append(&mut self.frame);
            crossterm::queue!(whole, crossterm::terminal::EndSynchronizedUpdate)?;
            self.out.write_all(&whole)?;
        }
        self.out.flush()
    }
}

/// A panic prints on a restored terminal instead of a raw, alternate one.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
}

/// FAULT INJECTION: `IDEMGUARD_FAULT_CONSOLE=panic` or `=error` makes the
/// first key pressed panic, or fail the loop as a broken terminal would, so a test in a real
/// terminal can check it is restored on both ways out. Refused in production.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Panic,
    Error,
}

const FAULT_VAR: &str = "IDEMGUARD_FAULT_CONSOLE";

fn injected_fault(config: &Config) -> anyhow::Result<Option<Fault>> {
    let fault = match std::env::var(FAULT_VAR).as_deref() {
        Err(_) | Ok("") => return Ok(None),
        Ok("panic") => Fault::Panic,
        Ok("error") => Fault::Error,
        Ok(other) => anyhow::bail!(
            "{FAULT_VAR}={other:?}: the console's fault injection is \"panic\" or \"error\""
        ),
    };
    if config.environment.production {
        anyhow::bail!(
            "{FAULT_VAR} is fault injection and may not be used when environment.production = true"
        );
    }
    Ok(Some(fault))
}

/// The signals that end the console as `q` does, the terminal restored: SIGINT, SIGTERM, SIGHUP
/// and SIGQUIT. Listened to from before the console takes the terminal (a signal's default
/// action would end the process with the terminal raw and on the alternate screen) until it
/// gives it back.
pub struct QuitSignals {
    signals: [tokio::signal::unix::Signal; 4],
}

impl QuitSignals {
    pub fn listen() -> io::Result<QuitSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(QuitSignals {
            signals: [
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
                signal(SignalKind::quit())?,
            ],
        })
    }

    /// The next of them.
    async fn recv(&mut self) {
        let [a, b, c, d] = &mut self.signals;
        tokio::select! {
            _ = a.recv() => {}
            _ = b.recv() => {}
            _ = c.recv() => {}
            _ = d.recv() => {}
        }
    }
}

/// The terminal's event, or the injected fault when it is a key.
fn inject(fault: Option<Fault>, event: io::Result<Event>) -> io::Result<Event> {
    match (fault, &event) {
        (Some(Fault::Panic), Ok(Event::Key(_))) => {
            panic!("FAULT INJECTION: {FAULT_VAR}=panic, a key was pressed")
        }
        (Some(Fault::Error), Ok(Event::Key(_))) => Err(io::Error::other(format!(
            "FAULT INJECTION: {FAULT_VAR}=error, a key was pressed"
        ))),
        _ => event,
    }
}

/// `idemguard console`: the collectors, the terminal, the loop (read-only unless
/// `environment.allow_actions`).
pub async fn run(config: Config) -> anyhow::Result<()> {
    run_with(config, false).await
}

/// `idemguard console [--allow-actions]`: also starts the executor of confirmed actions.
pub async fn run_with(config: Config, allow_actions: bool) -> anyhow::Result<()> {
    run_opening(config, allow_actions, &Opening::Overview, None).await
}

/// The console open on one configuration: its collectors, executor and app.
struct Opened {
    backends: Backends,
    app: App,
}

impl Opened {
    fn start(config: &Config, allow_actions: bool, opening: &Opening, log_file: &str) -> Opened {
        let mut backends = Backends::spawn(config);
        let mut app = App::new(config, Some(backends.focus.clone()));
        app.ui.log_file = Some(log_file.to_string());
        app.allow_actions(allow_actions);
        let executor =
            backends.spawn_executor(config, allow_actions || config.environment.allow_actions);
        app.attach_executor(executor);
        app.open(opening);
        Opened { backends, app }
    }
}

/// `idemguard console [--allow-actions] [--view V | --trace ID]`: opens on `opening`. With
/// `contexts` (the source the configuration was loaded from), `:ctx NAME` reopens the console on
/// another context of the file: its Overview, its own actions policy (`--allow-actions` was for
/// the first), the old context's collectors and executor shut down first.
pub async fn run_opening(
    config: Config,
    allow_actions: bool,
    opening: &Opening,
    contexts: Option<&ConfigSource>,
) -> anyhow::Result<()> {
    // While the console owns the terminal, a log line on stderr would be drawn over its rows and
    // stay there: they go to a file (shown in the help screen) until the terminal is restored.
    let fault = injected_fault(&config)?;
    let log_path = crate::logging::console_log_path(&config);
    let logs = crate::logging::to_file(&log_path).map_err(|e| {
        anyhow::anyhow!(
            "cannot open the console's log file {}: {e} (set console.log_file)",
            log_path.display()
        )
    })?;
    let log_file = log_path.display().to_string();
    let mut signals = Some(QuitSignals::listen()?);
    let mut opened = Opened::start(&config, allow_actions, opening, &log_file);
    install_panic_hook();
    enable_raw_mode().map_err(|e| {
        anyhow::anyhow!("cannot put the terminal in raw mode (is stdout a terminal?): {e}")
    })?;
    TERMINAL_TAKEN.store(true, Ordering::SeqCst);
    let guard = TerminalGuard;
    execute!(
        io::stdout(),
        EnterAlternateScreen,
        EnableBracketedPaste,
        cursor::Hide
    )?;
    let mut terminal = Terminal::new(CrosstermBackend::new(WholeFrames::new(io::stdout())))?;
    let result = loop {
        let signals = match signals.take() {
            Some(s) => s,
            None => QuitSignals::listen()?,
        };
        let ran = run_loop(
            &mut terminal,
            &mut opened.app,
            EventStream::new().map(move |e| inject(fault, e)),
            &mut opened.backends.updates,
            signals,
            |text| {
                let mut out = io::stdout();
                let _ = out.write_all(osc52(text).as_bytes());
                let _ = out.flush();
            },
        )
        .await;
        let Some(name) = opened.app.switch_to.take().filter(|_| ran.is_ok()) else {
            break ran;
        };
        match switch_context(contexts, &name) {
            Ok(next) => {
                opened.backends.shutdown().await;
                opened = Opened::start(&next, false, &Opening::Overview, &log_file);
            }
            Err(e) => opened.app.ui.say(e, Level::Error),
        }
    };
    drop(terminal);
    drop(guard);
    // What is logged from here on — a statement `q` cancelled, which sqlx logs as slow when it
    // is dropped, during the shutdown or the runtime's — stays in the console's log, not on the
    // shell the terminal was given back to.
    logs.keep_until_exit();
    opened.backends.shutdown().await;
    result
}

/// The configuration of the context `name` of the file the console was opened from, or what
/// the status line says instead.
fn switch_context(contexts: Option<&ConfigSource>, name: &str) -> Result<Config, String> {
    let source = contexts.ok_or("this console was not opened from a config file: no contexts")?;
    let names = Config::contexts(source).map_err(|e| e.to_string())?;
    if names.is_empty() {
        return Err("the config file has no [contexts.NAME] tables (idemguard contexts)".into());
    }
    Config::load(&source.with_context(name)).map_err(|e| format!("context {name}: {e}"))
}

/// The OSC 52 sequence that puts `text` on the clipboard: the terminal does it (also over SSH,
/// and through tmux with `set-clipboard on`). Base64, so the text cannot end the sequence.
pub fn osc52(text: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(text);
    format!("\x1b]52;c;{b64}\x07")
}

/// The main loop over any ratatui backend and any event stream: the real terminal in
/// [`run`], `TestBackend` and a scripted stream of keys in the tests.
pub async fn run_loop<B: Backend, S>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    mut events: S,
    updates: &mut mpsc::Receiver<Update>,
    mut signals: QuitSignals,
    mut clipboard: impl FnMut(&str),
) -> anyhow::Result<()>
where
    S: Stream<Item = io::Result<Event>> + Unpin,
    B::Error: Send + Sync + 'static,
{
    let mut tick = tokio::time::interval(TICK);
    let mut render = tokio::time::interval(RENDER);
    render.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    if let Ok(size) = terminal.size() {
        // How far the help scrolls; kept current by the resize events.
        app.ui.size = (size.width, size.height);
    }
    app.refresh_views();
    terminal.draw(|f| ui::draw(f, app))?;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(e)) => app.handle_event(e),
                Some(Err(e)) => return Err(anyhow::anyhow!("reading the terminal: {e}")),
                None => break,
            },
            Some(u) = updates.recv() => {
                // A new lock scan replaces the last one: both were alive for a moment, so give
                // the pages of the old one back instead of keeping that peak.
                let scan = matches!(u, Update::Locks(_));
                app.apply(u);
                if scan {
                    release_freed_memory();
                }
            }
            _ = tick.tick() => app.on_tick(),
            _ = render.tick() => {
                if app.ui.dirty {
                    app.ui.dirty = false;
                    app.refresh_views();
                    terminal.draw(|f| ui::draw(f, app))?;
                }
            }
            _ = signals.recv() => app.ui.quit = true,
        }
        if let Some(text) = app.take_clipboard() {
            clipboard(&text);
        }
        if app.ui.quit || app.switch_to.is_some() {
            break;
        }
    }
    Ok(())
}

/// Call before any thread starts. glibc gives each thread that allocates an arena of its own (up
/// to 8 per core) and rarely hands memory freed in one back to the system, so a console whose
/// topic readers caught up on a large backlog would keep that peak for as long as it runs. Two
/// arenas are plenty for one UI thread and a few collectors. A no-op on other C libraries.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Hand the pages of freed memory back to the system (glibc keeps them by default, so the
/// resident size would stay at the highest it ever was). A no-op on other C libraries.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A terminal that records each write it receives.
    #[derive(Default, Clone)]
    struct Writes(std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>);

    impl Write for Writes {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().push(bytes.to_vec());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The clipboard's text travels base64-encoded: a BEL or an ESC in it cannot end the
    /// sequence early.
    #[test]
    fn osc52_carries_the_text_base64_encoded() {
        use base64::Engine;
        let seq = osc52("APP:ORDER:1\x07\x1b]0;x");
        let b64 = seq
            .strip_prefix("\x1b]52;c;")
            .and_then(|s| s.strip_suffix('\x07'))
            .unwrap();
        assert!(!b64.contains(['\x07', '\x1b']));
        let text = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(text, b"APP:ORDER:1\x07\x1b]0;x");
    }

    /// A full 220x40 frame (tens of kilobytes) reaches the terminal in one write, from the
    /// start of the synchronized update to its end; an unflushed frame is never written.
    #[test]
    fn a_frame_reaches_the_terminal_in_one_write() {
        let terminal = Writes::default();
        let backend = CrosstermBackend::new(WholeFrames::new(terminal.clone()));
        let mut t = Terminal::with_options(
            backend,
            ratatui::TerminalOptions {
                viewport: ratatui::Viewport::Fixed(ratatui::layout::Rect::new(0, 0, 220, 40)),
            },
        )
        .unwrap();
        t.draw(|f| {
            let text = "DLQ row │ ".repeat(40);
            let lines: Vec<ratatui::text::Line<'_>> = (0..40)
                .map(|_| ratatui::text::Line::raw(text.clone()))
                .collect();
            f.render_widget(ratatui::widgets::Paragraph::new(lines), f.area());
        })
        .unwrap();
        let writes = terminal.0.borrow();
        assert_eq!(writes.len(), 1, "{} writes", writes.len());
        let frame = String::from_utf8(writes[0].clone()).unwrap();
        assert!(frame.len() > 8 * 1024, "{}", frame.len());
        assert!(frame.starts_with("\x1b[?2026h") && frame.ends_with("\x1b[?2026l"));
        assert_eq!(frame.matches("row").count(), 40 * 22);

        let mut w = WholeFrames::new(Writes::default());
        w.write_all(b"half a frame").unwrap();
        assert!(
            w.out.0.borrow().is_empty(),
            "nothing leaves before the frame is complete"
        );
    }
}
