//! The operator's actions: release a stale lock, finalize a stuck idempotency record, redrive a
//! DLQ message — and their audit. One place for each rule; the TUI's confirm popup and the
//! headless twins (`idemguard release-lock`, `idemguard finalize`, `idemguard redrive`) all call
//! [`Actions::run`].
//!
//! Why each rule exists (operators used a bare `DEL` or a hand-written `UPDATE`):
//! - a release is a compare-and-delete of the exact value(s) the operator saw, on every node
//!   ([`Locks::release_if_value`]): a lock re-acquired since it was displayed is not deleted;
//! - whose lock it is, is read from the value stored in Redis, never from the value typed: a
//!   live owner's lock is refused unless forced with a reason, and a release may bump
//!   `fence:{key}` so a zombie holder's later writes are refused by the database;
//! - finalize locks the record row (as the create routine does before it inserts an order),
//!   reconciles with `order_record` under that lock and writes with
//!   `WHERE request_id = ? AND status = 'PROCESSING' AND version = ?`: a record that finished a
//!   second earlier is left alone, and the database — not timing — orders a FAILED answer and a
//!   create still in flight (a killed instance's statement committed after FAILED);
//! - a FAILED answer respects the lease the API respects
//!   ([`crate::api::idempotency::may_reclaim`]), and is
//!   422 `request-abandoned`, never 409, which clients retry with the same key for ever;
//! - read-only unless `--allow-actions` / `environment.allow_actions`; a refused attempt writes
//!   nothing but its audit row;
//! - the audit row is written BEFORE the action: an action whose audit cannot be written is not
//!   performed. Every attempt is also an `operator_action` trace event.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::api::fast_path::FastPath;
use crate::config::{Config, Dialect};
use crate::contracts::{keys, Layer, Outcome, TraceEvent};
use crate::db::Database;
use crate::lock::{LockView, Locks};
use crate::trace::Tracer;

mod audit;
mod finalize;
pub use finalize::{TeamRecord, UNFENCED};
mod redrive;
mod release;

pub use audit::{audit_rows, AuditRow};
pub use finalize::abandoned_problem;
pub use release::release_of;

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
    /// Publish a DLQ message again to its source topic and partition — once: its `ops_audit`
    /// row is the record ([`redrive`]).
    Redrive {
        /// The ops_audit target, `dlq:{dlq_topic}:{partition}:{offset}`.
        target: String,
        dlq_topic: String,
        partition: i32,
        offset: i64,
        reason: Option<String>,
    },
}

impl Action {
    /// A redrive of the message at `partition`@`offset` of `dlq_topic`.
    pub fn redrive(dlq_topic: &str, partition: i32, offset: i64, reason: Option<String>) -> Action {
        Action::Redrive {
            target: crate::stream::redrive::audit_target(dlq_topic, partition, offset),
            dlq_topic: dlq_topic.to_string(),
            partition,
            offset,
            reason,
        }
    }

    /// The `action` column of `ops_audit`.
    pub fn name(&self) -> &'static str {
        match self {
            Action::ReleaseLock { .. } => "release_lock",
            Action::Finalize { .. } => "finalize",
            Action::Redrive { .. } => "redrive",
        }
    }

    /// The `target` column: the lock key or the requestId.
    pub fn target(&self) -> &str {
        match self {
            Action::ReleaseLock { key, .. } => key,
            Action::Finalize { request_id, .. } => request_id,
            Action::Redrive { target, .. } => target,
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Action::ReleaseLock { reason, .. }
            | Action::Finalize { reason, .. }
            | Action::Redrive { reason, .. } => reason.as_deref(),
        }
    }

    /// The exact effect, for the confirmation: what is compared and what is written.
    pub fn effect(&self, dialect: Option<Dialect>) -> Vec<String> {
        self.effect_seen(dialect, None)
    }

    /// The exact effect, given the lock as the operator saw it (the popup has it; the command
    /// line does not): a fence bump promises only what the counter seen lets it keep.
    pub fn effect_seen(&self, dialect: Option<Dialect>, seen: Option<&LockView>) -> Vec<String> {
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
                match seen.map(release::foreign_caveats) {
                    Some(caveats) if !caveats.is_empty() => out.extend(caveats),
                    _ if *bump_fence => out.push(release::fence_step(key, seen)),
                    _ => {}
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
            Action::Redrive {
                dlq_topic,
                partition,
                offset,
                ..
            } => redrive::effect(dlq_topic, *partition, *offset),
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
    /// `foreign_locks.patterns`: keys a release accepts besides `lock:*`.
    lock_patterns: Vec<String>,
    /// The team's record in its own terms, when the profile maps a foreign one.
    team: Option<finalize::TeamRecord>,
    /// The configuration, for a redrive's Kafka clients (the DLQ read, the publish).
    config: Config,
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
            open_fast_path(config).await
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
            lock_patterns: config.foreign_locks.patterns.clone(),
            team: finalize::TeamRecord::of(config),
            config: config.clone(),
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
        let mut redriven = redrive::RedrivenIds::default();
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
            Action::Redrive {
                partition, offset, ..
            } => {
                let (result, ids) = self.redrive(action, *partition, *offset).await;
                redriven = ids;
                result
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
            Action::Redrive { .. } => {
                event.order_no = redriven.order_no;
                event.request_id = redriven.request_id;
                event.event_id = redriven.event_id;
            }
        }
        self.tracer.emit(event);
        result
    }
}

/// What a batch run with [`Actions::run_batch`] did.
#[derive(Debug, Clone, Serialize)]
pub struct BatchSummary {
    pub done: usize,
    pub refused: usize,
    pub changed: usize,
    pub errors: usize,
    /// Never started: the batch was cancelled before them (nothing written, not audited).
    pub not_attempted: usize,
    pub cancelled: bool,
    pub results: Vec<ActionResult>,
}

impl BatchSummary {
    /// The exit status: the worst outcome (error before refused before changed), 130 when
    /// cancelled with nothing worse.
    pub fn exit_code(&self) -> u8 {
        if self.errors > 0 {
            1
        } else if self.refused > 0 {
            4
        } else if self.changed > 0 {
            5
        } else if self.cancelled {
            130
        } else {
            0
        }
    }
}

impl Actions {
    /// Runs `batch` one action after the other, each with every guard, until `cancel`: a
    /// cancellation stops BETWEEN actions, never inside one, so every action is either audited
    /// with its outcome or not attempted at all. `progress` hears of each result as it comes.
    pub async fn run_batch(
        &self,
        batch: &[Action],
        cancel: &tokio_util::sync::CancellationToken,
        mut progress: impl FnMut(usize, &ActionResult),
    ) -> BatchSummary {
        let mut s = BatchSummary {
            done: 0,
            refused: 0,
            changed: 0,
            errors: 0,
            not_attempted: 0,
            cancelled: false,
            results: Vec::new(),
        };
        for (i, action) in batch.iter().enumerate() {
            if cancel.is_cancelled() {
                s.cancelled = true;
                s.not_attempted = batch.len() - i;
                break;
            }
            let r = self.run(action).await;
            match r.outcome {
                ActionOutcome::Done => s.done += 1,
                ActionOutcome::Refused => s.refused += 1,
                ActionOutcome::Changed => s.changed += 1,
                ActionOutcome::Error => s.errors += 1,
            }
            progress(i, &r);
            s.results.push(r);
        }
        s
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|e| format!("{{\"unserializable\":{:?}}}", e.to_string()))
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

/// The fast-path store the actions keep in step; opened in this module so its warning names
/// the actions, not one of them.
async fn open_fast_path(config: &Config) -> Option<Result<FastPath, String>> {
    match FastPath::connect(&config.redis).await {
        Ok(fast_path) => Some(Ok(fast_path)),
        Err(e) => {
            tracing::warn!(error = %e, "the main Redis is not reachable: the API's fast-path keys (idem:*) will not be updated");
            // Kept, so every finalize says its key was not updated.
            Some(Err(format!(
                "the main Redis was unreachable when the console started: {e}"
            )))
        }
    }
}
