//! Line 1, the order service: one `Idempotency-Key`, one order, whatever the concurrency; a key
//! reused with another body refused; a refusal replayed byte for byte; a dead owner's record
//! taken over once; the outbox publishing each order event once.
mod api_edge;
mod api_layer;
mod order_service_faults;
