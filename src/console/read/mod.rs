//! The readers every face of the console shares — the TUI, the one-shot CLI twins and the
//! post-incident report: database records, topic reads, locks, the logs they are kept in, and
//! the timeline that merges them.

pub mod locks;
pub mod records;
pub mod store;
pub mod timeline;
pub mod topics;
