//! The terminal UI: application state, the collectors that feed it, the views that draw it,
//! the keymap and the confirmation popup, and the loop that restores the terminal on any exit.

pub mod app;
pub mod backend;
pub mod confirm;
pub mod keymap;
pub mod terminal;
pub mod ui;
