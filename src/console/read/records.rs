//! The console's read-through to the order database: the rows of one trace and the stuck
//! `PROCESSING` records. Every statement is a file under `queries/<dialect>/console_*.sql`,
//! templated with the configured table names, so the console reads a team's own order system
//! that follows the same pattern. Read-only: nothing here writes.

use std::collections::BTreeSet;

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::db::Database;

/// True when the database says a table does not exist: PostgreSQL SQLSTATE 42P01, MySQL error
/// 1146 (SQLSTATE 42S02) — the schema was never created there.
pub fn is_undefined_table(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(d) = e else {
        return false;
    };
    matches!(d.code().as_deref(), Some("42P01") | Some("42S02"))
        || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|m| m.number() == 1146)
}

/// True when the database refused the console's role a privilege: PostgreSQL SQLSTATE 42501,
/// MySQL errors 1142 (table) / 1143 (column).
pub fn is_permission_denied(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(d) = e else {
        return false;
    };
    d.code().as_deref() == Some("42501")
        || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|m| matches!(m.number(), 1142 | 1143))
}

/// The error of console query `name`, naming the database (password hidden). On a database
/// without the schema it says what to do first, so a status line cut to its width still says
/// it; any other error keeps the database's own text.
pub fn query_error(db: &Database, name: &str, e: sqlx::Error) -> anyhow::Error {
    if crate::db::bounds::is_timeout(&e) {
        crate::db::bounds::no_answer(db, name, &e)
    } else if is_undefined_table(&e) {
        anyhow::anyhow!(
            "run `idemguard migrate`: the database {} has no idemguard schema ({name}: table \
             missing)",
            db.shown_url
        )
    } else {
        anyhow::anyhow!("{name} ({}): {e}", db.shown_url)
    }
}

/// The IDs a trace is about. Any one resolves to the others through the tables.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct TraceIds {
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    /// The payment event the operator typed (other events of the order are found by orderNo).
    pub event_id: Option<String>,
}

impl TraceIds {
    pub fn of_target(target: &crate::contracts::TraceTarget) -> TraceIds {
        use crate::contracts::TraceTarget::*;
        match target {
            RequestId(r) => TraceIds {
                request_id: Some(r.clone()),
                ..Default::default()
            },
            EventId(e) => TraceIds {
                event_id: Some(e.clone()),
                ..Default::default()
            },
            OrderNo(o) => TraceIds {
                order_no: Some(o.clone()),
                ..Default::default()
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.order_no.is_none() && self.request_id.is_none() && self.event_id.is_none()
    }

    /// Fill what is still unknown from `other` (first answer wins: the IDs never flip-flop).
    pub fn absorb(&mut self, other: &TraceIds) {
        if self.order_no.is_none() {
            self.order_no.clone_from(&other.order_no);
        }
        if self.request_id.is_none() {
            self.request_id.clone_from(&other.request_id);
        }
        if self.event_id.is_none() {
            self.event_id.clone_from(&other.event_id);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdempotencyRow {
    pub request_id: String,
    pub biz_type: String,
    pub request_hash: String,
    pub status: String,
    pub response_code: Option<i64>,
    pub order_no: Option<String>,
    /// "unknown" when the source profile maps no owner column; the numbers below are `None`
    /// when it maps no such column: shown as unknown, never guessed.
    pub owner: String,
    pub fence: Option<i64>,
    pub lease_until: Option<i64>,
    pub replay_count: Option<i64>,
    pub created_at: i64,
    pub updated_at: Option<i64>,
    pub expire_at: Option<i64>,
    pub version: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderRow {
    pub req_id: String,
    pub order_no: String,
    /// `None`: a column the source profile does not map (shown as unknown).
    pub user_id: Option<i64>,
    pub sku_id: Option<i64>,
    pub quantity: Option<i64>,
    pub amount: Option<i64>,
    pub status: String,
    pub version: Option<i64>,
    pub fence: Option<i64>,
    pub payment_event_id: Option<String>,
    pub created_at: i64,
    pub updated_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StockMovementRow {
    pub order_no: String,
    pub req_id: String,
    pub sku_id: i64,
    pub delta: i64,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaymentFlowRow {
    pub pay_no: String,
    pub order_no: String,
    pub amount: i64,
    pub status: String,
    pub event_id: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxRow {
    pub event_id: String,
    pub topic: String,
    pub msg_key: String,
    pub status: String,
    pub created_at: i64,
    pub sent_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessedEventRow {
    pub consumer_group: String,
    pub event_id: String,
    pub order_no: Option<String>,
    pub topic: String,
    pub kafka_partition: i64,
    pub kafka_offset: i64,
    pub outcome: String,
    pub processed_at: i64,
    pub expire_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointsRow {
    pub source_event_no: String,
    pub order_no: String,
    pub user_id: i64,
    pub points: i64,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotificationRow {
    pub event_id: String,
    pub order_no: String,
    pub user_id: i64,
    pub channel: String,
    pub body: String,
    pub created_at: i64,
}

/// Every database row of one trace, and the IDs they resolved to.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceRows {
    pub ids: TraceIds,
    pub idempotency: Vec<IdempotencyRow>,
    pub orders: Vec<OrderRow>,
    pub stock_movements: Vec<StockMovementRow>,
    pub payments: Vec<PaymentFlowRow>,
    pub outbox: Vec<OutboxRow>,
    pub processed: Vec<ProcessedEventRow>,
    pub points: Vec<PointsRow>,
    pub notifications: Vec<NotificationRow>,
    /// What this system's source profile cannot show (a table marked absent…), one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
    /// What the live database says is wrong with the profile these rows were read through
    /// (`source.time_zone` against the server's zone and the rows' own times).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl TraceRows {
    pub fn is_empty(&self) -> bool {
        self.idempotency.is_empty()
            && self.orders.is_empty()
            && self.stock_movements.is_empty()
            && self.payments.is_empty()
            && self.outbox.is_empty()
            && self.processed.is_empty()
            && self.points.is_empty()
            && self.notifications.is_empty()
    }

    /// Every eventId these rows name: payments, consumer decisions, the orders paid by an event,
    /// the sinks' rows and the outbox.
    pub fn event_ids(&self) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        ids.extend(self.payments.iter().map(|p| p.event_id.clone()));
        ids.extend(self.processed.iter().map(|p| p.event_id.clone()));
        ids.extend(
            self.orders
                .iter()
                .filter_map(|o| o.payment_event_id.clone()),
        );
        ids.extend(self.points.iter().map(|p| p.source_event_no.clone()));
        ids.extend(self.notifications.iter().map(|n| n.event_id.clone()));
        ids.extend(self.outbox.iter().map(|o| o.event_id.clone()));
        // A dead-lettered message's mark is the consumer's own key, not a payment event.
        ids.retain(|id| !crate::contracts::is_dead_letter_mark(id));
        ids
    }

    /// The IDs these rows name: an order row links requestId and orderNo, a payment or a
    /// processed event links an eventId to its orderNo.
    fn ids_found(&self) -> TraceIds {
        let mut ids = TraceIds::default();
        for o in &self.orders {
            ids.absorb(&TraceIds {
                order_no: Some(o.order_no.clone()),
                request_id: Some(o.req_id.clone()),
                event_id: None,
            });
        }
        for r in &self.idempotency {
            ids.absorb(&TraceIds {
                order_no: r.order_no.clone(),
                request_id: Some(r.request_id.clone()),
                event_id: None,
            });
        }
        for s in &self.stock_movements {
            ids.absorb(&TraceIds {
                order_no: Some(s.order_no.clone()),
                request_id: Some(s.req_id.clone()),
                event_id: None,
            });
        }
        let by_order = self
            .payments
            .iter()
            .map(|p| p.order_no.clone())
            .chain(self.processed.iter().filter_map(|p| p.order_no.clone()))
            .chain(self.points.iter().map(|p| p.order_no.clone()))
            .chain(self.notifications.iter().map(|n| n.order_no.clone()))
            .chain(self.outbox.iter().map(|o| o.msg_key.clone()));
        for o in by_order {
            ids.absorb(&TraceIds {
                order_no: Some(o),
                ..Default::default()
            });
        }
        ids
    }
}

/// How many resolution passes a trace makes: eventId → orderNo → requestId needs two; the third
/// only confirms nothing new turned up.
const RESOLVE_PASSES: usize = 3;

/// Every row that names the IDs, resolving each to the others (an eventId finds its orderNo
/// through payment_flow / processed_event, the orderNo finds the requestId through order_record,
/// and so on) until nothing new turns up.
pub async fn trace_rows(db: &Database, start: &TraceIds) -> anyhow::Result<TraceRows> {
    let mut ids = start.clone();
    let mut rows = TraceRows::default();
    let mut read = Reader {
        db,
        degraded: None,
        notes: Vec::new(),
    };
    for _ in 0..RESOLVE_PASSES {
        rows = fetch_once(&mut read, &ids).await?;
        let mut next = ids.clone();
        next.absorb(&rows.ids_found());
        if next == ids {
            break;
        }
        ids = next;
    }
    rows.ids = ids;
    rows.unavailable.extend(read.notes);
    if !rows.is_empty() {
        rows.warnings
            .extend(crate::db::clock::trace_check(db, &wall_clock_times(&rows)).await);
    }
    Ok(rows)
}

/// The times of the rows whose tables store wall clocks, as (`table.column`, epoch ms read).
fn wall_clock_times(rows: &TraceRows) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = Vec::new();
    out.extend(
        rows.orders
            .iter()
            .map(|o| ("order_record.created_at".to_string(), o.created_at)),
    );
    out.extend(
        rows.idempotency
            .iter()
            .map(|r| ("idempotency_record.created_at".to_string(), r.created_at)),
    );
    out.extend(
        rows.payments
            .iter()
            .map(|p| ("payment_flow.created_at".to_string(), p.created_at)),
    );
    out
}

async fn fetch_once(read: &mut Reader<'_>, ids: &TraceIds) -> anyhow::Result<TraceRows> {
    let (o, r, e) = (&ids.order_no, &ids.request_id, &ids.event_id);
    let mut rows = TraceRows {
        ids: ids.clone(),
        ..Default::default()
    };
    rows.idempotency = read
        .rows(
            "console_trace_idempotency",
            &[r, o],
            idempotency_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.orders = read
        .rows(
            "console_trace_order",
            &[r, o, e],
            order_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.stock_movements = read
        .rows(
            "console_trace_stock",
            &[o, r],
            stock_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.payments = read
        .rows(
            "console_trace_payment",
            &[o, e],
            payment_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.outbox = read
        .rows(
            "console_trace_outbox",
            &[o, e],
            outbox_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.processed = read
        .rows(
            "console_trace_processed",
            &[o, e],
            processed_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.points = read
        .rows(
            "console_trace_points",
            &[o, e],
            points_row,
            &mut rows.unavailable,
        )
        .await?;
    rows.notifications = read
        .rows(
            "console_trace_notification",
            &[o, e],
            notification_row,
            &mut rows.unavailable,
        )
        .await?;
    Ok(rows)
}

/// Runs the console's trace statements, skipping (and saying) those the source profile cannot run.
/// A statement that names a column the live table does not have is run again without it (the
/// value shown as unknown, the view degraded and said), never failing the whole trace.
struct Reader<'a> {
    db: &'a Database,
    /// The statements templated without the columns the database turned out not to have.
    degraded: Option<crate::db::Queries>,
    /// What the degradation costs, said once per trace.
    notes: Vec<String>,
}

impl Reader<'_> {
    fn queries(&self) -> &crate::db::Queries {
        self.degraded.as_ref().unwrap_or(&self.db.queries)
    }

    async fn run(
        &self,
        name: &'static str,
        binds: &[&Option<String>],
    ) -> Result<Vec<AnyRow>, sqlx::Error> {
        let mut q = sqlx::query(self.queries().get(name));
        for b in binds {
            q = q.bind((*b).clone());
        }
        self.db.bounded(q.fetch_all(&self.db.pool)).await
    }

    async fn rows<T>(
        &mut self,
        name: &'static str,
        binds: &[&Option<String>],
        f: fn(&AnyRow) -> Result<T, sqlx::Error>,
        unavailable: &mut Vec<String>,
    ) -> anyhow::Result<Vec<T>> {
        if let Some(why) = self.queries().missing(name) {
            unavailable.push(format!("{}: not shown ({why})", shown_as(name)));
            return Ok(Vec::new());
        }
        let mut result = self.run(name, binds).await;
        if matches!(&result, Err(e) if is_undefined_column(e)) && self.degraded.is_none() {
            self.degrade().await?;
            if let Some(why) = self.queries().missing(name) {
                unavailable.push(format!("{}: not shown ({why})", shown_as(name)));
                return Ok(Vec::new());
            }
            result = self.run(name, binds).await;
        }
        let rows = match result {
            Ok(rows) => rows,
            // A least-privilege role may lack SELECT on one table: that view says which, the
            // others still show.
            Err(e) if is_permission_denied(&e) => {
                let what = shown_as(name);
                unavailable.push(format!("{what}: not shown (the console's database role needs the SELECT privilege there: {e})"));
                return Ok(Vec::new());
            }
            Err(e) => return Err(query_error(self.db, name, e)),
        };
        decode_all(&rows, f)
    }
}

impl Reader<'_> {
    /// The statements again, without every mapped column the live tables do not have; one note
    /// per such column, naming the profile key.
    async fn degrade(&mut self) -> anyhow::Result<()> {
        let source = self.db.queries.source().clone();
        let mut absent = Vec::new();
        for logical in crate::config::CONSOLE_TABLES {
            let Some(t) = source
                .table(logical)
                .filter(|t| t.table != crate::config::ABSENT)
            else {
                continue;
            };
            let physical = source.physical_name(self.db.queries.tables(), logical);
            let read = sqlx::query_scalar::<_, String>(self.db.sql("doctor_columns"))
                .bind(physical.clone())
                .fetch_all(&self.db.pool);
            let live: Vec<String> = self
                .db
                .bounded(read)
                .await
                .map_err(|e| query_error(self.db, "doctor_columns", e))?;
            for (key, column) in t.columns.iter().filter(|(_, c)| !c.is_empty()) {
                if !live.iter().any(|l| l.eq_ignore_ascii_case(column)) {
                    absent.push((logical.to_string(), key.clone()));
                    self.notes.push(format!(
                        "{}: {key} shown as unknown — column {physical}.{column} does not exist (set source.{logical}.columns.{key} to its column, or \"\" if there is none; `idemguard doctor` lists every such column)",
                        shown_as_table(logical)
                    ));
                }
            }
        }
        self.degraded = Some(self.db.queries.without_columns(&absent)?);
        Ok(())
    }
}

/// True when the database says a column does not exist: PostgreSQL SQLSTATE 42703, MySQL error
/// 1054 (SQLSTATE 42S22).
pub fn is_undefined_column(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(d) = e else {
        return false;
    };
    matches!(d.code().as_deref(), Some("42703") | Some("42S22"))
        || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|m| m.number() == 1054)
}

fn shown_as_table(logical: &str) -> &'static str {
    match logical {
        "idempotency_record" => "idempotency records",
        "order_record" => "orders",
        "inventory" => "stock",
        "stock_movement" => "stock movements",
        "payment_flow" => "payments",
        "points_ledger" => "points",
        "notification" => "notifications",
        _ => "rows",
    }
}

/// What a trace statement shows, for "not shown" notes.
fn shown_as(name: &str) -> &'static str {
    match name {
        "console_trace_idempotency" => "idempotency records",
        "console_trace_order" => "orders",
        "console_trace_stock" => "stock movements",
        "console_trace_payment" => "payments",
        "console_trace_outbox" => "outbox rows",
        "console_trace_processed" => "processed events",
        "console_trace_points" => "points",
        "console_trace_notification" => "notifications",
        _ => "rows",
    }
}

fn decode_all<T>(
    rows: &[AnyRow],
    f: fn(&AnyRow) -> Result<T, sqlx::Error>,
) -> anyhow::Result<Vec<T>> {
    rows.iter()
        .map(|r| {
            f(r).map_err(|e| {
                anyhow::anyhow!(
                    "unexpected column in a console query: {e} (does queries_dir override it?)"
                )
            })
        })
        .collect()
}

fn idempotency_row(r: &AnyRow) -> Result<IdempotencyRow, sqlx::Error> {
    Ok(IdempotencyRow {
        request_id: r.try_get("request_id")?,
        biz_type: unknown_if_null(r.try_get("biz_type")?),
        request_hash: unknown_if_null(r.try_get("request_hash")?),
        status: r.try_get("status")?,
        response_code: r.try_get("response_code")?,
        order_no: r.try_get("order_no")?,
        owner: unknown_if_null(r.try_get("owner")?),
        fence: r.try_get("fence")?,
        lease_until: r.try_get("lease_until")?,
        replay_count: r.try_get("replay_count")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        expire_at: r.try_get("expire_at")?,
        version: r.try_get("version")?,
    })
}

/// The text shown for a column the source profile does not map.
pub const UNKNOWN: &str = "unknown";

/// A number the source profile may not have, as shown: the number or "unknown".
pub fn or_unknown(v: Option<i64>) -> String {
    v.map_or_else(|| UNKNOWN.to_string(), |v| v.to_string())
}

fn unknown_if_null(v: Option<String>) -> String {
    v.unwrap_or_else(|| UNKNOWN.to_string())
}

fn order_row(r: &AnyRow) -> Result<OrderRow, sqlx::Error> {
    Ok(OrderRow {
        req_id: r.try_get("req_id")?,
        order_no: r.try_get("order_no")?,
        user_id: r.try_get("user_id")?,
        sku_id: r.try_get("sku_id")?,
        quantity: r.try_get("quantity")?,
        amount: r.try_get("amount")?,
        status: r.try_get("status")?,
        version: r.try_get("version")?,
        fence: r.try_get("fence")?,
        payment_event_id: r.try_get("payment_event_id")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

fn stock_row(r: &AnyRow) -> Result<StockMovementRow, sqlx::Error> {
    Ok(StockMovementRow {
        order_no: r.try_get("order_no")?,
        req_id: r.try_get("req_id")?,
        sku_id: r.try_get("sku_id")?,
        delta: r.try_get("delta")?,
        created_at: r.try_get("created_at")?,
    })
}

fn payment_row(r: &AnyRow) -> Result<PaymentFlowRow, sqlx::Error> {
    Ok(PaymentFlowRow {
        pay_no: r.try_get("pay_no")?,
        order_no: r.try_get("order_no")?,
        amount: r.try_get("amount")?,
        status: r.try_get("status")?,
        event_id: r.try_get("event_id")?,
        created_at: r.try_get("created_at")?,
    })
}

fn outbox_row(r: &AnyRow) -> Result<OutboxRow, sqlx::Error> {
    Ok(OutboxRow {
        event_id: r.try_get("event_id")?,
        topic: r.try_get("topic")?,
        msg_key: r.try_get("msg_key")?,
        status: r.try_get("status")?,
        created_at: r.try_get("created_at")?,
        sent_at: r.try_get("sent_at")?,
    })
}

fn processed_row(r: &AnyRow) -> Result<ProcessedEventRow, sqlx::Error> {
    Ok(ProcessedEventRow {
        consumer_group: r.try_get("consumer_group")?,
        event_id: r.try_get("event_id")?,
        order_no: r.try_get("order_no")?,
        topic: r.try_get("topic")?,
        kafka_partition: r.try_get("kafka_partition")?,
        kafka_offset: r.try_get("kafka_offset")?,
        outcome: r.try_get("outcome")?,
        processed_at: r.try_get("processed_at")?,
        expire_at: r.try_get("expire_at")?,
    })
}

fn points_row(r: &AnyRow) -> Result<PointsRow, sqlx::Error> {
    Ok(PointsRow {
        source_event_no: r.try_get("source_event_no")?,
        order_no: r.try_get("order_no")?,
        user_id: r.try_get("user_id")?,
        points: r.try_get("points")?,
        created_at: r.try_get("created_at")?,
    })
}

fn notification_row(r: &AnyRow) -> Result<NotificationRow, sqlx::Error> {
    Ok(NotificationRow {
        event_id: r.try_get("event_id")?,
        order_no: r.try_get("order_no")?,
        user_id: r.try_get("user_id")?,
        channel: r.try_get("channel")?,
        body: r.try_get("body")?,
        created_at: r.try_get("created_at")?,
    })
}

// ---------------------------------------------------------------------------------------------
// Stuck records
// ---------------------------------------------------------------------------------------------

/// A `PROCESSING` record older than the stuck threshold, with what the order table says about
/// its requestId. Owner liveness comes from Redis ([`StuckRecord::owner_alive`] is filled by
/// [`annotate_stuck`]), so a database that answers while Redis is down still lists them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StuckRecord {
    pub request_id: String,
    pub order_no: Option<String>,
    pub owner: String,
    /// `true` when `instance:{owner}` exists, `false` when it does not, `null` when Redis did not
    /// answer.
    pub owner_alive: Option<bool>,
    /// `None` (here and below): the source profile maps no such column — unknown.
    pub fence: Option<i64>,
    pub created_at: i64,
    pub updated_at: Option<i64>,
    pub lease_until: Option<i64>,
    pub replay_count: Option<i64>,
    pub version: Option<i64>,
    /// What `order_record` says about the same requestId.
    pub order_exists: bool,
    pub order_status: Option<String>,
    pub found_order_no: Option<String>,
    /// The record lives in a team's own system (the source profile): finalize reconciles and
    /// writes the team's codes, and cannot fence a late commit of the team's service.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub foreign: bool,
}

impl StuckRecord {
    /// The record as the faces show it: its text columns that `[mask]` names (`owner`, the
    /// order's `status`) replaced by [`crate::mask::MASKED`]. Liveness is judged on the record as
    /// read, before; its times and counts are no customer data and are shown as they are.
    pub fn shown(&self, mask: &crate::mask::Mask) -> std::borrow::Cow<'_, StuckRecord> {
        let owner = mask.column("idempotency_record", "owner");
        let status = mask.column("order_record", "status") && self.order_status.is_some();
        if !owner && !status {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut r = self.clone();
        if owner {
            r.owner = crate::mask::MASKED.into();
        }
        if status {
            r.order_status = Some(crate::mask::MASKED.into());
        }
        std::borrow::Cow::Owned(r)
    }

    pub fn age_ms(&self, now_ms: i64) -> i64 {
        now_ms - self.created_at
    }
    /// Negative once the lease has run out; `None` when the system keeps no lease.
    pub fn lease_left_ms(&self, now_ms: i64) -> Option<i64> {
        self.lease_until.map(|l| l - now_ms)
    }
}

/// How many stuck records one poll reads at most (oldest first).
pub const STUCK_LIMIT: i64 = 1000;

/// `PROCESSING` records created before `now - threshold`, oldest first.
pub async fn stuck_records(
    db: &Database,
    now_ms: i64,
    threshold: std::time::Duration,
) -> anyhow::Result<Vec<StuckRecord>> {
    let cutoff = now_ms - threshold.as_millis() as i64;
    let read = sqlx::query(db.sql("console_stuck"))
        .bind(cutoff)
        .bind(STUCK_LIMIT)
        .fetch_all(&db.pool);
    let rows = db
        .bounded(read)
        .await
        .map_err(|e| query_error(db, "console_stuck", e))?;
    let mut records = decode_all(&rows, stuck_row)?;
    for r in &mut records {
        r.foreign = db.queries.is_foreign();
    }
    Ok(records)
}

fn stuck_row(r: &AnyRow) -> Result<StuckRecord, sqlx::Error> {
    let found_order_no: Option<String> = r.try_get("found_order_no")?;
    Ok(StuckRecord {
        request_id: r.try_get("request_id")?,
        order_no: r.try_get("order_no")?,
        owner: unknown_if_null(r.try_get("owner")?),
        owner_alive: None,
        fence: r.try_get("fence")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        lease_until: r.try_get("lease_until")?,
        replay_count: r.try_get("replay_count")?,
        version: r.try_get("version")?,
        order_exists: found_order_no.is_some(),
        order_status: r.try_get("found_order_status")?,
        found_order_no,
        foreign: false,
    })
}

/// Fill each record's owner liveness from the set of instances with a heartbeat (`None`: Redis
/// did not answer, so liveness is unknown — never guessed).
pub fn annotate_stuck(
    records: &mut [StuckRecord],
    live: Option<&std::collections::BTreeSet<String>>,
) {
    for r in records {
        // A system without an owner column has no heartbeat to ask about: unknown.
        r.owner_alive = live
            .filter(|_| r.owner != UNKNOWN)
            .map(|l| l.contains(&r.owner));
    }
}
