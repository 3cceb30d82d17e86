//! Clients a finished read handed back, kept for the next read of the same process.
//!
//! Each of a trace's window reads needs two Kafka readers (a probe and a scanner, their fetch
//! sizes tuned apart), and a new librdkafka client connects afresh: over TLS that is a
//! bootstrap and a broker handshake each, ~10 a trace (BENCHMARKS.md, "TLS against
//! plaintext"). The console runs trace after trace for hours; a reader kept here is connected
//! already. Kept by the exact settings it was made with (two configurations never share one),
//! a few at most; the oldest goes when a newer one is put back.

use std::sync::Mutex;

/// Up to `max` idle clients, each with the key of the settings it was made with.
pub struct Idle<T> {
    kept: Mutex<Vec<(String, T)>>,
    max: usize,
}

impl<T> Idle<T> {
    pub const fn new(max: usize) -> Idle<T> {
        Idle {
            kept: Mutex::new(Vec::new()),
            max,
        }
    }

    /// An idle client made with `key`'s settings, the newest first.
    pub fn take(&self, key: &str) -> Option<T> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let at = kept.iter().rposition(|(k, _)| k == key)?;
        Some(kept.remove(at).1)
    }

    /// Keeps `client` for the next [`take`](Idle::take) of `key`; the oldest kept one is
    /// dropped (closed) when there are `max` already.
    pub fn put(&self, key: String, client: T) {
        let dropped = {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.push((key, client));
            (kept.len() > self.max).then(|| kept.remove(0))
        };
        // Closing a client waits on its threads: never while holding the lock.
        drop(dropped);
    }

    pub fn len(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::Idle;

    #[test]
    fn a_client_comes_back_only_for_its_own_settings_and_the_oldest_goes_first() {
        let idle = Idle::new(2);
        idle.put("a".into(), 1);
        idle.put("b".into(), 2);
        assert_eq!(idle.take("c"), None);
        idle.put("a".into(), 3);
        // Three put, two kept: the oldest (1) was dropped.
        assert_eq!(idle.len(), 2);
        assert_eq!(idle.take("a"), Some(3));
        assert_eq!(idle.take("a"), None);
        assert_eq!(idle.take("b"), Some(2));
        assert!(idle.is_empty());
    }
}
