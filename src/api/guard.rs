//! The Idempotency-Key flow every POST goes through (seed §5.3, the IETF draft "The
//! Idempotency-Key HTTP Header Field", and what Stripe does):
//!
//! 1. validate the key (format, length) — 400 problem+json;
//! 2. the Redis fast path answers copies of a finished request (replay) or of one in flight
//!    (409) before the database is touched;
//! 3. the atomic claim — the `idempotency_record` unique insert — decides who processes;
//!    a finished record is replayed byte for byte with `Idempotent-Replayed: true`, the same key
//!    with a different request is 422, a live first request is 409 + Retry-After, a record
//!    whose owner died or gave up is reclaimed;
//! 4. the endpoint runs; its outcome (SUCCEEDED, or FAILED for a business refusal) is stored
//!    so every retry gets the same answer; an error whose outcome is unknown releases the record
//!    so a retry resolves it (the database layer returns the first result if it had committed).
//!    The fast path is given the answer only after the record holds it (`remember_answer`):
//!    an answer there keeps retries away from the record, so it must never outlive a finalize
//!    that did not land.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::fast_path::{FastPath, FastPathValue};
use super::idempotency::{self, Claim, ClaimRequest, FinalResponse, IdempotencyRecord};
use super::problem::Problem;
use crate::config::Config;
use crate::contracts::{now_ms, Layer, Outcome, RequestId, TraceEvent};
use crate::db::Database;
use crate::trace::Tracer;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Tells whether an instance still has a heartbeat (`instance:{id}`).
pub trait OwnerLiveness: Send + Sync {
    fn is_alive(&self, instance_id: &str) -> impl Future<Output = bool> + Send;
}

/// What an endpoint needs to process a claimed request.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub request_id: RequestId,
    /// The instance that owns the record.
    pub owner: String,
    /// True when this request took over an abandoned or dead owner's record.
    pub reclaimed: bool,
}

/// Everything the flow needs, shared by the handlers.
pub struct Guard<L> {
    pub config: Arc<Config>,
    pub db: Database,
    pub fast_path: Option<FastPath>,
    pub liveness: L,
    pub tracer: Tracer,
    pub replays: ReplayCounter,
}

/// A response ready to send or to store.
fn respond(code: u16, body: String, replayed: bool, retry_after: Option<u32>) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if status.is_success() {
        "application/json"
    } else {
        super::problem::CONTENT_TYPE
    };
    let mut res = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
    if replayed {
        res.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    if let Some(s) = retry_after {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    res
}

/// Counts replays in memory and writes them to `replay_count` once a second, so a storm of
/// replays costs one UPDATE per key per second instead of one per request.
#[derive(Clone, Default)]
pub struct ReplayCounter {
    pending: Arc<Mutex<HashMap<String, i64>>>,
}

impl ReplayCounter {
    pub fn add(&self, request_id: &str) {
        let mut pending = self.pending.lock().expect("replay counter");
        // The key is copied only the first time in a flush interval: a storm replays a few keys.
        match pending.get_mut(request_id) {
            Some(n) => *n += 1,
            None => {
                pending.insert(request_id.to_string(), 1);
            }
        }
    }

    /// Write what has accumulated, in one transaction: one commit a flush, not one a key (a
    /// storm replaying hundreds of keys made hundreds of commits a second). Kept for the next
    /// flush if the database fails.
    pub async fn flush(&self, db: &Database) {
        let mut batch: Vec<(String, i64)> =
            std::mem::take(&mut *self.pending.lock().expect("replay counter"))
                .into_iter()
                .collect();
        if batch.is_empty() {
            return;
        }
        // Every instance locks the records in the same order: two flushes never deadlock.
        batch.sort_unstable();
        if let Err(e) = idempotency::count_replays(db, &batch).await {
            tracing::warn!(keys = batch.len(), error = %e, "replay counts not written; kept for the next flush");
            let mut pending = self.pending.lock().expect("replay counter");
            for (request_id, n) in batch {
                *pending.entry(request_id).or_insert(0) += n;
            }
        }
    }
}

impl<L: OwnerLiveness> Guard<L> {
    /// Step 2, the fast path: place our placeholder (`Ok(true)`), or answer from what another
    /// request left there (`Err(response)`: a finished answer replayed, a reused key, a live
    /// owner in flight). `Ok(false)`: no fast path, or a dead owner's placeholder or Redis down —
    /// the database record decides.
    async fn fast_path_step(
        &self,
        started: Instant,
        rid: &str,
        placeholder: &FastPathValue,
    ) -> Result<bool, Response> {
        let ev = |d: Outcome| TraceEvent::new(Layer::Api, d).request_id(rid.to_string());
        let cfg = &self.config.idempotency;
        let hash = placeholder.hash();
        if let Some(fp) = &self.fast_path {
            match fp.claim(rid, placeholder, cfg.lease).await {
                Ok(None) => return Ok(true),
                Ok(Some(existing)) if existing.hash() != hash => {
                    self.tracer.emit(
                        ev(Outcome::PayloadMismatch)
                            .detail("fast path")
                            .since(started),
                    );
                    return Err(Problem::key_reused().into_response());
                }
                Ok(Some(FastPathValue::Finished { code, body, .. })) => {
                    self.replays.add(rid);
                    self.tracer.emit(
                        ev(Outcome::Replayed)
                            .detail(format!("fast path: {code}"))
                            .since(started),
                    );
                    return Err(respond(code, body, true, None));
                }
                Ok(Some(FastPathValue::Processing { owner: first, .. })) => {
                    if self.liveness.is_alive(&first).await {
                        self.tracer.emit(
                            ev(Outcome::InFlightRejected)
                                .detail(format!("fast path: {first} is processing"))
                                .since(started),
                        );
                        return Err(Problem::in_flight(cfg.retry_after_secs).into_response());
                    }
                    // A dead owner's placeholder: the database record decides what happens.
                }
                Err(e) => {
                    tracing::warn!(request_id = %rid, error = %e, "fast path unavailable; the database decides")
                }
            }
        }
        Ok(false)
    }

    /// Run `process` at most once per Idempotency-Key; `answer_expired` answers a retry whose
    /// record is past its retention from the business tables instead (seed §6.4).
    pub async fn run<P, PF, E, EF>(
        &self,
        headers: &HeaderMap,
        method: &str,
        path: &str,
        body: &serde_json::Value,
        process: P,
        answer_expired: E,
    ) -> Response
    where
        P: FnOnce(Claimed) -> PF,
        PF: Future<Output = anyhow::Result<FinalResponse>>,
        E: FnOnce(Claimed) -> EF,
        EF: Future<Output = anyhow::Result<FinalResponse>>,
    {
        let started = Instant::now();
        let request_id = match key_of(headers) {
            Ok(r) => r,
            Err((raw, why)) => return self.reject_key(started, &raw, &why),
        };
        // FAULT INJECTION SWITCH (idempotency.enabled = false): no record, no fast path — the
        // request goes straight to the order flow, so only the database layer can stop a copy.
        if !self.config.idempotency.enabled {
            return self.run_unguarded(request_id, process).await;
        }
        let rid = request_id.as_str().to_string();
        let hash = idempotency::request_hash(method, path, body);
        let owner = self.tracer.instance_id().to_string();
        let at = Attempt {
            started,
            rid: &rid,
            owner: &owner,
            hash: &hash,
        };

        // 2. The fast path.
        let placeholder = FastPathValue::Processing {
            hash: hash.clone(),
            owner: owner.clone(),
            // Unique per request, from the thread's generator: no system call per request.
            nonce: format!("{:032x}", rand::random::<u128>()),
        };
        let placed = match self.fast_path_step(started, &rid, &placeholder).await {
            Ok(placed) => placed,
            Err(answered) => return answered,
        };
        let drop_placeholder = || async {
            if let (true, Some(fp)) = (placed, &self.fast_path) {
                let _ = fp.drop_placeholder(&rid, &placeholder).await;
            }
        };

        // 3. The atomic claim.
        let claimed = match self.claim(&at, &drop_placeholder).await {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        let decided = self.decide(&at, &request_id, claimed, answer_expired, &drop_placeholder);
        let reclaimed = match decided.await {
            Ok(reclaimed) => reclaimed,
            Err(answered) => return answered,
        };

        // 4. Process.
        let ctx = Claimed {
            request_id,
            owner: owner.clone(),
            reclaimed,
        };
        let result = process(ctx).await;
        self.finish(&at, result, &drop_placeholder, Outcome::Finalized)
            .await
    }

    /// What the claim decides: `Ok(reclaimed)` when this request goes on to process (its own
    /// new record, or one it took over); else the answer already given.
    async fn decide<E, EF, D, DF>(
        &self,
        at: &Attempt<'_>,
        request_id: &RequestId,
        claimed: Claim,
        answer_expired: E,
        drop_placeholder: &D,
    ) -> Result<bool, Response>
    where
        E: FnOnce(Claimed) -> EF,
        EF: Future<Output = anyhow::Result<FinalResponse>>,
        D: Fn() -> DF,
        DF: Future<Output = ()>,
    {
        let now = now_ms();
        match claimed {
            Claim::New => {
                self.tracer
                    .emit(at.event(Outcome::Claimed).since(at.started));
                if key_older_than(request_id, self.config.idempotency.retention, now) {
                    // A retry of a key whose record was already purged: never create anything.
                    let ctx = Claimed {
                        request_id: request_id.clone(),
                        owner: at.owner.to_string(),
                        reclaimed: false,
                    };
                    let answer = answer_expired(ctx).await;
                    let decision = Outcome::AnsweredFromOrders;
                    return Err(self.finish(at, answer, drop_placeholder, decision).await);
                }
                Ok(false)
            }
            Claim::Existing(rec) => {
                let taken =
                    self.take_over(at, request_id, &rec, now, answer_expired, drop_placeholder);
                taken.await.map(|()| true)
            }
        }
    }

    /// Idempotency switched off: the request is processed as it comes, and answered as such.
    async fn run_unguarded<P, PF>(&self, request_id: RequestId, process: P) -> Response
    where
        P: FnOnce(Claimed) -> PF,
        PF: Future<Output = anyhow::Result<FinalResponse>>,
    {
        let owner = self.tracer.instance_id().to_string();
        let what = format!("request {request_id} failed (idempotency off)");
        match process(Claimed {
            request_id,
            owner,
            reclaimed: false,
        })
        .await
        {
            Ok(o) => respond(o.code, o.body, false, None),
            Err(e) => Problem::internal(what, format!("{e:#}")).into_response(),
        }
    }

    /// Step 3, the atomic claim: the unique insert of the record decides who processes. A
    /// database error drops our placeholder and answers 500.
    async fn claim<D, DF>(&self, at: &Attempt<'_>, drop_placeholder: &D) -> Result<Claim, Response>
    where
        D: Fn() -> DF,
        DF: Future<Output = ()>,
    {
        let cfg = &self.config.idempotency;
        let claim = ClaimRequest {
            request_id: at.rid,
            // The key's own BIZ part: a payment callback's record is PAY, an order's ORDER.
            biz_type: crate::contracts::business_of(at.rid),
            request_hash: at.hash,
            owner: at.owner,
            fence: 0,
            lease_ms: cfg.lease.as_millis() as i64,
            retention_ms: cfg.retention.as_millis() as i64,
        };
        match idempotency::claim(&self.db, &claim).await {
            Ok(c) => Ok(c),
            Err(e) => {
                drop_placeholder().await;
                Err(Problem::internal(
                    format!("the idempotency record of {} could not be claimed", at.rid),
                    e,
                )
                .into_response())
            }
        }
    }

    /// Another request's record is there: `Ok(())` when this request took it over (its owner
    /// died or gave up) and now processes; else the answer — 422 for a different request under
    /// the same key, the orders' answer for an expired record, the stored answer replayed, or
    /// 409 while its owner is still at it.
    async fn take_over<E, EF, D, DF>(
        &self,
        at: &Attempt<'_>,
        request_id: &RequestId,
        rec: &IdempotencyRecord,
        now: i64,
        answer_expired: E,
        drop_placeholder: &D,
    ) -> Result<(), Response>
    where
        E: FnOnce(Claimed) -> EF,
        EF: Future<Output = anyhow::Result<FinalResponse>>,
        D: Fn() -> DF,
        DF: Future<Output = ()>,
    {
        let (started, rid) = (at.started, at.rid);
        if rec.request_hash != at.hash {
            drop_placeholder().await;
            self.tracer
                .emit(at.event(Outcome::PayloadMismatch).since(started));
            return Err(Problem::key_reused().into_response());
        }
        if rec.is_expired(now) {
            drop_placeholder().await;
            let ctx = Claimed {
                request_id: request_id.clone(),
                owner: at.owner.to_string(),
                reclaimed: false,
            };
            return Err(match answer_expired(ctx).await {
                Ok(o) => {
                    self.tracer.emit(
                        at.event(Outcome::AnsweredFromOrders)
                            .detail(format!("record expired; {}", o.code))
                            .since(started),
                    );
                    respond(o.code, o.body, true, None)
                }
                Err(e) => Problem::internal(
                    format!(
                        "request {rid}: its expired record could not be answered from the orders"
                    ),
                    format!("{e:#}"),
                )
                .into_response(),
            });
        }
        if rec.is_finished() {
            return Err(self.replay(started, rid, rec).await);
        }
        let alive = self.liveness.is_alive(&rec.owner).await;
        if !idempotency::may_reclaim(rec, now, alive) || !self.try_reclaim(rec, at.owner).await {
            drop_placeholder().await;
            self.tracer.emit(
                at.event(Outcome::InFlightRejected)
                    .detail(format!("{} is processing", rec.owner))
                    .since(started),
            );
            return Err(
                Problem::in_flight(self.config.idempotency.retry_after_secs).into_response()
            );
        }
        self.tracer.emit(
            at.event(Outcome::Reclaimed)
                .detail(format!("from {} (alive: {alive})", rec.owner))
                .since(started),
        );
        Ok(())
    }

    async fn try_reclaim(&self, rec: &IdempotencyRecord, owner: &str) -> bool {
        let lease = self.config.idempotency.lease.as_millis() as i64;
        idempotency::reclaim(&self.db, rec, owner, 0, lease)
            .await
            .unwrap_or(false)
    }

    /// Store the outcome, or release the record when the outcome is unknown.
    async fn finish<D, DF>(
        &self,
        at: &Attempt<'_>,
        result: anyhow::Result<FinalResponse>,
        drop_placeholder: &D,
        decision: Outcome,
    ) -> Response
    where
        D: Fn() -> DF,
        DF: Future<Output = ()>,
    {
        let (started, rid, owner, hash) = (at.started, at.rid, at.owner, at.hash);
        let cfg = &self.config.idempotency;
        match result {
            Ok(outcome) => {
                let retention = cfg.retention.as_millis() as i64;
                let answer = FastPathValue::Finished {
                    hash: hash.to_string(),
                    code: outcome.code,
                    body: outcome.body.clone(),
                };
                // The fast path gets the answer only once the record holds it: an answer there
                // keeps every retry away from the record, so one written ahead of a finalize
                // that never lands (refused, then the process killed before the background
                // retry) would leave the record PROCESSING for good (chaos storm, BENCHMARKS.md).
                match idempotency::finalize(&self.db, rid, owner, &outcome, retention).await {
                    Ok(true) => {
                        remember_answer(self.fast_path.as_ref(), rid, &answer, self.fast_path_ttl())
                            .await
                    }
                    Ok(false) => {
                        // Not ours any more: the new owner's finalize stores its answer (the
                        // same order, from the database layer), and the fast path with it.
                        tracing::warn!(request_id = %rid, "record taken over before finalize; the database layer gave both the same result");
                        drop_placeholder().await;
                    }
                    Err(e) => {
                        // The business effect is committed and the outcome known: keep writing it.
                        // Our placeholder stays: retries meanwhile get 409 (we are still at it);
                        // if we die, its owner has no heartbeat and the record decides.
                        tracing::error!(request_id = %rid, error = %e, "could not finalize the idempotency record; retrying in the background");
                        self.finalize_later(rid, owner, &outcome, answer, retention);
                    }
                }
                let mut e = TraceEvent::new(Layer::Api, decision)
                    .request_id(rid)
                    .detail(format!("{} {}", outcome.status, outcome.code));
                if let Some(o) = &outcome.order_no {
                    e = e.order_no(o.clone());
                }
                self.tracer.emit(e.since(started));
                respond(outcome.code, outcome.body, false, None)
            }
            Err(err) => {
                // Released (lease_until = 0), never left to a live owner: the next retry with
                // the same key reclaims it at once and the database layer gives it the first
                // result if there was one.
                if let Err(e) = idempotency::abandon(&self.db, rid, owner).await {
                    tracing::error!(request_id = %rid, error = %e, "record not released; retrying in the background");
                    let (db, rid, owner) = (self.db.clone(), rid.to_string(), owner.to_string());
                    settle_later("release", rid.clone(), move || {
                        let (db, rid, owner) = (db.clone(), rid.clone(), owner.clone());
                        async move { idempotency::abandon(&db, &rid, &owner).await }
                    });
                }
                drop_placeholder().await;
                Problem::internal(format!("request {rid} failed before its outcome was known; record released for a retry"), format!("{err:#}")).into_response()
            }
        }
    }

    /// The finalize again, in the background, after the database refused it — and the fast
    /// path's answer after it, once it is written (never before: see `finish`).
    fn finalize_later(
        &self,
        rid: &str,
        owner: &str,
        outcome: &FinalResponse,
        answer: FastPathValue,
        retention_ms: i64,
    ) {
        let (db, rid, owner, outcome) = (
            self.db.clone(),
            rid.to_string(),
            owner.to_string(),
            outcome.clone(),
        );
        let (fast_path, ttl) = (self.fast_path.clone(), self.fast_path_ttl());
        settle_later("outcome", rid.clone(), move || {
            let (db, rid, owner, outcome, answer, fast_path) = (
                db.clone(),
                rid.clone(),
                owner.clone(),
                outcome.clone(),
                answer.clone(),
                fast_path.clone(),
            );
            async move {
                if idempotency::finalize(&db, &rid, &owner, &outcome, retention_ms).await? {
                    remember_answer(fast_path.as_ref(), &rid, &answer, ttl).await;
                }
                Ok(())
            }
        });
    }

    fn fast_path_ttl(&self) -> Duration {
        self.config
            .idempotency
            .fast_path_ttl
            .min(self.config.idempotency.retention)
    }

    async fn replay(&self, started: Instant, rid: &str, rec: &IdempotencyRecord) -> Response {
        let code = rec.response_code.unwrap_or(500) as u16;
        let body = rec.response_body.clone().unwrap_or_default();
        // Refresh the fast path (our placeholder, or an evicted key) with the stored response.
        let answer = FastPathValue::Finished {
            hash: rec.request_hash.clone(),
            code,
            body: body.clone(),
        };
        remember_answer(self.fast_path.as_ref(), rid, &answer, self.fast_path_ttl()).await;
        self.replays.add(rid);
        let mut e = TraceEvent::new(Layer::Api, Outcome::Replayed)
            .request_id(rid)
            .detail(format!("{} {code}", rec.status));
        if let Some(o) = &rec.order_no {
            e = e.order_no(o.clone());
        }
        self.tracer.emit(e.since(started));
        respond(code, body, true, None)
    }

    fn reject_key(&self, started: Instant, raw: &str, why: &str) -> Response {
        let shown: String = raw.chars().take(64).collect();
        self.tracer.emit(
            TraceEvent::new(Layer::Api, Outcome::KeyRejected)
                .detail(format!("{why}: {}", shown.escape_debug()))
                .since(started),
        );
        Problem::bad_key(why.to_string()).into_response()
    }
}

/// The request being guarded: when it started, its key, this instance as its owner, and the
/// hash of what it asks for.
struct Attempt<'a> {
    started: Instant,
    rid: &'a str,
    owner: &'a str,
    hash: &'a str,
}

impl Attempt<'_> {
    fn event(&self, decision: Outcome) -> TraceEvent {
        TraceEvent::new(Layer::Api, decision).request_id(self.rid.to_string())
    }
}

/// The one Idempotency-Key of the request, validated; else what was sent and why it is refused.
/// Two keys are refused rather than one picked: a proxy that appends a header must not decide
/// which request this is.
fn key_of(headers: &HeaderMap) -> Result<RequestId, (String, String)> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        let why = if headers.contains_key(IDEMPOTENCY_KEY) {
            "the Idempotency-Key header is sent more than once; send it once"
        } else {
            "the Idempotency-Key header is missing"
        };
        return Err((String::new(), why.to_string()));
    };
    let Ok(raw) = value.to_str() else {
        return Err((
            String::new(),
            "the Idempotency-Key contains a character that is not printable ASCII".to_string(),
        ));
    };
    RequestId::parse_received(raw, now_ms()).map_err(|e| (raw.to_string(), e.to_string()))
}

/// Puts a final answer on the fast path for replays — only ever after the record holds it.
async fn remember_answer(
    fast_path: Option<&FastPath>,
    request_id: &str,
    answer: &FastPathValue,
    ttl: Duration,
) {
    if let Some(fp) = fast_path {
        if let Err(e) = fp.store(request_id, answer, ttl).await {
            tracing::warn!(request_id = %request_id, error = %e, "fast path not updated; replays will come from the database");
        }
    }
}

/// Keeps writing a record's end (its outcome, or its release) in the background after the
/// database refused it. Left alone, the record would stay PROCESSING under a live owner past its
/// lease — which [`idempotency::may_reclaim`] must not take over, the owner may still be
/// working — so every retry with the key would be answered 409 for as long as this instance
/// lives. Backs off to 30 s; gives up after about an hour, leaving it to `idemguard finalize`.
fn settle_later<A, AF>(what: &'static str, request_id: String, attempt: A)
where
    A: Fn() -> AF + Send + 'static,
    AF: Future<Output = Result<(), sqlx::Error>> + Send,
{
    tokio::spawn(async move {
        for n in 0..130u32 {
            tokio::time::sleep(Duration::from_secs(2u64.pow(n.min(5)).min(30))).await;
            match attempt().await {
                Ok(()) => {
                    return tracing::info!(request_id = %request_id, "the record's {what} was written on attempt {}", n + 2)
                }
                Err(e) => {
                    tracing::debug!(request_id = %request_id, error = %e, "the record's {what} is still refused")
                }
            }
        }
        tracing::error!(request_id = %request_id, "gave up writing the record's {what}; resolve it with `idemguard finalize`");
    });
}

/// True when the key's date part is older than the retention: its record, if it ever existed,
/// has been purged, so this is a very late retry, never a new request.
pub fn key_older_than(request_id: &RequestId, retention: Duration, now_ms: i64) -> bool {
    // One extra day of slack: the key's date is the client's local date.
    let retention_ms = retention.as_millis() as i64;
    request_id.day_start_ms() + 86_400_000 + retention_ms < now_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_keys_are_recognised() {
        let week = Duration::from_secs(7 * 86_400);
        let now = 20_786 * 86_400_000 + 3_600_000; // 2026-11-29 01:00 UTC
        assert!(!key_older_than(
            &RequestId::parse("APP:ORDER:20261129:abcdefgh").unwrap(),
            week,
            now
        ));
        assert!(
            !key_older_than(
                &RequestId::parse("APP:ORDER:20261122:abcdefgh").unwrap(),
                week,
                now
            ),
            "7 days + 1 h: within retention + a day of slack"
        );
        assert!(
            key_older_than(
                &RequestId::parse("APP:ORDER:20261121:abcdefgh").unwrap(),
                week,
                now
            ),
            "8 days + 1 h"
        );
        assert!(key_older_than(
            &RequestId::parse("APP:ORDER:20261101:abcdefgh").unwrap(),
            week,
            now
        ));
    }
}
