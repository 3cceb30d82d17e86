//! The one-shot faces of the console: the twins of the TUI's views (`idemguard trace`, `locks`,
//! `rates`, `stuck`: [`headless`], each printing a [`headless::Document`] — the envelope with
//! how each source answered, around the view's data). They read through
//! [`crate::console::read`] — the same trace assembly as the TUI — and never through the TUI.
//! The post-incident report (`idemguard report`, `:report`) is [`crate::console::report`],
//! below both faces.

pub mod headless;
