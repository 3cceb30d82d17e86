//! Line 2, the Redis locks: one holder at a time; only the holder releases; the watchdog renews
//! only its own lock; a holder whose lock expired cannot write (fence tokens); RedLock's quorum;
//! the same on the three-master Redis Cluster.
mod cluster;
mod lock_attacks;
mod lock_held;
mod lock_layer;
