//! The integration tests, one binary, a module per guarantee (docs/architecture.md, "Which test
//! proves which guarantee"). They run against the real services of `scripts/stack up`; each test
//! makes its own databases, topics and keys, so the tests of every module run side by side in
//! this one process.
//!
//! `cargo test --test guarantees line2_locks::` runs one part, `cargo test --test guarantees NAME`
//! one test.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;

/// The operations console: operator actions that change only what the operator saw.
mod console;
/// The README and the guides, run as written.
mod documents;
/// A duplicate that got through is found and named.
mod duplicates_found;
/// Line 1, the order service: one `Idempotency-Key`, one order, its answer replayed.
mod line1_api;
/// Line 1, the order database: the unique keys, stock, states, retention.
mod line1_database;
/// Line 2: the Redis locks, one holder at a time, fenced.
mod line2_locks;
/// Line 3: each payment event applied once, however often it is delivered.
mod line3_consumer;
/// Hostile input, secrets and bounds.
mod security;
/// A team's own system read under its source profile.
mod team_system;
