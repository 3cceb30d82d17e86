//! The audit of every attempt (`ops_audit`): a row written BEFORE an action runs — an action
//! whose row cannot be written is not performed — and its outcome written after. A refusal is one
//! row with its final outcome; nothing else is written.

use serde::Serialize;

use super::{Action, ActionOutcome, ActionResult, Actions};
use crate::config::Dialect;
use crate::contracts::now_ms;
use crate::db::Database;

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
    let read = sqlx::query_as::<_, AuditRow>(db.sql("console_audit_list"))
        .bind(since_ms)
        .bind(until_ms)
        .bind(limit)
        .fetch_all(&db.pool);
    db.bounded(read).await
}

impl Actions {
    pub(super) async fn audit_attempt(
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
    pub(super) async fn audit_outcome(
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
    pub(super) fn result(
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
    pub(super) async fn refuse(
        &self,
        action: &Action,
        before: Option<String>,
        detail: String,
    ) -> ActionResult {
        self.audit_only(action, before, ActionOutcome::Refused, detail)
            .await
    }
    /// An outcome that wrote nothing but its audit row (a refusal, a change seen before the
    /// write); when the audit row itself fails, the result is an error that says so.
    async fn audit_only(
        &self,
        action: &Action,
        before: Option<String>,
        outcome: ActionOutcome,
        detail: String,
    ) -> ActionResult {
        match self
            .audit_attempt(action, before.as_deref(), outcome.as_str(), &detail)
            .await
        {
            Ok(id) => Self::result(action, outcome, before, None, detail, Some(id)),
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
    pub(super) async fn fail_unperformed(
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
    pub(super) async fn begin(
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
    pub(super) async fn finish(
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
    pub(super) fn read_only_hint(&self) -> String {
        format!(
            "read-only: actions are off in environment {:?}; run with --allow-actions or set environment.allow_actions = true",
            self.environment
        )
    }
    pub(super) async fn changed_without_write(
        &self,
        action: &Action,
        before: Option<String>,
        detail: String,
    ) -> ActionResult {
        self.audit_only(action, before, ActionOutcome::Changed, detail)
            .await
    }
}
