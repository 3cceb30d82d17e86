//! Finalize on a team's own record (the source profile maps an idempotency table idemguard did
//! not build, e.g. the article's §5.3 `idempotency_record`). Such a system keeps no owner
//! heartbeat, lease or fence token, so the rule is simpler and weaker than idemguard's own:
//! reconcile with the team's order table, then one conditional update to the team's status
//! code that applies only while the record is still PROCESSING and is the same row the operator
//! saw. A late commit of the team's own service cannot be fenced from here: the popup says so
//! before the operator confirms, and the audit row (the report's source) records it.

use serde::Serialize;
use sqlx::Row;

use super::abandoned_problem;
use crate::config::Config;
use crate::ops::{json, Action, ActionOutcome, ActionResult, Actions};

/// Said in the popup and recorded with every foreign finalize.
pub const UNFENCED: &str = "a late commit of the team's own service cannot be fenced from here \
     (its system has no fence token or owner heartbeat idemguard can check)";

/// The team's record table in the team's own terms — its status codes, its version column —
/// so the popup and the audit say what is really written ("status = 1"), not idemguard's
/// names for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamRecord {
    pub table: String,
    pub status_column: String,
    /// The stored values of PROCESSING, SUCCEEDED and FAILED ("?" when the profile has none).
    pub processing: String,
    pub succeeded: String,
    pub failed: String,
    /// The version column, when the team keeps one.
    pub version: Option<String>,
}

impl TeamRecord {
    /// None when the profile maps idemguard's own record.
    pub fn of(config: &Config) -> Option<TeamRecord> {
        let t = &config.source.idempotency_record;
        if !config.source.is_foreign() {
            return None;
        }
        let code = |s: &str| {
            t.status
                .get(s)
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| "?".into())
        };
        let column = |c: &str| t.columns.get(c).cloned().unwrap_or_else(|| c.to_string());
        Some(TeamRecord {
            table: match t.table.as_str() {
                "" => config.tables.idempotency_record.clone(),
                named => named.to_string(),
            },
            status_column: column("status"),
            processing: code("PROCESSING"),
            succeeded: code("SUCCEEDED"),
            failed: code("FAILED"),
            version: Some(column("version")).filter(|v| !v.is_empty()),
        })
    }

    /// The team's stored value of `status` (SUCCEEDED or FAILED).
    pub fn code_of(&self, status: &str) -> &str {
        match status {
            "SUCCEEDED" => &self.succeeded,
            "FAILED" => &self.failed,
            _ => &self.processing,
        }
    }

    /// What a finalize writes, for the popup: the team's codes, what is compared, what cannot be.
    pub fn effect(&self, request_id: &str, expect_version: Option<i64>) -> Vec<String> {
        let s = &self.status_column;
        let mut out = vec![format!(
            "UPDATE {} SET {s} = {} (SUCCEEDED, an order exists) or {} (FAILED, none), response_code, response_body{} WHERE request_id = {request_id:?} AND {s} = {} (PROCESSING) AND created_at = as seen{}",
            self.table,
            self.succeeded,
            self.failed,
            self.version.as_ref().map(|v| format!(", {v} = {v} + 1")).unwrap_or_default(),
            self.processing,
            match (&self.version, expect_version) {
                (Some(v), Some(n)) => format!(" AND {v} = {n}"),
                (Some(v), None) => format!(" AND {v} = as read when run"),
                (None, _) => String::new(),
            }
        )];
        if self.version.is_none() {
            out.push("the team's record has no version column: only its status code and created_at are compared".into());
        }
        out
    }
}

/// The record as the action reads it, in idemguard's names.
#[derive(Debug, Clone, Serialize)]
struct ForeignRecord {
    request_id: String,
    status: String,
    response_code: Option<i64>,
    created_at: i64,
    /// The team's version column; None when it keeps none.
    version: Option<i64>,
}

/// What the reconciliation decided.
struct ForeignPlan {
    statement: &'static str,
    status: &'static str,
    /// The response code written (the HTTP status of the final answer).
    code: i64,
    body: String,
    why: String,
}

impl Actions {
    pub(super) async fn finalize_foreign(
        &self,
        action: &Action,
        request_id: &str,
        expect_version: Option<i64>,
        reason: Option<&str>,
    ) -> ActionResult {
        let mut seen = match self.foreign_record(request_id).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                let why = format!("no idempotency record for {request_id}");
                return self.refuse(action, None, why).await;
            }
            Err(e) => return self.foreign_error(action, None, "reading the record", e),
        };
        let before = Some(json(&seen));
        if !self.allowed {
            return self.refuse(action, before, self.read_only_hint()).await;
        }
        if seen.status != "PROCESSING" {
            let why = format!("the record is already {} (it finished since it was displayed); nothing was written", seen.status);
            return self.changed_without_write(action, before, why).await;
        }
        match (expect_version, seen.version) {
            (Some(v), Some(now)) if v != now => {
                let why = format!("the record changed since it was displayed (version {v} seen, {now} now); nothing was written");
                return self.changed_without_write(action, before, why).await;
            }
            // The version the operator saw is the one the update compares.
            (Some(v), Some(_)) => seen.version = Some(v),
            _ => {}
        }
        let plan = match self.foreign_order(request_id).await {
            Ok(Some((order_no, status))) => ForeignPlan::succeeded(&order_no, &status),
            Ok(None) => ForeignPlan::failed(request_id, reason),
            Err(e) => {
                return self.foreign_error(action, before, "reconciling with the order table", e)
            }
        };
        let stored = self.stored_code(plan.status);
        let text = format!(
            "reconcile with the team's order table, write {} (the team's status code {stored}, response_code {}) only while the record is still PROCESSING as seen{}; {UNFENCED}",
            plan.status,
            plan.code,
            if seen.version.is_some() { " at the version seen" } else { " (the team keeps no version column)" }
        );
        let id = match self.begin(action, &before, &text).await {
            Ok(id) => id,
            Err(r) => return r,
        };
        let (outcome, detail) = match self.foreign_write(&seen, &plan).await {
            Ok(0) => (ActionOutcome::Changed, "the conditional update matched nothing (the record finished or changed); nothing was written".to_string()),
            Ok(_) => (ActionOutcome::Done, format!("{} (status = {stored}, the team's code; response_code {}): {}; {UNFENCED}", plan.status, plan.code, plan.why)),
            Err(e) => (ActionOutcome::Error, format!("the conditional update failed ({e}); nothing was written")),
        };
        let after = self
            .foreign_record(request_id)
            .await
            .ok()
            .flatten()
            .map(|r| json(&r));
        self.finish(action, id, outcome, before, after, detail)
            .await
    }

    fn foreign_error(
        &self,
        action: &Action,
        before: Option<String>,
        what: &str,
        e: sqlx::Error,
    ) -> ActionResult {
        Self::result(
            action,
            ActionOutcome::Error,
            before,
            None,
            format!("not performed: {what} failed ({e})"),
            None,
        )
    }

    /// The team's stored value of `status`, as the profile maps it.
    fn stored_code(&self, status: &str) -> String {
        self.team
            .as_ref()
            .map_or_else(|| "?".into(), |t| t.code_of(status).to_string())
    }

    async fn foreign_record(&self, request_id: &str) -> Result<Option<ForeignRecord>, sqlx::Error> {
        let row = sqlx::query(self.db.sql("console_finalize_foreign_get"))
            .bind(request_id)
            .fetch_optional(&self.db.pool)
            .await?;
        row.map(|r| {
            Ok(ForeignRecord {
                request_id: r.try_get("request_id")?,
                status: r.try_get("status")?,
                response_code: r.try_get("response_code")?,
                created_at: r.try_get("created_at")?,
                version: r.try_get("version")?,
            })
        })
        .transpose()
    }

    /// The order of `request_id` in the team's order table: (order_no, status name).
    async fn foreign_order(
        &self,
        request_id: &str,
    ) -> Result<Option<(String, String)>, sqlx::Error> {
        let row = sqlx::query(self.db.sql("console_finalize_foreign_order"))
            .bind(request_id)
            .fetch_optional(&self.db.pool)
            .await?;
        row.map(|r| Ok((r.try_get("order_no")?, r.try_get("status")?)))
            .transpose()
    }

    async fn foreign_write(
        &self,
        seen: &ForeignRecord,
        plan: &ForeignPlan,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(self.db.sql(plan.statement))
            .bind(plan.code)
            .bind(plan.body.as_str())
            .bind(seen.request_id.as_str())
            .bind(seen.created_at)
            .bind(seen.version)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

impl ForeignPlan {
    /// The order exists: the request succeeded. The team's own response body is unknown here, so
    /// the stored one names the order and says who wrote it.
    fn succeeded(order_no: &str, order_status: &str) -> ForeignPlan {
        ForeignPlan {
            statement: "console_finalize_foreign_succeeded",
            status: "SUCCEEDED",
            code: 200,
            body: serde_json::json!({"orderNo": order_no, "orderStatus": order_status, "finalizedBy": "idemguard operator"}).to_string(),
            why: format!("order {order_no} ({order_status}) exists for this requestId in the team's order table"),
        }
    }

    /// No order exists: the client must send a new key (422, never 409).
    fn failed(request_id: &str, reason: Option<&str>) -> ForeignPlan {
        let problem = abandoned_problem(request_id, reason);
        ForeignPlan {
            statement: "console_finalize_foreign_failed",
            status: "FAILED",
            code: i64::from(problem.status),
            body: problem.body(),
            why: "no order exists for this requestId in the team's order table; the client must send a new key".into(),
        }
    }
}
