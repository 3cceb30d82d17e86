//! The operator's actions: release a stale lock, finalize a stuck idempotency record — and their
//! audit. One place for each rule; the TUI's confirm popup and the headless twins
//! (`idemguard release-lock`, `idemguard finalize`) both call [`Actions::run`].
//!
//! Why each rule exists (issue 8: operators used a bare `DEL` or a hand-written `UPDATE`):
//! - a release is a compare-and-delete of the exact value(s) the operator saw, on every node
//!   ([`Locks::release_if_value`]): a lock re-acquired since it was displayed is not deleted;
//! - whose lock it is, is read from the value stored in Redis, never from the value typed: a
//!   live owner's lock is refused unless forced with a reason, and a release may bump
//!   `fence:{key}` so a zombie holder's later writes are refused by the database;
//! - finalize locks the record row (as the create routine does before it inserts an order),
//!   reconciles with `order_record` under that lock and writes with
//!   `WHERE request_id = ? AND status = 'PROCESSING' AND version = ?`: a record that finished a
//!   second earlier is left alone, and the database — not timing — orders a FAILED answer and a
//!   create still in flight (issue 15: a killed instance's statement committed after FAILED);
//! - a FAILED answer respects the lease the API respects ([`idempotency::may_reclaim`]), and is
//!   422 `request-abandoned`, never 409, which clients retry with the same key for ever;
//! - read-only unless `--allow-actions` / `environment.allow_actions`; a refused attempt writes
//!   nothing but its audit row;
//! - the audit row is written BEFORE the action: an action whose audit cannot be written is not
//!   performed. Every attempt is also an `operator_action` trace event.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::api::fast_path::{FastPath, FastPathValue};
use crate::api::idempotency::{self, IdempotencyRecord, FAILED, PROCESSING, SUCCEEDED};
use crate::api::problem::Problem;
use crate::api::server::OrderView;
use crate::config::{Config, Dialect};
use crate::contracts::{keys, now_ms, Layer, LockHolder, Outcome, TraceEvent};
use crate::db::orders::{find_order, find_order_locked, OrderKey, OrderRecord};
use crate::db::{is_lock_timeout, Database};
use crate::lock::{LockView, Locks};
use crate::trace::Tracer;
use sqlx::AnyConnection;

/// A destructive operation, as a value: built by a key handler or a command line, shown in a
/// confirmation, then run. Never executed from a key handler directly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Compare-and-delete `key` where it still holds one of `expect_values` (the values the
    /// operator saw; under RedLock one per node).
    ReleaseLock {
        key: String,
        expect_values: Vec<String>,
        /// Release even though the owner has a heartbeat (requires `reason`).
        force: bool,
        /// Raise `fence:{key}` after the release, so the old holder's writes are refused.
        bump_fence: bool,
        reason: Option<String>,
    },
    /// Reconcile and finalize a PROCESSING idempotency record.
    Finalize {
        request_id: String,
        /// The version the operator saw; None = the version read now.
        expect_version: Option<i64>,
        reason: Option<String>,
    },
}

impl Action {
    /// The `action` column of `ops_audit`.
    pub fn name(&self) -> &'static str {
        match self {
            Action::ReleaseLock { .. } => "release_lock",
            Action::Finalize { .. } => "finalize",
        }
    }

    /// The `target` column: the lock key or the requestId.
    pub fn target(&self) -> &str {
        match self {
            Action::ReleaseLock { key, .. } => key,
            Action::Finalize { request_id, .. } => request_id,
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Action::ReleaseLock { reason, .. } | Action::Finalize { reason, .. } => {
                reason.as_deref()
            }
        }
    }

    /// The exact effect, for the confirmation: what is compared and what is written.
    pub fn effect(&self, dialect: Option<Dialect>) -> Vec<String> {
        match self {
            Action::ReleaseLock {
                key,
                expect_values,
                force,
                bump_fence,
                reason,
            } => {
                let mut out = vec![format!("compare-and-delete {key} on every lock node, only where it still holds exactly:")];
                out.extend(expect_values.iter().map(|v| format!("  {v}")));
                if *force {
                    out.push(format!(
                        "FORCED although the owner may be alive — reason: {}",
                        reason.as_deref().unwrap_or("(none given)")
                    ));
                } else {
                    out.push("refused unless the holder stored there has no heartbeat".to_string());
                }
                if *bump_fence {
                    out.push(format!("then raise {} past every token issued, so the old holder's writes are refused", keys::fence(key)));
                }
                out
            }
            Action::Finalize {
                request_id,
                expect_version,
                ..
            } => {
                let p = |i: usize| {
                    if dialect == Some(Dialect::Mysql) {
                        "?".to_string()
                    } else {
                        format!("${i}")
                    }
                };
                vec![
                    format!("lock the record row of {request_id} (SELECT … FOR UPDATE, waits at most 5 s), reconcile with order_record under that lock, then:"),
                    format!(
                        "UPDATE idempotency_record SET status, response … WHERE request_id = {} AND status = 'PROCESSING' AND version = {}",
                        p(7),
                        p(8)
                    ),
                    format!("  with request_id = {request_id:?}, version = {}", expect_version.map_or("(as read now)".into(), |v| v.to_string())),
                    format!("then overwrite {} with the final response", keys::idempotency_fast_path(request_id)),
                ]
            }
        }
    }
}

/// How an attempt ended (the `outcome` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionOutcome {
    Done,
    /// Not allowed (read-only, live owner, missing reason …): nothing was written.
    Refused,
    /// The target changed since it was seen: nothing was written.
    Changed,
    /// A backend failed; what was done is in the detail.
    Error,
}

impl ActionOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            ActionOutcome::Done => "done",
            ActionOutcome::Refused => "refused",
            ActionOutcome::Changed => "changed",
            ActionOutcome::Error => "error",
        }
    }
}

impl fmt::Display for ActionOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an attempt did.
#[derive(Debug, Clone, Serialize)]
pub struct ActionResult {
    pub action: &'static str,
    pub target: String,
    pub outcome: ActionOutcome,
    /// What was seen before (JSON).
    pub before: Option<String>,
    /// What is there after (JSON), when something was read or written.
    pub after: Option<String>,
    /// One line for the operator: why, and what to do.
    pub detail: String,
    /// The `ops_audit` row (None: the audit itself could not be written — nothing was done).
    pub audit_id: Option<i64>,
}

/// An `ops_audit` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub operator: String,
    pub environment: String,
    pub action: String,
    pub target: String,
    pub before_state: Option<String>,
    pub after_state: Option<String>,
    pub reason: Option<String>,
    pub outcome: String,
    pub detail: Option<String>,
    pub created_at: i64,
}

/// `ops_audit` rows created in `[since_ms, until_ms)`, newest first.
pub async fn audit_rows(
    db: &Database,
    since_ms: i64,
    until_ms: i64,
    limit: i64,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    sqlx::query_as::<_, AuditRow>(db.sql("console_audit_list"))
        .bind(since_ms)
        .bind(until_ms)
        .bind(limit)
        .fetch_all(&db.pool)
        .await
}

/// The operator's actions over one database and one lock layer.
pub struct Actions {
    db: Database,
    locks: Locks,
    tracer: Tracer,
    /// None: the fast path is off; Err: it is on but its Redis was unreachable at start.
    fast_path: Option<Result<FastPath, String>>,
    operator: String,
    environment: String,
    allowed: bool,
    retention: Duration,
    fast_path_ttl: Duration,
}

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
    /// `allow_actions` is the command line's `--allow-actions`; `environment.allow_actions`
    /// also enables them.
    pub async fn new(
        config: &Config,
        db: Database,
        locks: Locks,
        tracer: Tracer,
        allow_actions: bool,
    ) -> Actions {
        let fast_path = if config.idempotency.fast_path {
            fast_path(config).await
        } else {
            None
        };
        Actions {
            db,
            locks,
            tracer,
            fast_path,
            operator: config.operator(),
            environment: config.environment.name.clone(),
            allowed: allow_actions || config.environment.allow_actions,
            retention: config.idempotency.retention,
            fast_path_ttl: config
                .idempotency
                .fast_path_ttl
                .min(config.idempotency.retention),
        }
    }

    pub fn allowed(&self) -> bool {
        self.allowed
    }

    pub fn operator(&self) -> &str {
        &self.operator
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    pub fn locks(&self) -> &Locks {
        &self.locks
    }

    /// Run one action with every guard; always audited (unless the audit itself fails, in which
    /// case nothing is done and the result says so with `audit_id: None`).
    pub async fn run(&self, action: &Action) -> ActionResult {
        let started = Instant::now();
        let result = match action {
            Action::ReleaseLock {
                key,
                expect_values,
                force,
                bump_fence,
                reason,
            } => {
                self.release_lock(
                    action,
                    key,
                    expect_values,
                    *force,
                    *bump_fence,
                    reason.as_deref(),
                )
                .await
            }
            Action::Finalize {
                request_id,
                expect_version,
                reason,
            } => {
                self.finalize(action, request_id, *expect_version, reason.as_deref())
                    .await
            }
        };
        let mut event = TraceEvent::new(Layer::Console, Outcome::OperatorAction)
            .detail(format!(
                "{} {} by {} in {}: {} — {}",
                result.action,
                result.target,
                self.operator,
                self.environment,
                result.outcome,
                result.detail
            ))
            .since(started);
        match action {
            Action::ReleaseLock { key, .. } => {
                let (order_no, request_id) = keys::ids_of_lock(key);
                event.order_no = order_no;
                event.request_id = request_id;
            }
            Action::Finalize { request_id, .. } => event = event.request_id(request_id.clone()),
        }
        self.tracer.emit(event);
        result
    }

    // -----------------------------------------------------------------------------------------
    // audit
    // -----------------------------------------------------------------------------------------

    async fn audit_attempt(
        &self,
        action: &Action,
        before: Option<&str>,
        outcome: &str,
        detail: &str,
    ) -> Result<i64, sqlx::Error> {
        let q = sqlx::query(self.db.sql("console_audit_attempt"))
            .bind(self.operator.as_str())
            .bind(self.environment.as_str())
            .bind(action.name())
            .bind(action.target())
            .bind(before.map(str::to_string))
            .bind(action.reason().map(str::to_string))
            .bind(outcome)
            .bind(detail)
            .bind(now_ms());
        match self.db.dialect() {
            Dialect::Postgres => {
                use sqlx::Row;
                Ok(q.fetch_one(&self.db.pool).await?.try_get::<i64, _>(0)?)
            }
            Dialect::Mysql => {
                let r = q.execute(&self.db.pool).await?;
                r.last_insert_id()
                    .ok_or_else(|| sqlx::Error::Protocol("ops_audit insert returned no id".into()))
            }
        }
    }

    async fn audit_outcome(
        &self,
        id: i64,
        after: Option<&str>,
        outcome: ActionOutcome,
        detail: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(self.db.sql("console_audit_outcome"))
            .bind(after.map(str::to_string))
            .bind(outcome.as_str())
            .bind(detail)
            .bind(id)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    fn result(
        action: &Action,
        outcome: ActionOutcome,
        before: Option<String>,
        after: Option<String>,
        detail: String,
        audit_id: Option<i64>,
    ) -> ActionResult {
        ActionResult {
            action: action.name(),
            target: action.target().to_string(),
            outcome,
            before,
            after,
            detail,
            audit_id,
        }
    }

    /// A refusal: audited as one row with its final outcome; nothing else is written.
    async fn refuse(
        &self,
        action: &Action,
        before: Option<String>,
        detail: String,
    ) -> ActionResult {
        match self
            .audit_attempt(
                action,
                before.as_deref(),
                ActionOutcome::Refused.as_str(),
                &detail,
            )
            .await
        {
            Ok(id) => Self::result(
                action,
                ActionOutcome::Refused,
                before,
                None,
                detail,
                Some(id),
            ),
            Err(e) => Self::result(
                action,
                ActionOutcome::Error,
                before,
                None,
                format!("{detail}; and the audit row could not be written: {e}"),
                None,
            ),
        }
    }

    /// An attempt that could not even start (its target cannot be read): audited as one row
    /// with outcome `error`, like a refusal, so every attempt is on the record.
    async fn fail_unperformed(
        &self,
        action: &Action,
        before: Option<String>,
        detail: String,
    ) -> ActionResult {
        match self
            .audit_attempt(
                action,
                before.as_deref(),
                ActionOutcome::Error.as_str(),
                &detail,
            )
            .await
        {
            Ok(id) => Self::result(action, ActionOutcome::Error, before, None, detail, Some(id)),
            Err(e) => Self::result(
                action,
                ActionOutcome::Error,
                before,
                None,
                format!("{detail}; and the audit row could not be written: {e}"),
                None,
            ),
        }
    }

    /// Write the attempt row; None (with the error result) when it fails: the action must not run.
    async fn begin(
        &self,
        action: &Action,
        before: &Option<String>,
        plan: &str,
    ) -> Result<i64, ActionResult> {
        self.audit_attempt(action, before.as_deref(), "attempt", plan).await.map_err(|e| {
            Self::result(
                action,
                ActionOutcome::Error,
                before.clone(),
                None,
                format!("not performed: the audit row could not be written to {} ({e}); check the database (idemguard doctor)", self.db.shown_url),
                None,
            )
        })
    }

    async fn finish(
        &self,
        action: &Action,
        id: i64,
        outcome: ActionOutcome,
        before: Option<String>,
        after: Option<String>,
        mut detail: String,
    ) -> ActionResult {
        if let Err(e) = self
            .audit_outcome(id, after.as_deref(), outcome, &detail)
            .await
        {
            detail.push_str(&format!("; WARNING: the outcome could not be recorded on ops_audit row {id} ({e}) — it still says \"attempt\""));
        }
        Self::result(action, outcome, before, after, detail, Some(id))
    }

    fn read_only_hint(&self) -> String {
        format!(
            "read-only: actions are off in environment {:?}; run with --allow-actions or set environment.allow_actions = true",
            self.environment
        )
    }

    // -----------------------------------------------------------------------------------------
    // release a stale lock
    // -----------------------------------------------------------------------------------------

    async fn release_lock(
        &self,
        action: &Action,
        key: &str,
        expect: &[String],
        force: bool,
        bump_fence: bool,
        reason: Option<&str>,
    ) -> ActionResult {
        if !key.starts_with("lock:") {
            return self
                .refuse(
                    action,
                    None,
                    format!("{key} is not a lock key (lock:*); the console releases only locks"),
                )
                .await;
        }
        if expect.is_empty() {
            return self.refuse(action, None, "no --expect-value given: a release deletes only the exact value you saw (idemguard locks shows it)".into()).await;
        }
        let view = self.locks.inspect(key).await;
        let before = Some(json(&view));
        if !self.allowed {
            return self.refuse(action, before, self.read_only_hint()).await;
        }
        if force && reason.is_none_or(|r| r.trim().is_empty()) {
            return self
                .refuse(
                    action,
                    before,
                    "--force needs --reason: say why a live owner's lock is released".into(),
                )
                .await;
        }
        // Only what is stored counts (issue 15: a value typed with a dead instance and the live
        // holder's nonce got the live holder's lock deleted). The release deletes the stored
        // values equal, byte for byte, to a value the operator gave; their owners are judged
        // from those stored values.
        let values = match self.stored_targets(action, &view, expect, &before).await {
            Ok(values) => values,
            Err(r) => return r,
        };
        if !force {
            if let Some(why) = self.owner_not_proven_dead(&values).await {
                return self.refuse(action, before, why).await;
            }
        }
        let plan = format!(
            "compare-and-delete of {} value(s){}",
            values.len(),
            if bump_fence {
                ", then a fence bump"
            } else {
                ""
            }
        );
        let id = match self.begin(action, &before, &plan).await {
            Ok(id) => id,
            Err(r) => return r,
        };

        let mut deleted = Vec::new();
        let mut now_held: Option<String> = None;
        let mut errors = Vec::new();
        for v in &values {
            match self.locks.release_if_value(key, v).await {
                Ok(report) => {
                    for (node, r) in &report.nodes {
                        match r {
                            crate::lock::NodeRelease::Deleted => deleted.push(node.clone()),
                            crate::lock::NodeRelease::Unreachable { error } => {
                                errors.push(format!("{node}: {error}"))
                            }
                            _ => {}
                        }
                    }
                    if now_held.is_none() {
                        now_held = report.current().map(str::to_string);
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        deleted.sort();
        deleted.dedup();
        let mut fence_note = String::new();
        let mut fence_failed = false;
        if bump_fence && !deleted.is_empty() {
            match self.locks.bump_fence(key).await {
                Ok(f) => {
                    fence_note = format!(
                        "; {} raised to {f}: the old holder's writes are refused",
                        keys::fence(key)
                    )
                }
                Err(e) => {
                    fence_failed = true;
                    errors.push(format!(
                        "fence bump failed: {e} — the old holder's writes are NOT refused"
                    ));
                }
            }
        }
        let after_view = self.locks.inspect(key).await;
        let after = Some(json(&after_view));
        let (outcome, mut detail) = if !deleted.is_empty() {
            (
                ActionOutcome::Done,
                format!(
                    "deleted on {} node(s): {}{fence_note}",
                    deleted.len(),
                    deleted.join(", ")
                ),
            )
        } else if let Some(cur) = now_held {
            let who = LockHolder::from_value(&cur).map_or(format!("value {cur:?}"), |h| {
                format!("{} (fence {})", h.instance, h.fence)
            });
            (ActionOutcome::Changed, format!("the lock changed hands since it was displayed: now held by {who}; nothing was deleted"))
        } else if !errors.is_empty() {
            (
                ActionOutcome::Error,
                "no node could be asked; nothing was deleted".to_string(),
            )
        } else {
            (ActionOutcome::Changed, "the lock is gone (it expired or was released since it was displayed); nothing was deleted".to_string())
        };
        // A fence asked for and not raised leaves the zombie holder able to write: not success
        // (exit 1), although the lock itself is gone.
        let outcome = if fence_failed {
            ActionOutcome::Error
        } else {
            outcome
        };
        if !errors.is_empty() {
            if outcome == ActionOutcome::Done || fence_failed {
                detail.push_str("; PARTIAL");
            }
            detail.push_str(&format!(
                "; errors: {} (scripts/stack status)",
                errors.join("; ")
            ));
        }
        self.finish(action, id, outcome, before, after, detail)
            .await
    }

    /// The stored values the release compares: those of `expect` some node holds exactly.
    /// None of them stored: the lock changed since it was seen (or cannot be read, or is not a
    /// string at all) — the result to return, nothing deleted.
    async fn stored_targets(
        &self,
        action: &Action,
        view: &LockView,
        expect: &[String],
        before: &Option<String>,
    ) -> Result<Vec<String>, ActionResult> {
        let stored = view.values();
        let mut targets: Vec<String> = Vec::new();
        for v in expect.iter().filter(|v| stored.contains(&v.as_str())) {
            if !targets.contains(v) {
                targets.push(v.clone());
            }
        }
        if !targets.is_empty() {
            return Ok(targets);
        }
        if let Some(kind) = view.other_type() {
            let why = format!("{} is a {kind}, not an idemguard lock (a Redisson lock is a hash); the console never deletes it", view.key);
            return Err(self.refuse(action, before.clone(), why).await);
        }
        let unreadable = view.unreachable();
        if stored.is_empty() && !unreadable.is_empty() {
            let detail = format!(
                "not performed: the lock could not be read ({}); nothing was deleted",
                unreadable.join("; ")
            );
            return Err(self.fail_unperformed(action, before.clone(), detail).await);
        }
        let detail = match view.holder() {
            _ if stored.is_empty() => "the lock is gone (it expired or was released since it was displayed); nothing was deleted".to_string(),
            Some(h) => format!("the lock changed hands since it was displayed, or the value given was never its: it is held by {} (fence {}); nothing was deleted", h.instance, h.fence),
            None => format!("the lock changed hands since it was displayed, or the value given was never its: it holds {:?}; nothing was deleted", stored[0]),
        };
        Err(self
            .changed_without_write(action, before.clone(), detail)
            .await)
    }

    /// Why the owners of these stored values may still be working (a release needs --force
    /// then), or None when every one is proven dead: an idemguard holder without a heartbeat.
    async fn owner_not_proven_dead(&self, stored: &[String]) -> Option<String> {
        let holders: Vec<LockHolder> = stored
            .iter()
            .filter_map(|v| LockHolder::from_value(v))
            .collect();
        if holders.len() < stored.len() {
            return Some("the value names no idemguard holder, so its owner cannot be proven dead; use --force --reason R".into());
        }
        let mut owners: Vec<String> = holders.into_iter().map(|h| h.instance).collect();
        owners.sort();
        owners.dedup();
        match self.locks.liveness().are_alive(&owners).await {
            Ok(alive) => owners.iter().zip(alive).find(|(_, a)| *a).map(|(owner, _)| {
                format!("owner {owner} has a heartbeat (alive): its lock is not stale; use --force --reason R to release it anyway")
            }),
            Err(e) => Some(format!("cannot tell whether the owner is alive ({e}); use --force --reason R to release anyway")),
        }
    }

    // -----------------------------------------------------------------------------------------
    // finalize a stuck record
    // -----------------------------------------------------------------------------------------

    async fn finalize(
        &self,
        action: &Action,
        request_id: &str,
        expect_version: Option<i64>,
        reason: Option<&str>,
    ) -> ActionResult {
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
        // The fast path must not keep answering "in progress" (or a stale answer): it gets the
        // final response, exactly what a replay from the record would give.
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
        match stored {
            None => {}
            Some(Ok(())) => detail.push_str(&format!(
                "; {} holds the final response",
                keys::idempotency_fast_path(request_id)
            )),
            Some(Err(e)) => detail.push_str(&format!(
                "; {} not updated ({e}): a stale placeholder there falls through to the record",
                keys::idempotency_fast_path(request_id)
            )),
        }
        self.finish(action, id, ActionOutcome::Done, before, after, detail)
            .await
    }

    async fn changed_without_write(
        &self,
        action: &Action,
        before: Option<String>,
        detail: String,
    ) -> ActionResult {
        match self
            .audit_attempt(
                action,
                before.as_deref(),
                ActionOutcome::Changed.as_str(),
                &detail,
            )
            .await
        {
            Ok(id) => Self::result(
                action,
                ActionOutcome::Changed,
                before,
                None,
                detail,
                Some(id),
            ),
            Err(e) => Self::result(
                action,
                ActionOutcome::Error,
                before,
                None,
                format!("{detail}; and the audit row could not be written: {e}"),
                None,
            ),
        }
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
            Some(order) => {
                Finalization::succeeded(&order).map_err(|e| failed("serializing the order", &e))?
            }
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
    fn succeeded(order: &OrderRecord) -> serde_json::Result<Finalization> {
        Ok(Finalization {
            status: SUCCEEDED,
            code: 201,
            body: serde_json::to_string(&OrderView::from(order))?,
            order_no: Some(order.order_no.clone()),
            why: format!("order {} exists for this requestId", order.order_no),
        })
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

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|e| format!("{{\"unserializable\":{:?}}}", e.to_string()))
}

async fn fast_path(config: &Config) -> Option<Result<FastPath, String>> {
    let client = match redis::Client::open(config.redis.url.as_str()) {
        Ok(c) => c,
        Err(e) => return Some(Err(format!("the main Redis URL is invalid: {e}"))),
    };
    let cm = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.redis.command_timeout))
        .set_response_timeout(Some(config.redis.command_timeout))
        .set_number_of_retries(1);
    match redis::aio::ConnectionManager::new_with_config(client, cm).await {
        Ok(c) => Some(Ok(FastPath::new(c))),
        Err(e) => {
            tracing::warn!(error = %e, "the main Redis is not reachable: the API's fast-path keys (idem:*) will not be updated");
            // Kept, so every finalize says its key was not updated (issue 20).
            Some(Err(format!(
                "the main Redis was unreachable when the console started: {e}"
            )))
        }
    }
}

/// The lock view's values, for an [`Action::ReleaseLock`] built from what is on screen.
pub fn release_of(
    view: &LockView,
    force: bool,
    bump_fence: bool,
    reason: Option<String>,
) -> Action {
    Action::ReleaseLock {
        key: view.key.clone(),
        expect_values: view.values().into_iter().map(str::to_string).collect(),
        force,
        bump_fence,
        reason,
    }
}

/// Exit status of the headless twins: 0 done, 4 refused, 5 changed (nothing written), 1 error.
pub fn exit_code(outcome: ActionOutcome) -> u8 {
    match outcome {
        ActionOutcome::Done => 0,
        ActionOutcome::Error => 1,
        ActionOutcome::Refused => 4,
        ActionOutcome::Changed => 5,
    }
}
