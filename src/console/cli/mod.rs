//! The one-shot twins of the TUI's views (`idemguard trace`, `locks`, `rates`, `stuck`) and the
//! post-incident report (`idemguard report`, `:report`).

pub mod headless;
pub mod report;
