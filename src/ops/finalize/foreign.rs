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
use crate::ops::{json, Action, ActionOutcome, ActionResult, Actions};

/// Said in the popup and recorded with every foreign finalize.
pub const UNFENCED: &str = "a late commit of the team's own service cannot be fenced from here \
     (its system has no fence token or owner heartbeat idemguard can check)";

/// The record as the action reads it, in idemguard's names.
#[derive(Debug, Clone, Serialize)]
struct ForeignRecord {
    request_id: String,
    status: String,
    response_code: Option<i64>,
    created_at: i64,
}

/// What the reconciliation decided.
struct ForeignPlan {
    statement: &'static str,
    status: &'static str,
    code: i64,
    body: String,
    why: String,
}

impl Actions {
    pub(super) async fn finalize_foreign(
        &self,
        action: &Action,
        request_id: &str,
        reason: Option<&str>,
    ) -> ActionResult {
        let seen = match self.foreign_record(request_id).await {
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
        let plan = match self.foreign_order(request_id).await {
            Ok(Some((order_no, status))) => ForeignPlan::succeeded(&order_no, &status),
            Ok(None) => ForeignPlan::failed(request_id, reason),
            Err(e) => {
                return self.foreign_error(action, before, "reconciling with the order table", e)
            }
        };
        let text = format!(
            "reconcile with the team's order table, write {} only while the record is still PROCESSING as seen; {UNFENCED}",
            plan.status
        );
        let id = match self.begin(action, &before, &text).await {
            Ok(id) => id,
            Err(r) => return r,
        };
        let (outcome, detail) = match self.foreign_write(&seen, &plan).await {
            Ok(0) => (ActionOutcome::Changed, "the conditional update matched nothing (the record finished or changed); nothing was written".to_string()),
            Ok(_) => (ActionOutcome::Done, format!("{} {}: {}; {UNFENCED}", plan.status, plan.code, plan.why)),
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
