//! How long each lock value has been held. A lock renewed for ever looks healthy — its PTTL
//! keeps coming back — while it blocks every other copy; only its age gives it away. An
//! idemguard value carries its `acquired_at`; a Redisson hash or a plain token carries no time,
//! so a long-lived reader (the console) records when it first saw each value under each key and
//! counts from there. A value held longer than `console.lock_held_warning` is flagged
//! [`LockFlag::HeldLong`].

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::lock::{LockFlag, LockView};

/// Where a lock's holding time is counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldSince {
    /// The idemguard value's own `acquired_at`.
    AcquiredAt,
    /// The first time this reader saw this value under this key (a lower bound).
    FirstSeen,
}

/// How long the value a [`LockView`] shows has been held, when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LockHeld {
    pub since_ms: i64,
    pub held_ms: i64,
    pub since: HeldSince,
}

/// `console.lock_held_warning`, its 0s meaning 10 × `lock.ttl`.
pub fn warning(config: &crate::config::Config) -> Duration {
    match config.console.lock_held_warning {
        d if d.is_zero() => config.lock.ttl * 10,
        d => d,
    }
}

/// The first time each (key, value) was seen, across the scans of one reader. Values no longer
/// seen are forgotten at each scan, so the map is never larger than the last scan.
#[derive(Debug, Default)]
pub struct FirstSeen {
    seen: HashMap<(String, String), i64>,
}

impl FirstSeen {
    /// Judge every lock of one scan: how long it is held, and [`LockFlag::HeldLong`] past
    /// `warning`.
    pub fn judge(&mut self, locks: &mut [LockView], warning: Duration) {
        let mut seen = HashMap::with_capacity(locks.len());
        for l in locks.iter_mut() {
            let values = l.values().join("\n");
            if values.is_empty() {
                continue;
            }
            let id = (l.key.clone(), values);
            let first = *self.seen.get(&id).unwrap_or(&l.read_at_ms);
            seen.insert(id, first);
            judge_held(l, first, warning);
        }
        self.seen = seen;
    }
}

/// Set `l.held` from its holder's `acquired_at`, else from `first_seen_ms`, and flag it
/// [`LockFlag::HeldLong`] when held longer than `warning`.
pub fn judge_held(l: &mut LockView, first_seen_ms: i64, warning: Duration) {
    let (since_ms, since) = match l.holder() {
        Some(h) => (h.acquired_at, HeldSince::AcquiredAt),
        None => (first_seen_ms, HeldSince::FirstSeen),
    };
    let held_ms = (l.read_at_ms - since_ms).max(0);
    l.held = Some(LockHeld {
        since_ms,
        held_ms,
        since,
    });
    l.flags.retain(|f| *f != LockFlag::HeldLong);
    if held_ms > warning.as_millis() as i64 {
        l.flags.push(LockFlag::HeldLong);
        l.flags.sort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LockMode;

    fn redisson(at: i64, count: u32) -> LockView {
        let node = crate::lock::NodeLock {
            node: "127.0.0.1:6379".into(),
            state: crate::lock::NodeLockState::Other {
                redis_type: "hash".into(),
                pttl_ms: 30_000,
                fields: vec![("c1:1".into(), count.to_string())],
            },
        };
        LockView::new(
            "order:lock:O1".into(),
            LockMode::Single,
            vec![node],
            None,
            at,
        )
    }

    /// A Redisson lock renewed (its PTTL back at 30 s each scan) is flagged once the same value
    /// has been seen for longer than the warning; a new value starts again.
    #[test]
    fn a_value_seen_past_the_warning_is_flagged_and_a_new_value_starts_again() {
        let warning = Duration::from_secs(300);
        let mut first = FirstSeen::default();
        let mut scan = vec![redisson(1_000, 1)];
        first.judge(&mut scan, warning);
        assert_eq!(scan[0].held.unwrap().held_ms, 0);
        assert!(!scan[0].flags.contains(&LockFlag::HeldLong));
        let mut scan = vec![redisson(1_000 + 301_000, 1)];
        first.judge(&mut scan, warning);
        assert_eq!(scan[0].held.unwrap().held_ms, 301_000);
        assert_eq!(scan[0].held.unwrap().since, HeldSince::FirstSeen);
        assert!(
            scan[0].flags.contains(&LockFlag::HeldLong),
            "{:?}",
            scan[0].flags
        );
        let mut scan = vec![redisson(1_000 + 302_000, 2)];
        first.judge(&mut scan, warning);
        assert_eq!(scan[0].held.unwrap().held_ms, 0);
        assert!(!scan[0].flags.contains(&LockFlag::HeldLong));
    }

    /// An idemguard value counts from its own `acquired_at`, even on the first scan.
    #[test]
    fn an_idemguard_value_counts_from_its_acquisition() {
        let holder = crate::contracts::LockHolder {
            instance: "i1".into(),
            host: "h".into(),
            pid: 1,
            acquired_at: 0,
            ttl_ms: 30_000,
            fence: 1,
            nonce: "n".into(),
        };
        let node = LockView::held_on("127.0.0.1:6379", holder.to_value(), 30_000);
        let at = 600_000;
        let mut scan = vec![LockView::new(
            "lock:order:O1".into(),
            LockMode::Single,
            vec![node],
            None,
            at,
        )];
        FirstSeen::default().judge(&mut scan, Duration::from_secs(300));
        assert_eq!(scan[0].held.unwrap().since, HeldSince::AcquiredAt);
        assert_eq!(scan[0].held.unwrap().held_ms, 600_000);
        assert!(scan[0].flags.contains(&LockFlag::HeldLong));
    }
}
