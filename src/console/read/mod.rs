//! The readers every face of the console shares — the TUI, the one-shot CLI twins and the
//! post-incident report. Nothing here draws, prints or knows a face: `read/` depends on the
//! lower layers only, and every face depends on it.
//!
//! From the bottom up:
//! - [`sources`]: the four sources (database, Redis, trace topic, payment topic), where they
//!   point, how long a round may take, how each answered ([`sources::BackendStatus`]);
//! - [`records`]: the database rows of a trace and the stuck records (SQL under
//!   `queries/*/console_*.sql`); [`locks`]: the `lock:*` keys (`SCAN`, never `KEYS`);
//!   [`topics`]: the Kafka client that reads by assignment, never joining a group;
//!   [`messages`]: one message decoded (a payment message, a trace event);
//! - [`catch_up`]: a read to a topic's current end, and when a reader is caught up (the TUI's
//!   live tail too); [`kafka`]: the reading of a trace's windows — which partitions and offsets
//!   ([`kafka::plan`]), the offsets at a time from the broker's time index
//!   ([`kafka::offsets`]), the scan ([`kafka::scan`]) — where [`window`] plans them;
//!   [`live`]: where a live reader starts;
//! - [`store`]: what is kept of the topics, bounded (the trace log, the payment index);
//!   [`bounded`]: one-shot reads of a topic to its current end into the stores, keeping what a
//!   trace names ([`bounded::Keep`]);
//! - [`timeline`]: the pure merge of one trace's pieces; [`trace`]: the one assembly of a trace
//!   from a target parsed once — [`trace::read_trace`] for the one-shot faces,
//!   [`trace::assemble`] over the TUI's stores;
//! - [`overview`]: what is wrong now — the leak and contradiction queries (the report's too) and
//!   the pure findings of the Overview;
//! - [`dlq`]: the DLQ's messages in a window, each with what the consumer would do with it now.

pub mod bounded;
pub mod catch_up;
pub mod dlq;
pub mod kafka;
pub mod live;
pub mod locks;
pub mod logs;
pub mod messages;
pub mod overview;
pub mod records;
pub mod sources;
pub mod store;
pub mod timeline;
pub mod topics;
pub mod trace;
pub mod window;
