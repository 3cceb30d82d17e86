//! Line of defense 3: the payment-event consumer (seed §4, §6.3). Duplicates are normal here —
//! a consumer crash before the offset commit, a rebalance, a producer retry — so the consumer
//! makes them harmless: a dedup state with a TTL drops what it has seen, every sink has its own
//! unique key, and the order state machine never goes back.

mod commit;
pub mod consumer;
pub mod dedup;
pub mod lag;
pub mod partitioner;
pub mod poison;
pub mod redrive;
pub mod sinks;

pub use consumer::{ConsumeOptions, ConsumeStats, PaymentConsumer};
