//! The integration tests, one binary, a module per guarantee of the three lines of defense
//! (docs/architecture.md, "Which test proves which guarantee"). They run against the real services
//! of `scripts/stack up`; each test makes its own databases, topics and keys, so the tests of
//! every module run side by side in this one process.
//!
//! `cargo test --test guarantees line2_locks::` runs one part, `cargo test --test guarantees NAME`
//! one test.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;

/// Line 1, the order service: one `Idempotency-Key`, one order, its answer replayed.
mod line1_api;
/// Line 1, the order database: the unique keys, stock, states, retention.
mod line1_database;
/// Line 2: the Redis locks, one holder at a time, fenced.
mod line2_locks;
/// Line 3: each payment event applied once, however often it is delivered.
mod line3_consumer;
