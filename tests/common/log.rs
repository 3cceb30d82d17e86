//! The test process's one tracing subscriber. A process has one global subscriber, and the tests
//! of one binary share it: each layer here serves a kind of test — the test writer (what a failed
//! test prints), the service's log kept in memory (a test finds an error id in it), and the trace
//! events read back as values (a test checks the ids each lock decision carries). Each test reads
//! only what names its own keys or ids.
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// What the services of this process logged, and the trace events they emitted.
pub struct TestLog {
    log: Arc<Mutex<Vec<u8>>>,
    events: TraceEvents,
}

impl TestLog {
    /// Everything logged at `warn,idemguard=info`, as the log lines a service writes.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned()
    }

    /// Every `idemguard::trace` event so far.
    pub fn trace_events(&self) -> Vec<Seen> {
        self.events.0.lock().unwrap().clone()
    }
}

/// Installs the subscriber on the first call; every later call returns the same one.
pub fn test_log() -> &'static TestLog {
    static LOG: OnceLock<TestLog> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let writer = LogWriter(log.clone());
        let events = TraceEvents::default();
        let _ = tracing_subscriber::registry()
            .with(EnvFilter::new("warn,idemguard=info"))
            .with(tracing_subscriber::fmt::layer().with_test_writer())
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(move || writer.clone()),
            )
            .with(events.clone())
            .try_init();
        TestLog { log, events }
    })
}

#[derive(Clone)]
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A trace event, read back from the structured fields the tracer logs.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub outcome: String,
    pub order_no: String,
    pub detail: String,
}

impl Visit for Seen {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "outcome" => self.outcome = value.into(),
            "order_no" => self.order_no = value.into(),
            _ => {}
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "detail" {
            self.detail = format!("{value:?}");
        }
    }
}

#[derive(Clone, Default)]
struct TraceEvents(Arc<Mutex<Vec<Seen>>>);

impl<S: tracing::Subscriber> Layer<S> for TraceEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "idemguard::trace" {
            return;
        }
        let mut seen = Seen::default();
        event.record(&mut seen);
        self.0.lock().unwrap().push(seen);
    }
}
