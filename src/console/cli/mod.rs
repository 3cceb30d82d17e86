//! The one-shot faces of the console: the twins of the TUI's views (`idemguard trace`, `locks`,
//! `rates`, `stuck`: [`headless`], each printing a [`headless::Document`] — the envelope with
//! how each source answered, around the view's data) and the post-incident report
//! (`idemguard report`, `:report`: [`report`], an [`report::IncidentReport`] about a
//! [`report::ReportScope`]). They read through [`crate::console::read`] — the same trace
//! assembly as the TUI — and never through the TUI.

pub mod headless;
pub mod report;
