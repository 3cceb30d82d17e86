//! Finalize a stuck idempotency record: lock its row, reconcile with `order_record` under that
//! lock, write with `WHERE … status = 'PROCESSING' AND version = ?`, then give the fast path the
//! final response.

mod foreign;
pub use foreign::{TeamRecord, UNFENCED};

use std::fmt;

use sqlx::AnyConnection;

use super::{json, Action, ActionOutcome, ActionResult, Actions};
use crate::api::fast_path::FastPathValue;
use crate::api::idempotency::{self, FinalResponse, IdempotencyRecord, FAILED, PROCESSING};
use crate::api::problem::Problem;
use crate::contracts::{keys, now_ms};
use crate::db::is_lock_timeout;
use crate::db::orders::{find_order, find_order_locked, OrderKey, OrderRecord};

/// The response body stored when an operator fails a request that created nothing: 422
/// `request-abandoned`, never 409 — clients retry a 409 with the same key for ever, and this
/// request will never complete; the status says "do not send this again as it is".
pub fn abandoned_problem(request_id: &str, reason: Option<&str>) -> Problem {
    let why = reason.map_or(String::new(), |r| format!(" (operator: {r})"));
    Problem::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "request-abandoned",
        "The request was abandoned",
        format!(
            "the request with Idempotency-Key {request_id} stopped before creating anything and was closed by an operator{why}; \
             no order exists for it — send the request again with a new Idempotency-Key"
        ),
    )
}

impl Actions {
    pub(super) async fn finalize(
        &self,
        action: &Action,
        request_id: &str,
        expect_version: Option<i64>,
        reason: Option<&str>,
    ) -> ActionResult {
        if self.db.queries.is_foreign() {
            return self
                .finalize_foreign(action, request_id, expect_version, reason)
                .await;
        }
        let rec = match idempotency::get(&self.db, request_id).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                return self
                    .refuse(
                        action,
                        None,
                        format!("no idempotency record for {request_id}"),
                    )
                    .await
            }
            Err(e) => {
                return Self::result(
                    action,
                    ActionOutcome::Error,
                    None,
                    None,
                    format!("not performed: reading the record failed ({e})"),
                    None,
                );
            }
        };
        let before = Some(json(&rec));
        if !self.allowed {
            return self.refuse(action, before, self.read_only_hint()).await;
        }
        if rec.status != PROCESSING {
            return self.changed_without_write(action, before, format!("the record is already {} (it finished since it was displayed); nothing was written", rec.status)).await;
        }
        if let Some(v) = expect_version.filter(|v| *v != rec.version) {
            return self
                .changed_without_write(action, before, format!("the record changed since it was displayed (version {v} seen, {} now); nothing was written", rec.version))
                .await;
        }
        // Asked before the transaction (Redis): may a FAILED answer be written at all?
        let may_fail = self.may_fail(&rec).await;
        let seen = match find_order(&self.db, OrderKey::RequestId(&rec.request_id)).await {
            Ok(o) => o,
            Err(e) => {
                return Self::result(
                    action,
                    ActionOutcome::Error,
                    before,
                    None,
                    format!("not performed: reconciling failed ({e})"),
                    None,
                )
            }
        };
        if let (None, Err(why)) = (&seen, &may_fail) {
            return self.refuse(action, before, why.clone()).await;
        }
        let plan = format!(
            "lock the record row, reconcile with order_record under that lock, write (version {})",
            rec.version
        );
        let id = match self.begin(action, &before, &plan).await {
            Ok(id) => id,
            Err(r) => return r,
        };
        let written = self.write_under_lock(&rec, may_fail.is_ok(), reason).await;
        let after = idempotency::get(&self.db, request_id)
            .await
            .ok()
            .flatten()
            .map(|r| json(&r));
        let plan = match written {
            Ok(plan) => plan,
            Err(stop) => {
                return self
                    .finish(action, id, stop.outcome, before, after, stop.detail)
                    .await
            }
        };
        let mut detail = format!("{} {}: {}", plan.status, plan.code, plan.why);
        if let Some(stored) = self.store_final_response(&rec, &plan).await {
            detail.push_str(&format!("; {stored}"));
        }
        self.finish(action, id, ActionOutcome::Done, before, after, detail)
            .await
    }

    /// The fast path must not keep answering "in progress" (or a stale answer): it gets the
    /// final response, exactly what a replay from the record would give. Returns what became
    /// of it, for the action's detail; `None` when the fast path is off.
    async fn store_final_response(
        &self,
        rec: &IdempotencyRecord,
        plan: &Finalization,
    ) -> Option<String> {
        let request_id = rec.request_id.as_str();
        let stored = match &self.fast_path {
            None => None,
            Some(Err(e)) => Some(Err(e.clone())),
            Some(Ok(fp)) => {
                let value = FastPathValue::Finished {
                    hash: rec.request_hash.clone(),
                    code: plan.code,
                    body: plan.body.clone(),
                };
                Some(
                    fp.store(request_id, &value, self.fast_path_ttl)
                        .await
                        .map_err(|e| e.to_string()),
                )
            }
        };
        let key = keys::idempotency_fast_path(request_id);
        Some(match stored? {
            Ok(()) => format!("{key} holds the final response"),
            Err(e) => format!(
                "{key} not updated ({e}): a stale placeholder there falls through to the record"
            ),
        })
    }

    /// A FAILED answer tells the client no order exists; it may be written only when the API
    /// itself would let a retry take the record over ([`idempotency::may_reclaim`]): the owner
    /// gave up, or its lease is over and it has no heartbeat. `Err(why)` = refuse.
    async fn may_fail(&self, rec: &IdempotencyRecord) -> Result<(), String> {
        let now = now_ms();
        if rec.lease_until != 0 && rec.lease_until >= now {
            return Err(format!(
                "no order exists yet and owner {}'s lease runs until {} ({} ms from now): it may still be working; finalize after the lease",
                rec.owner,
                crate::contracts::format_ms(rec.lease_until),
                rec.lease_until - now
            ));
        }
        let alive = match self.locks.liveness().is_alive(&rec.owner).await {
            Ok(alive) => alive,
            Err(e) => {
                return Err(format!(
                    "cannot tell whether owner {} is alive ({e}); nothing was written",
                    rec.owner
                ))
            }
        };
        if idempotency::may_reclaim(rec, now, alive) {
            Ok(())
        } else {
            Err(format!("owner {} has a heartbeat and no order exists yet: it may still be working; wait, or stop that instance first", rec.owner))
        }
    }
    /// Lock the record row, reconcile with `order_record` under that lock, write — one
    /// transaction, on a connection of its own (its lock wait setting must not reach the pool).
    async fn write_under_lock(
        &self,
        rec: &IdempotencyRecord,
        may_fail: bool,
        reason: Option<&str>,
    ) -> Result<Finalization, Stop> {
        use sqlx::Connection;
        let mut conn = match self.db.pool.acquire().await {
            Ok(c) => c.detach(),
            Err(e) => {
                return Err(Stop::error(format!(
                    "no database connection ({e}); nothing was written"
                )))
            }
        };
        let written = self
            .decide_and_write(&mut conn, rec, may_fail, reason)
            .await;
        let _ = conn.close().await;
        written
    }
    /// The create routine locks the same row before it inserts an order (queries/<dialect>/
    /// order_create_routine.sql, step 0), so the database serializes the two: a create in flight
    /// makes this wait (at most 5 s, then refuse) and its order is then seen; a create that comes
    /// after a FAILED answer finds it and writes nothing.
    async fn decide_and_write(
        &self,
        conn: &mut AnyConnection,
        rec: &IdempotencyRecord,
        may_fail: bool,
        reason: Option<&str>,
    ) -> Result<Finalization, Stop> {
        use sqlx::{Connection, Row};
        let db = &self.db;
        let failed = |what: &str, e: &dyn fmt::Display| {
            Stop::error(format!("{what} failed ({e}); nothing was written"))
        };
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| failed("beginning the transaction", &e))?;
        sqlx::Executor::execute(&mut *tx, db.sql("console_finalize_lock_wait"))
            .await
            .map_err(|e| failed("setting the lock wait", &e))?;
        let locked = match sqlx::query(db.sql("console_finalize_lock_record")).bind(rec.request_id.as_str()).fetch_optional(&mut *tx).await {
            Ok(row) => row,
            Err(e) if is_lock_timeout(&e) => {
                return Err(Stop::refused(
                    "a create transaction of this request id is still in flight and holds the record's row lock (a killed instance's \
                     statement may still be running, e.g. waiting on a stock row); nothing was written — finalize again once it has ended",
                ))
            }
            Err(e) => return Err(failed("locking the record row", &e)),
        };
        let (status, version): (String, i64) = match locked {
            Some(row) => (
                row.try_get(0)
                    .map_err(|e| failed("reading the record", &e))?,
                row.try_get(1)
                    .map_err(|e| failed("reading the record", &e))?,
            ),
            None => {
                return Err(Stop::changed(
                    "the record is gone (purged since it was read); nothing was written",
                ))
            }
        };
        if status != PROCESSING || version != rec.version {
            return Err(Stop::changed(format!("the record changed since it was read (now {status}, version {version}); nothing was written")));
        }
        let plan = match find_order_locked(db, &mut tx, &rec.request_id)
            .await
            .map_err(|e| failed("reading the order", &e))?
        {
            Some(order) => Finalization::succeeded(&order),
            None if may_fail => Finalization::failed(rec, reason),
            None => {
                return Err(Stop::refused(
                    "the order seen a moment ago is not there any more; nothing was written",
                ))
            }
        };
        let now = now_ms();
        let written = sqlx::query(db.sql("console_finalize"))
            .bind(plan.status)
            .bind(i64::from(plan.code))
            .bind(plan.body.as_str())
            .bind(plan.order_no.clone())
            .bind(now)
            .bind(now + self.retention.as_millis() as i64)
            .bind(rec.request_id.as_str())
            .bind(rec.version)
            .execute(&mut *tx)
            .await
            .map_err(|e| failed("the conditional update", &e))?;
        if written.rows_affected() == 0 {
            return Err(Stop::changed("the conditional update matched nothing (finished or taken over); nothing was written"));
        }
        tx.commit().await.map_err(|e| failed("the commit", &e))?;
        Ok(plan)
    }
}

/// Why a finalize stopped after its audit row was written.
struct Stop {
    outcome: ActionOutcome,
    detail: String,
}

impl Stop {
    fn refused(detail: impl Into<String>) -> Stop {
        Stop {
            outcome: ActionOutcome::Refused,
            detail: detail.into(),
        }
    }
    fn changed(detail: impl Into<String>) -> Stop {
        Stop {
            outcome: ActionOutcome::Changed,
            detail: detail.into(),
        }
    }
    fn error(detail: impl Into<String>) -> Stop {
        Stop {
            outcome: ActionOutcome::Error,
            detail: detail.into(),
        }
    }
}

struct Finalization {
    status: &'static str,
    code: u16,
    body: String,
    order_no: Option<String>,
    why: String,
}

impl Finalization {
    /// The order exists: the request succeeded; the response is the API's, built from the row
    /// (the same bytes a replay after a unique violation gives).
    fn succeeded(order: &OrderRecord) -> Finalization {
        let response = FinalResponse::created(order);
        Finalization {
            status: response.status,
            code: response.code,
            body: response.body,
            order_no: response.order_no,
            why: format!("order {} exists for this requestId", order.order_no),
        }
    }

    /// No order exists and none can be created any more (the create routine refuses a FAILED
    /// record): the client must send a new key.
    fn failed(rec: &IdempotencyRecord, reason: Option<&str>) -> Finalization {
        let problem = abandoned_problem(&rec.request_id, reason);
        Finalization {
            status: FAILED,
            code: problem.status,
            body: problem.body(),
            order_no: None,
            why: format!("no order exists and owner {} gave up or has no heartbeat past its lease; the client must send a new key", rec.owner),
        }
    }
}
