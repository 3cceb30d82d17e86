//! The consumer's keyed dedup state (the Flink keyed-state pattern of seed §4.3): eventIds seen
//! within the TTL, bounded in memory, persisted in `processed_event` so it survives a restart
//! and a rebalance (a duplicate arriving at another member of the group is still caught there).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The in-memory half: eventId → expiry (epoch ms), oldest evicted first past `capacity`.
/// A miss here is not proof of "new": the caller then asks `processed_event`.
#[derive(Debug)]
pub struct DedupState {
    ttl_ms: i64,
    capacity: usize,
    expiry: HashMap<String, i64>,
    order: VecDeque<String>,
}

impl DedupState {
    pub fn new(ttl: Duration, capacity: usize) -> DedupState {
        DedupState {
            ttl_ms: ttl.as_millis() as i64,
            capacity: capacity.max(1),
            expiry: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// True when `event_id` was seen and its TTL has not run out at `now_ms`.
    pub fn contains(&mut self, event_id: &str, now_ms: i64) -> bool {
        match self.expiry.get(event_id) {
            Some(&until) if until > now_ms => true,
            Some(_) => {
                self.expiry.remove(event_id);
                false
            }
            None => false,
        }
    }

    /// Remember an event applied (or found applied) at `now_ms`.
    pub fn remember(&mut self, event_id: &str, now_ms: i64) {
        if self
            .expiry
            .insert(event_id.to_string(), now_ms + self.ttl_ms)
            .is_none()
        {
            self.order.push_back(event_id.to_string());
        }
        while self.expiry.len() > self.capacity {
            match self.order.pop_front() {
                Some(oldest) => {
                    self.expiry.remove(&oldest);
                }
                None => break,
            }
        }
        // Ids already expired and removed leave stale entries in `order`; keep it bounded too.
        if self.order.len() > self.capacity * 2 {
            let expiry = &self.expiry;
            self.order.retain(|id| expiry.contains_key(id));
        }
    }

    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_within_ttl_and_forgets_after() {
        let mut d = DedupState::new(Duration::from_millis(1000), 10);
        d.remember("e1", 0);
        assert!(d.contains("e1", 999));
        assert!(!d.contains("e1", 1000));
        assert!(!d.contains("e2", 0));
    }

    #[test]
    fn memory_is_bounded_oldest_first() {
        let mut d = DedupState::new(Duration::from_secs(60), 3);
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            d.remember(id, i as i64);
        }
        assert_eq!(d.len(), 3);
        assert!(!d.contains("a", 10), "the oldest is evicted");
        assert!(d.contains("d", 10));
        for i in 0..1000 {
            d.remember(&format!("x{i}"), 100);
        }
        assert_eq!(d.len(), 3);
        assert!(d.order.len() <= 6);
    }
}
