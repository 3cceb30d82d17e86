//! The documents cannot rot: every command of the README and the guides runs as written, and the
//! architecture guide's layout and guarantee table name what exists.
mod readme;
