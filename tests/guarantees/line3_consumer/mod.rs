//! Line 3, the payment-event consumer: an event applied once however often it is delivered; one
//! bad message stops nothing and reaches the DLQ once; a database fault retried, never
//! dead-lettered.
mod consumer_faults;
mod stream_layer;
