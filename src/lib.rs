//! idemguard: three lines of defense against duplicate orders, and an operations console that
//! shows where each duplicate was stopped — or where it got through.
//!
//! One module per layer of the defense system (seed §5.4), named as the trace events name them:
//! - [`db`] — line 1, the order database: unique keys, row locks, versions, fencing;
//! - [`lock`] — line 2, Redis locks;
//! - `stream` — line 3, the payment-event consumer;
//! - `api` — the Idempotency-Key layer in front of them;
//! - [`console`] — the operations console.
//!
//! Shared by all: [`contracts`] (identifiers, keys, trace events), [`config`], [`trace`]; and how
//! what other systems wrote is shown: [`untrusted`] (escaped, the one way to a terminal, a log
//! line or a report) and [`mask`] (sensitive fields masked).

pub mod api;
pub mod config;
pub mod console;
pub mod contracts;
pub mod db;
pub mod demo;
pub mod doctor;
pub mod kafka_client;
pub mod lock;
pub mod logging;
pub mod mask;
pub mod metrics;
pub mod ops;
pub mod private_file;
pub mod profile;
pub mod storm;
pub mod stream;
pub mod tls;
pub mod trace;
pub mod untrusted;

/// Every binary built on the library allocates with mimalloc: `idemguard serve`, the console,
/// and the tests and benches that run the service in their own process (a bench measures the
/// allocator the service runs with). With glibc's, `malloc` and `free` took 12–14 % of the
/// service's CPU in a storm of replays (BENCHMARKS.md, API).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
