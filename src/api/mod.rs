//! The API layer in front of the three lines of defense: `Idempotency-Key` on every POST, an
//! idempotency record that replays the first response, a Redis fast path, and the order service
//! itself (`idemguard serve`). Seed §5.1–§5.3, §6.4.

pub mod edge;
pub mod fast_path;
pub mod guard;
pub mod idempotency;
pub mod metered;
pub mod payments;
pub mod problem;
pub mod server;
