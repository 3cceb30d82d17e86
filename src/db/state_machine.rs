//! The order state machine: the one table of allowed status transitions (seed §2.3, §4.4).
//!
//! The table has no cycle, so a status can never come back once left: a replayed payment
//! event can never move a PAID order back to CREATED, and nothing leaves a terminal status.
//! The SQL of a transition (`order_transition`) checks the same table, through the
//! predecessors bound into its `status IN (…)`, so a stale reader cannot skip it either.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The status of an order, stored as its upper-case name in `order_record.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Written by the create transaction, stock already taken.
    Created,
    /// Payment received (records the payment event that did it).
    Paid,
    /// Given up before payment.
    Cancelled,
    /// Money returned after payment.
    Refunded,
}

/// Every allowed transition, `(from, to)`. Anything not listed is refused.
pub const TRANSITIONS: &[(OrderStatus, OrderStatus)] = &[
    (OrderStatus::Created, OrderStatus::Paid),
    (OrderStatus::Created, OrderStatus::Cancelled),
    (OrderStatus::Paid, OrderStatus::Refunded),
];

/// The `status IN (?, ?, ?, ?)` of `order_transition` has this many slots; unused ones repeat
/// the first predecessor. A unit test keeps [`TRANSITIONS`] within it.
pub const MAX_PREDECESSORS: usize = 4;

impl OrderStatus {
    pub const ALL: [OrderStatus; 4] = [
        OrderStatus::Created,
        OrderStatus::Paid,
        OrderStatus::Cancelled,
        OrderStatus::Refunded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Created => "CREATED",
            OrderStatus::Paid => "PAID",
            OrderStatus::Cancelled => "CANCELLED",
            OrderStatus::Refunded => "REFUNDED",
        }
    }

    pub fn parse(raw: &str) -> Result<OrderStatus, String> {
        OrderStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == raw)
            .ok_or_else(|| {
                format!(
                    "`{}` is not an order status (known: CREATED, PAID, CANCELLED, REFUNDED)",
                    raw.escape_debug()
                )
            })
    }

    /// True when [`TRANSITIONS`] allows `self → to`.
    pub fn can_move_to(self, to: OrderStatus) -> bool {
        TRANSITIONS.contains(&(self, to))
    }

    /// The statuses an order may be in to move to `self`.
    pub fn predecessors(self) -> Vec<OrderStatus> {
        TRANSITIONS
            .iter()
            .filter(|(_, to)| *to == self)
            .map(|(from, _)| *from)
            .collect()
    }

    /// No transition leaves it.
    pub fn is_terminal(self) -> bool {
        !TRANSITIONS.iter().any(|(from, _)| *from == self)
    }

    /// The predecessors as the `MAX_PREDECESSORS` bind values of `order_transition`, padded
    /// with the first one; `None` when nothing may move to `self` (no UPDATE can apply).
    pub fn predecessor_binds(self) -> Option<[&'static str; MAX_PREDECESSORS]> {
        let preds = self.predecessors();
        let first = preds.first()?;
        let mut out = [first.as_str(); MAX_PREDECESSORS];
        for (slot, p) in out.iter_mut().zip(&preds) {
            *slot = p.as_str();
        }
        Some(out)
    }
}

impl fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrderStatus::*;

    #[test]
    fn names_round_trip() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Ok(s));
        }
        assert!(OrderStatus::parse("paid")
            .unwrap_err()
            .contains("not an order status"));
    }

    #[test]
    fn the_documented_transitions_hold() {
        assert!(Created.can_move_to(Paid));
        assert!(Created.can_move_to(Cancelled));
        assert!(Paid.can_move_to(Refunded));
        // A replayed or late event never moves an order back.
        assert!(!Paid.can_move_to(Created));
        assert!(!Paid.can_move_to(Cancelled));
        assert!(!Refunded.can_move_to(Paid));
        assert!(!Created.can_move_to(Created));
        assert!(Cancelled.is_terminal() && Refunded.is_terminal());
        assert!(!Created.is_terminal() && !Paid.is_terminal());
        assert_eq!(Created.predecessor_binds(), None);
        assert_eq!(Refunded.predecessor_binds(), Some(["PAID"; 4]));
    }

    /// No path leads back to a status once left: the table is acyclic.
    #[test]
    fn no_status_is_ever_reached_again() {
        fn reachable(from: OrderStatus, seen: &mut Vec<OrderStatus>) {
            for (f, to) in TRANSITIONS {
                if *f == from && !seen.contains(to) {
                    seen.push(*to);
                    reachable(*to, seen);
                }
            }
        }
        for s in OrderStatus::ALL {
            let mut seen = Vec::new();
            reachable(s, &mut seen);
            assert!(
                !seen.contains(&s),
                "{s} can come back to itself through {seen:?}"
            );
        }
    }

    #[test]
    fn predecessors_fit_the_sql() {
        for s in OrderStatus::ALL {
            assert!(
                s.predecessors().len() <= MAX_PREDECESSORS,
                "{s} has more predecessors than order_transition has slots"
            );
        }
    }
}
