//! Status transitions of an order, one at a time or a batch at once.
//!
//! - **Transitions** (seed §2.3, §4.4): an optimistic `UPDATE … WHERE version = ? AND status IN
//!   (predecessors)`; when it matches nothing the row is re-read: already in the target status
//!   is an idempotent success, anything else is refused. The allowed moves are the one table in
//!   [`crate::db::state_machine`].
//! - **Fencing** (the answer to seed §3.3's clock objection): a write made under a lock carries
//!   the lock's fence token; a token lower than the one stored on the row is refused, so a
//!   holder whose lock expired during a pause cannot overwrite its successor's work.
//!
//! [`judge`] is the one place the rules are written; the single transition and the batch both
//! ask it.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use sqlx::Row;

use super::{db_error, order_from_row, OrderError, OrderRecord, Orders};
use crate::contracts::{now_ms, Layer, Outcome, TraceEvent};
use crate::db::bounds::Transaction;
use crate::db::is_unique_violation;
use crate::db::state_machine::OrderStatus;

/// A requested status change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub order_no: String,
    pub to: OrderStatus,
    /// Required for PAID (and only there): the payment event that caused it, recorded in the
    /// unique `payment_event_id`, so the same event can never pay a second order.
    pub payment_event_id: Option<String>,
    /// `Some(v)`: apply only to version `v` (the caller decided on what it read at `v`); a
    /// newer version is `Rejected`. `None`: read the current row, check the state machine,
    /// and compare-and-set on the version just read.
    pub expected_version: Option<i64>,
    /// Fence token of the lock held for this write; `None` for a write made without a lock
    /// (the version and the state machine still guard it).
    pub fence: Option<i64>,
}

impl Transition {
    /// A move to `to` (not PAID: use [`Transition::paid`]).
    pub fn to(order_no: impl Into<String>, to: OrderStatus) -> Transition {
        Transition {
            order_no: order_no.into(),
            to,
            payment_event_id: None,
            expected_version: None,
            fence: None,
        }
    }

    /// CREATED → PAID caused by `payment_event_id`.
    pub fn paid(order_no: impl Into<String>, payment_event_id: impl Into<String>) -> Transition {
        Transition {
            order_no: order_no.into(),
            to: OrderStatus::Paid,
            payment_event_id: Some(payment_event_id.into()),
            expected_version: None,
            fence: None,
        }
    }

    pub fn with_fence(mut self, fence: i64) -> Transition {
        self.fence = Some(fence);
        self
    }

    pub fn with_expected_version(mut self, version: i64) -> Transition {
        self.expected_version = Some(version);
        self
    }

    fn validate(&self) -> Result<(), OrderError> {
        match (self.to, &self.payment_event_id) {
            (OrderStatus::Paid, None) => Err(OrderError::InvalidRequest(format!(
                "the PAID transition of order {} must name its payment event (payment_event_id), so a replay of that event is recognised",
                self.order_no
            ))),
            (OrderStatus::Paid, Some(e)) if e.is_empty() || e.len() > 64 => Err(OrderError::InvalidRequest(format!(
                "payment event id `{}` must be 1-64 characters",
                e.escape_debug()
            ))),
            (to, Some(_)) if to != OrderStatus::Paid => Err(OrderError::InvalidRequest(format!(
                "only the PAID transition records a payment event; order {} → {to} named one",
                self.order_no
            ))),
            _ => Ok(()),
        }
    }
}

/// The result of a transition. Only database failures are errors; every decision is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionOutcome {
    /// Written: the order after the write.
    Applied(OrderRecord),
    /// The order was already in the target status; nothing written (idempotent success). For
    /// PAID, compare `payment_event_id` to tell a replayed event from a second payment.
    AlreadyApplied(OrderRecord),
    /// The state machine refuses the move from the current status, or `expected_version` is
    /// no longer current. The order as it is.
    Rejected(OrderRecord),
    /// The row was last written under a newer fence token than `offered`: this writer's lock
    /// expired and a successor took over. Nothing written.
    FenceRejected { current: OrderRecord, offered: i64 },
}

impl TransitionOutcome {
    /// The order after the decision.
    pub fn order(&self) -> &OrderRecord {
        match self {
            TransitionOutcome::Applied(o)
            | TransitionOutcome::AlreadyApplied(o)
            | TransitionOutcome::Rejected(o)
            | TransitionOutcome::FenceRejected { current: o, .. } => o,
        }
    }

    /// Applied or AlreadyApplied: the order is in the requested status.
    pub fn is_success(&self) -> bool {
        matches!(
            self,
            TransitionOutcome::Applied(_) | TransitionOutcome::AlreadyApplied(_)
        )
    }

    /// The trace outcome of this decision.
    pub fn outcome(&self) -> Outcome {
        match self {
            TransitionOutcome::Applied(_) => Outcome::TransitionApplied,
            TransitionOutcome::AlreadyApplied(_) => Outcome::TransitionAlreadyApplied,
            TransitionOutcome::Rejected(_) => Outcome::TransitionRejected,
            TransitionOutcome::FenceRejected { .. } => Outcome::FenceRejected,
        }
    }
}

impl Orders {
    /// Apply `t` in a transaction of its own.
    pub async fn transition(&self, t: &Transition) -> Result<TransitionOutcome, OrderError> {
        let start = Instant::now();
        let db = &self.db;
        let mut tx = db
            .begin()
            .await
            .map_err(|e| db_error(db, "begin the transition", e))?;
        let outcome = self.decide_transition(&mut tx, t).await?;
        tx.commit()
            .await
            .map_err(|e| db_error(db, "commit the transition", e))?;
        self.emit_transition(t, &outcome, start);
        Ok(outcome)
    }

    /// Apply `t` inside the caller's transaction (`&mut *tx`), e.g. the payment consumer's
    /// "order → PAID" sink next to its own writes. The row stays locked until the caller
    /// commits; the trace event is emitted when the decision is made, so a caller that rolls
    /// back afterwards should say so in its own event. On PostgreSQL an `Err` leaves the
    /// caller's transaction aborted: roll it back.
    pub async fn transition_in(
        &self,
        conn: &mut Transaction<'_>,
        t: &Transition,
    ) -> Result<TransitionOutcome, OrderError> {
        let start = Instant::now();
        let outcome = self.decide_transition(conn, t).await?;
        self.emit_transition(t, &outcome, start);
        Ok(outcome)
    }

    async fn decide_transition(
        &self,
        conn: &mut Transaction<'_>,
        t: &Transition,
    ) -> Result<TransitionOutcome, OrderError> {
        t.validate()?;
        let db = &self.db;
        let Some(predecessors) = t.to.predecessor_binds() else {
            // Nothing may move to this status (CREATED): only the create transaction writes it.
            let current = self.current(conn, &t.order_no).await?;
            return Ok(match judge(&current, t) {
                Verdict::AlreadyApplied => TransitionOutcome::AlreadyApplied(current),
                Verdict::FenceRejected(offered) => {
                    TransitionOutcome::FenceRejected { current, offered }
                }
                _ => TransitionOutcome::Rejected(current),
            });
        };
        let mut version = match t.expected_version {
            Some(v) => v,
            None => {
                let current = self.read(conn, "order_by_order_no", &t.order_no).await?;
                match judge(&current, t) {
                    Verdict::Proceed => current.version,
                    refused => return Ok(refused.outcome(current)),
                }
            }
        };
        // Two rounds at most: after a miss, the re-read holds the row lock, so the second
        // UPDATE sees exactly the version it was given. The third is a safety bound.
        for _ in 0..3 {
            let done = sqlx::query(db.sql("order_transition"))
                .bind(t.to.as_str())
                .bind(t.fence)
                .bind(t.payment_event_id.as_deref())
                .bind(now_ms())
                .bind(t.order_no.as_str())
                .bind(version)
                .bind(predecessors[0])
                .bind(predecessors[1])
                .bind(predecessors[2])
                .bind(predecessors[3])
                .bind(t.fence)
                .execute(&mut *conn)
                .await
                .map_err(|e| match (&t.payment_event_id, is_unique_violation(&e)) {
                    (Some(event_id), true) => OrderError::PaymentEventTaken {
                        event_id: event_id.clone(),
                        order_no: t.order_no.clone(),
                    },
                    _ => db_error(db, "update the order status", e),
                })?;
            let current = self.current(conn, &t.order_no).await?;
            if done.rows_affected() == 1 {
                return Ok(TransitionOutcome::Applied(current));
            }
            match judge(&current, t) {
                // Still a legal move: someone else wrote the row in between (or our read was
                // an older snapshot). Compare-and-set again on what is there now.
                Verdict::Proceed if t.expected_version.is_none() => version = current.version,
                // The caller decided on version `expected_version`, which is gone.
                Verdict::Proceed => return Ok(TransitionOutcome::Rejected(current)),
                refused => return Ok(refused.outcome(current)),
            }
        }
        Ok(TransitionOutcome::Rejected(
            self.current(conn, &t.order_no).await?,
        ))
    }

    /// Apply a batch of transitions inside the caller's transaction with three statements
    /// whatever its size (the payment consumer's order sink): lock the batch's orders (one
    /// `SELECT … FOR UPDATE`, in orderNo order), read which orders the batch's payment events
    /// already paid, judge every transition in code with the same rules as
    /// [`Orders::transition_in`] — in batch order, each seeing the ones before it — and write
    /// the applied ones with one `UPDATE`. The decisions are those of `transition_in` applied
    /// one by one in batch order.
    ///
    /// One result per transition: `NotFound`, `PaymentEventTaken` and `InvalidRequest` are
    /// that transition's; a database failure is the outer `Err` (roll back: on PostgreSQL the
    /// transaction is aborted). A trace event per decision, as `transition_in` emits.
    pub async fn transition_batch_in(
        &self,
        conn: &mut Transaction<'_>,
        batch: &[Transition],
    ) -> Result<Vec<Result<TransitionOutcome, OrderError>>, OrderError> {
        let start = Instant::now();
        let mut current = self.lock_batch_orders(conn, batch).await?;
        let mut paid_by = self.paid_by_events(conn, batch).await?;
        let now = now_ms();
        let mut pending: Vec<BatchWrite> = Vec::new();
        let mut out = Vec::with_capacity(batch.len());
        for t in batch {
            if let Err(e) = t.validate() {
                out.push(Err(e));
                continue;
            }
            let Some(cur) = current.get(&t.order_no) else {
                out.push(Err(OrderError::NotFound {
                    order_no: t.order_no.clone(),
                }));
                continue;
            };
            match judge(cur, t) {
                Verdict::Proceed if t.expected_version.is_some_and(|v| v != cur.version) => {
                    out.push(Ok(TransitionOutcome::Rejected(cur.clone())));
                    continue;
                }
                Verdict::Proceed => {}
                refused => {
                    out.push(Ok(refused.outcome(cur.clone())));
                    continue;
                }
            }
            if let Some(event_id) = &t.payment_event_id {
                if paid_by
                    .get(event_id)
                    .is_some_and(|other| *other != t.order_no)
                {
                    out.push(Err(OrderError::PaymentEventTaken {
                        event_id: event_id.clone(),
                        order_no: t.order_no.clone(),
                    }));
                    continue;
                }
            }
            // One write per order and statement: a second move of an order already moved in
            // this batch goes after the first is written.
            if pending.iter().any(|w| w.order_no == t.order_no) {
                self.write_batch(conn, &mut pending, now).await?;
            }
            let fence = t.fence.unwrap_or(0);
            pending.push(BatchWrite {
                order_no: t.order_no.clone(),
                version: cur.version,
                status: t.to.as_str(),
                fence,
                payment_event_id: t.payment_event_id.clone(),
            });
            let mut after = cur.clone();
            after.status = t.to;
            after.version += 1;
            after.fence = after.fence.max(fence);
            after.payment_event_id = t.payment_event_id.clone().or(after.payment_event_id);
            after.updated_at = now;
            if let Some(event_id) = &t.payment_event_id {
                paid_by.insert(event_id.clone(), t.order_no.clone());
            }
            out.push(Ok(TransitionOutcome::Applied(after.clone())));
            current.insert(t.order_no.clone(), after);
        }
        self.write_batch(conn, &mut pending, now).await?;
        for (t, result) in batch.iter().zip(&out) {
            if let Ok(outcome) = result {
                self.emit_transition(t, outcome, start);
            }
        }
        Ok(out)
    }

    /// Step 1 of [`Orders::transition_batch_in`]: the batch's orders, locked (`SELECT … FOR
    /// UPDATE`) in orderNo order — the lock order is what keeps two members from deadlocking.
    async fn lock_batch_orders(
        &self,
        conn: &mut Transaction<'_>,
        batch: &[Transition],
    ) -> Result<HashMap<String, OrderRecord>, OrderError> {
        let db = &self.db;
        // Sorted and distinct: MariaDB takes the row locks in the order of this JSON list, not
        // of the statement's ORDER BY, so two members locking overlapping batches in different
        // orders deadlocked (tests/guarantees/line3_consumer/consumer_faults.rs,
        // reverse_order_batches_never_deadlock_mysql).
        let mut order_nos: Vec<&str> = batch.iter().map(|t| t.order_no.as_str()).collect();
        order_nos.sort_unstable();
        order_nos.dedup();
        let rows = sqlx::query(db.sql("order_lock_many"))
            .persistent(db.keep_batch_plans())
            .bind(serde_json::to_string(&order_nos).expect("strings serialize"))
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(db, "lock the batch's orders", e))?;
        let mut current = HashMap::with_capacity(rows.len());
        for row in &rows {
            let o = order_from_row(db, row)?;
            current.insert(o.order_no.clone(), o);
        }
        Ok(current)
    }

    /// Step 2 of [`Orders::transition_batch_in`]: which order each of the batch's payment
    /// events already paid (event → orderNo).
    async fn paid_by_events(
        &self,
        conn: &mut Transaction<'_>,
        batch: &[Transition],
    ) -> Result<HashMap<String, String>, OrderError> {
        let db = &self.db;
        let events: Vec<&str> = batch
            .iter()
            .filter_map(|t| t.payment_event_id.as_deref())
            .collect();
        let mut paid_by = HashMap::new();
        if !events.is_empty() {
            let rows = sqlx::query(db.sql("order_by_payment_events"))
                .persistent(db.keep_batch_plans())
                .bind(serde_json::to_string(&events).expect("strings serialize"))
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| {
                    db_error(db, "read which orders the batch's payment events paid", e)
                })?;
            for row in &rows {
                let order_no: String = row
                    .try_get("order_no")
                    .map_err(|e| db_error(db, "decode an order row", e))?;
                let event: String = row
                    .try_get("payment_event_id")
                    .map_err(|e| db_error(db, "decode an order row", e))?;
                paid_by.insert(event, order_no);
            }
        }
        Ok(paid_by)
    }

    /// Writes the decided transitions of [`Orders::transition_batch_in`] with one UPDATE.
    async fn write_batch(
        &self,
        conn: &mut Transaction<'_>,
        pending: &mut Vec<BatchWrite>,
        now: i64,
    ) -> Result<(), OrderError> {
        if pending.is_empty() {
            return Ok(());
        }
        let db = &self.db;
        let done = sqlx::query(db.sql("order_transition_many"))
            .persistent(db.keep_batch_plans())
            .bind(serde_json::to_string(&*pending).expect("writes serialize"))
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(|e| {
                let what = if is_unique_violation(&e) {
                    "write the batch's transitions (a payment event of the batch paid another order meanwhile; the batch is retried)"
                } else {
                    "write the batch's transitions"
                };
                db_error(db, what, e)
            })?;
        if done.rows_affected() != pending.len() as u64 {
            return Err(db_error(
                db,
                "write the batch's transitions",
                sqlx::Error::Protocol(format!(
                    "{} of {} locked orders matched their version; roll back and retry the batch",
                    done.rows_affected(),
                    pending.len()
                )),
            ));
        }
        pending.clear();
        Ok(())
    }

    fn emit_transition(&self, t: &Transition, outcome: &TransitionOutcome, start: Instant) {
        let o = outcome.order();
        let detail = match outcome {
            TransitionOutcome::Applied(o) => {
                format!("-> {} (version {}, fence {})", o.status, o.version, o.fence)
            }
            TransitionOutcome::AlreadyApplied(o) => {
                match (&t.payment_event_id, &o.payment_event_id) {
                    (Some(asked), Some(by)) if asked != by => {
                        format!(
                            "already {} by payment event {by}; this event {asked} changed nothing",
                            o.status
                        )
                    }
                    _ => format!("already {} (version {})", o.status, o.version),
                }
            }
            TransitionOutcome::Rejected(o) => match t.expected_version {
                Some(v) if v != o.version && o.status.can_move_to(t.to) => {
                    format!(
                        "{} -> {} refused: version {v} is stale (now {})",
                        o.status, t.to, o.version
                    )
                }
                _ => format!(
                    "{} -> {} is not a move of the state machine",
                    o.status, t.to
                ),
            },
            TransitionOutcome::FenceRejected { current, offered } => {
                format!("-> {} refused: fence token {offered} is older than {} (the lock expired and was taken over)", t.to, current.fence)
            }
        };
        let mut ev = TraceEvent::new(Layer::Db, outcome.outcome())
            .order_no(&o.order_no)
            .request_id(&o.req_id)
            .detail(detail)
            .since(start);
        if let Some(e) = t
            .payment_event_id
            .as_deref()
            .or(o.payment_event_id.as_deref())
        {
            ev = ev.event_id(e);
        }
        self.tracer.emit(ev);
    }
}

/// One decided transition of a batch, as `order_transition_many` reads it.
#[derive(Debug, Serialize)]
struct BatchWrite {
    order_no: String,
    /// The version the decision was made on.
    version: i64,
    status: &'static str,
    fence: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_event_id: Option<String>,
}

/// The decision on a transition given the current row: the one place its rules are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Proceed,
    AlreadyApplied,
    FenceRejected(i64),
    Rejected,
}

impl Verdict {
    fn outcome(self, current: OrderRecord) -> TransitionOutcome {
        match self {
            Verdict::AlreadyApplied => TransitionOutcome::AlreadyApplied(current),
            Verdict::FenceRejected(offered) => {
                TransitionOutcome::FenceRejected { current, offered }
            }
            Verdict::Proceed | Verdict::Rejected => TransitionOutcome::Rejected(current),
        }
    }
}

fn judge(current: &OrderRecord, t: &Transition) -> Verdict {
    // Already there: a replay (same event, retried request) succeeds without writing. This
    // comes first, so a retry is answered the same whatever happened to its lock since.
    if current.status == t.to {
        return Verdict::AlreadyApplied;
    }
    if let Some(offered) = t.fence {
        if offered < current.fence {
            return Verdict::FenceRejected(offered);
        }
    }
    if !current.status.can_move_to(t.to) {
        return Verdict::Rejected;
    }
    Verdict::Proceed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(status: OrderStatus, version: i64, fence: i64) -> OrderRecord {
        OrderRecord {
            id: 1,
            req_id: "APP:ORDER:20261129:abcdefgh".into(),
            order_no: "O1".into(),
            user_id: 1,
            sku_id: 1,
            quantity: 1,
            amount: 100,
            status,
            version,
            fence,
            payment_event_id: None,
            replay_count: 0,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn judge_follows_the_state_machine_and_the_fence() {
        use OrderStatus::*;
        let paid = Transition::paid("O1", "E1");
        assert_eq!(judge(&order(Created, 0, 0), &paid), Verdict::Proceed);
        assert_eq!(judge(&order(Paid, 1, 0), &paid), Verdict::AlreadyApplied);
        assert_eq!(judge(&order(Cancelled, 1, 0), &paid), Verdict::Rejected);
        assert_eq!(
            judge(&order(Paid, 1, 0), &Transition::to("O1", Created)),
            Verdict::Rejected
        );
        assert_eq!(
            judge(&order(Paid, 1, 0), &Transition::to("O1", Cancelled)),
            Verdict::Rejected
        );
        // A stale token is refused; an equal or newer one passes.
        assert_eq!(
            judge(&order(Created, 0, 7), &paid.clone().with_fence(6)),
            Verdict::FenceRejected(6)
        );
        assert_eq!(
            judge(&order(Created, 0, 7), &paid.clone().with_fence(7)),
            Verdict::Proceed
        );
        assert_eq!(
            judge(&order(Created, 0, 7), &paid.clone().with_fence(8)),
            Verdict::Proceed
        );
        // Unfenced writes are not judged by the fence.
        assert_eq!(judge(&order(Created, 0, 7), &paid), Verdict::Proceed);
    }

    #[test]
    fn transitions_validate_the_payment_event() {
        assert!(Transition::paid("O1", "E1").validate().is_ok());
        let mut no_event = Transition::paid("O1", "E1");
        no_event.payment_event_id = None;
        assert!(no_event
            .validate()
            .unwrap_err()
            .to_string()
            .contains("must name its payment event"));
        let mut stray = Transition::to("O1", OrderStatus::Cancelled);
        stray.payment_event_id = Some("E1".into());
        assert!(stray
            .validate()
            .unwrap_err()
            .to_string()
            .contains("only the PAID transition"));
    }
}
