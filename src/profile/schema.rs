//! The database side of a suggested profile: which of the live tables look like the idempotency
//! record, the orders, stock, payments, points and notifications, by their column names, unique
//! keys and types; how each stores its times; which status values it holds, with their counts.
//! Read-only, every statement bounded (a `LIMIT`, a sample, a deadline), every guess with what
//! it was based on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sqlx::Row;

use crate::config::{SourceProfile, StatusKind, TimeStorage, CONSOLE_TABLES};
use crate::db::Database;

/// A table as `information_schema` lists it, its names spelled as there (`Order`, `orderNo`:
/// written into SQL through [`crate::config::Dialect::identifier`]).
#[derive(Debug, Clone, Default)]
pub struct LiveTable {
    pub name: String,
    /// (column, data type lowercase), in the table's order.
    pub columns: Vec<(String, String)>,
    /// Columns that are a unique key on their own (the primary key excluded).
    pub unique: BTreeSet<String>,
}

impl LiveTable {
    fn type_of(&self, column: &str) -> Option<&str> {
        self.columns
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, t)| t.as_str())
    }
}

/// The tables read, and what was not: names a profile cannot hold, and what lies beyond the
/// bounds (said in the file and on stderr, never dropped without a word).
#[derive(Debug, Default)]
pub struct LiveSchema {
    pub tables: Vec<LiveTable>,
    pub not_read: Vec<String>,
}

/// The tables of the current database or schema (the first `limit` by name), with their columns
/// and unique keys.
pub async fn live_tables(db: &Database, limit: usize) -> anyhow::Result<LiveSchema> {
    let err = |what: &str, e: sqlx::Error| anyhow::anyhow!("{what} ({}): {e}", db.shown_url);
    let mut tables: BTreeMap<String, LiveTable> = BTreeMap::new();
    let (mut total, mut listed, mut odd_tables) = (0i64, 0i64, Vec::new());
    for r in sqlx::query(db.sql("profile_tables"))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&db.pool)
        .await
        .map_err(|e| err("listing the tables", e))?
    {
        let name: String = r.try_get(0)?;
        total = r.try_get(1)?;
        listed += 1;
        if !SourceProfile::is_plain_name(&name) {
            odd_tables.push(name);
            continue;
        }
        let table = LiveTable {
            name: name.clone(),
            ..LiveTable::default()
        };
        tables.insert(name, table);
    }
    let mut not_read = Vec::new();
    if total > listed {
        not_read.push(format!(
            "{} of the {total} tables: only the first {listed} by name were read (the bound of a suggestion); map the others by hand",
            total - listed
        ));
    }
    if !odd_tables.is_empty() {
        not_read.push(format!(
            "{} table(s) whose names are not plain SQL identifiers (letters, digits, _), which a profile cannot name: {}",
            odd_tables.len(),
            odd_tables.join(", ")
        ));
    }
    let (mut total, mut listed, mut odd_columns) = (0i64, 0i64, Vec::new());
    for r in sqlx::query(db.sql("profile_columns"))
        .fetch_all(&db.pool)
        .await
        .map_err(|e| err("listing the columns", e))?
    {
        let (t, c, ty): (String, String, String) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        total = r.try_get(3)?;
        listed += 1;
        let Some(table) = tables.get_mut(&t) else {
            continue;
        };
        if SourceProfile::is_plain_name(&c) {
            table.columns.push((c, ty.to_lowercase()));
        } else {
            odd_columns.push(format!("{t}.{c}"));
        }
    }
    if total > listed {
        not_read.push(format!(
            "{} of the {total} columns: only the first {listed} (by table name) were read",
            total - listed
        ));
    }
    if !odd_columns.is_empty() {
        not_read.push(format!(
            "{} column(s) whose names are not plain SQL identifiers (letters, digits, _), which a profile cannot name: {}",
            odd_columns.len(),
            odd_columns.join(", ")
        ));
    }
    let mut keys: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for r in sqlx::query(db.sql("profile_unique_columns"))
        .fetch_all(&db.pool)
        .await
        .map_err(|e| err("listing the unique keys", e))?
    {
        let (t, i, c): (String, String, String) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        keys.entry((t, i)).or_default().push(c);
    }
    for ((t, _), cols) in keys {
        if let (Some(table), [one]) = (tables.get_mut(&t), cols.as_slice()) {
            table.unique.insert(one.clone());
        }
    }
    Ok(LiveSchema {
        tables: tables.into_values().collect(),
        not_read,
    })
}

/// A `profile_*` statement on column `col` of `table`, both written as the dialect names them
/// exactly.
pub fn statement(db: &Database, name: &str, table: &str, col: &str) -> String {
    let d = db.dialect();
    db.sql(name)
        .replace("{table}", &d.identifier(table))
        .replace("{col}", &d.identifier(col))
}

/// The names a team gives each logical column, compared without case, `_` or `-`, in order of
/// preference.
fn synonyms(logical_table: &str, column: &str) -> &'static [&'static str] {
    match (logical_table, column) {
        ("idempotency_record", "request_id") => &[
            "requestid",
            "idempotencykey",
            "idemkey",
            "idempotentkey",
            "reqid",
            "requestno",
            "reqno",
        ],
        ("order_record", "req_id") => &[
            "reqid",
            "requestid",
            "idempotencykey",
            "idemkey",
            "idempotentkey",
            "requestno",
            "reqno",
        ],
        (_, "order_no") => &[
            "orderno",
            "ordersn",
            "ordernumber",
            "orderid",
            "bizorderno",
            "ordercode",
            "outtradeno",
        ],
        (_, "user_id") => &["userid", "customerid", "buyerid", "memberid", "uid"],
        (_, "sku_id") => &["skuid", "productid", "goodsid", "itemid", "sku"],
        (_, "quantity") => &["quantity", "qty", "num", "count"],
        (_, "amount") => &[
            "amount",
            "totalamount",
            "amountcents",
            "payamount",
            "totalfee",
            "fee",
            "price",
        ],
        (_, "status") => &["status", "state", "orderstatus", "paystatus"],
        (_, "version") => &["version", "ver", "lockversion", "rowversion"],
        (_, "fence") => &["fence", "fencetoken"],
        (_, "payment_event_id") => &["paymenteventid", "payeventid", "paideventid"],
        (_, "created_at") => &[
            "createdat",
            "createtime",
            "createdtime",
            "gmtcreate",
            "ctime",
            "createdon",
            "insertedat",
            "occurredat",
        ],
        (_, "updated_at") => &[
            "updatedat",
            "updatetime",
            "updatedtime",
            "gmtmodified",
            "mtime",
            "modifiedat",
            "lastmodified",
        ],
        (_, "expire_at") => &["expireat", "expiresat", "expiretime", "expiredat"],
        (_, "biz_type") => &["biztype", "businesstype"],
        (_, "request_hash") => &[
            "requesthash",
            "payloadhash",
            "bodyhash",
            "fingerprint",
            "hash",
        ],
        (_, "response_code") => &["responsecode", "httpstatus", "statuscode", "rescode"],
        (_, "response_body") => &["responsebody", "resbody", "response", "result"],
        (_, "owner") => &["owner", "ownerid", "lockowner", "instanceid", "holder"],
        (_, "lease_until") => &["leaseuntil", "leaseexpireat", "lockeduntil"],
        (_, "replay_count") => &["replaycount", "replays", "hitcount"],
        (_, "pay_no") => &[
            "payno",
            "paymentno",
            "tradeno",
            "transactionid",
            "txnno",
            "paymentid",
            "payid",
            "outtradeno",
        ],
        ("points_ledger", "source_event_no") => &[
            "sourceeventno",
            "sourceeventid",
            "eventid",
            "eventno",
            "bizno",
        ],
        (_, "event_id") => &["eventid", "paymenteventid", "messageid", "msgid"],
        (_, "points") => &["points", "point", "score", "bonus"],
        (_, "delta") => &["delta", "change", "quantitychange", "qty", "quantity"],
        (_, "stock") => &[
            "stock",
            "stockqty",
            "stocknum",
            "available",
            "availableqty",
            "remaining",
            "onhand",
            "quantity",
            "qty",
        ],
        (_, "channel") => &["channel", "kind", "type"],
        (_, "body") => &["body", "content", "message", "text", "title"],
        _ => &[],
    }
}

/// The columns that identify a logical table (all must be found), and words its name may hold.
fn identity(logical: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match logical {
        "idempotency_record" => (&["request_id", "status"], &["idem", "request"]),
        "order_record" => (&["order_no", "status"], &["order"]),
        "inventory" => (&["sku_id", "stock"], &["inventory", "stock"]),
        "stock_movement" => (&["order_no", "sku_id", "delta"], &["movement", "stock"]),
        "payment_flow" => (&["pay_no", "order_no"], &["pay"]),
        "points_ledger" => (&["source_event_no", "points"], &["point"]),
        "notification" => (&["event_id", "order_no"], &["notif", "message", "msg"]),
        _ => (&[], &[]),
    }
}

fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The physical column of `column` in `table`, by its names; not one another logical column of
/// the same table already took.
fn find_column(
    logical: &str,
    column: &str,
    table: &LiveTable,
    taken: &BTreeSet<String>,
) -> Option<String> {
    synonyms(logical, column).iter().find_map(|want| {
        table
            .columns
            .iter()
            .find(|(c, _)| normalized(c) == *want && !taken.contains(c))
            .map(|(c, _)| c.clone())
    })
}

/// One logical table matched to a live one.
#[derive(Debug, Clone, Default)]
pub struct TableGuess {
    pub logical: &'static str,
    /// `None`: no live table looks like it ("absent").
    pub table: Option<String>,
    /// Logical column → physical ("" = none), in the profile's order.
    pub columns: Vec<(String, String)>,
    pub time: TimeStorage,
    pub status_kind: StatusKind,
    /// idemguard's status name → stored value ("" = none seen).
    pub status: Vec<(String, String)>,
    /// Comment lines: what each guess was based on.
    pub notes: Vec<String>,
}

/// The score of `table` as `logical` (None: its identifying columns are not all there).
fn score(logical: &str, table: &LiveTable) -> Option<usize> {
    let (needed, words) = identity(logical);
    let mut taken = BTreeSet::new();
    let mut score = 0;
    for c in needed {
        let found = find_column(logical, c, table, &taken)?;
        score += if table.unique.contains(&found) { 3 } else { 2 };
        taken.insert(found);
    }
    if logical == "inventory" && !holds_stock(table) {
        return None;
    }
    let name = table.name.to_lowercase();
    score += words.iter().filter(|w| name.contains(*w)).count() * 2;
    Some(score)
}

/// Whether `table` has a numeric column named like stock: a `qty` or `quantity` counts only in a
/// table named for stock (an order's quantity is no stock level), a text column never.
fn holds_stock(table: &LiveTable) -> bool {
    let Some(stock) = find_column("inventory", "stock", table, &BTreeSet::new()) else {
        return false;
    };
    let name = normalized(&table.name);
    let stock_table = ["stock", "inventory", "inventories", "warehouse"]
        .iter()
        .any(|w| name.contains(w));
    let weak = matches!(normalized(&stock).as_str(), "qty" | "quantity");
    is_numeric(table.type_of(&stock).unwrap_or("")) && (stock_table || !weak)
}

/// An integer or decimal type, as `information_schema` names it in either dialect.
pub fn is_numeric(ty: &str) -> bool {
    ty.contains("int") || ty == "numeric" || ty == "decimal"
}

/// Each logical table's best live table (each live table used once), best matches first.
pub fn match_tables(
    live: &[LiveTable],
    columns_of: impl Fn(&str) -> Vec<String>,
) -> Vec<TableGuess> {
    let mut candidates: Vec<(usize, &'static str, usize)> = Vec::new();
    for logical in CONSOLE_TABLES {
        for (i, t) in live.iter().enumerate() {
            if let Some(s) = score(logical, t) {
                candidates.push((s, logical, i));
            }
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut chosen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut used = BTreeSet::new();
    for (_, logical, i) in candidates {
        if !chosen.contains_key(logical) && used.insert(i) {
            chosen.insert(logical, i);
        }
    }
    CONSOLE_TABLES
        .iter()
        .map(|logical| match chosen.get(logical) {
            Some(&i) => guess_columns(logical, &live[i], &columns_of(logical)),
            None => TableGuess {
                logical,
                notes: vec![format!(
                    "no table has the columns of a {} ({}): absent",
                    logical.replace('_', " "),
                    identity(logical).0.join(", ")
                )],
                ..TableGuess::default()
            },
        })
        .collect()
}

fn guess_columns(
    logical: &'static str,
    table: &LiveTable,
    logical_columns: &[String],
) -> TableGuess {
    let mut g = TableGuess {
        logical,
        table: Some(table.name.clone()),
        ..TableGuess::default()
    };
    let mut taken = BTreeSet::new();
    let mut found = Vec::new();
    for col in logical_columns {
        let physical = find_column(logical, col, table, &taken).unwrap_or_default();
        if !physical.is_empty() {
            taken.insert(physical.clone());
            let unique = if table.unique.contains(&physical) {
                ", unique"
            } else {
                ""
            };
            let ty = table.type_of(&physical).unwrap_or("?");
            found.push(format!("{col} = {physical} ({ty}{unique})"));
        }
        g.columns.push((col.clone(), physical));
    }
    let missing: Vec<&str> = g
        .columns
        .iter()
        .filter(|(_, p)| p.is_empty())
        .map(|(l, _)| l.as_str())
        .collect();
    g.notes.push(format!(
        "{}: by column names — {}",
        table.name,
        found.join(", ")
    ));
    if !missing.is_empty() {
        g.notes.push(format!(
            "no column for {}: shown as unknown",
            missing.join(", ")
        ));
    }
    g.time = time_storage(&g, table);
    drop_mismatched_times(&mut g, table);
    g
}

/// A table's time columns are read one way (`time`): another time column stored otherwise (a
/// BIGINT `expire_at` beside a DATETIME `created_at`) is left unmapped, and said.
fn drop_mismatched_times(g: &mut TableGuess, table: &LiveTable) {
    let family = |ty: &str| {
        if ty.contains("int") || ty == "numeric" || ty == "decimal" {
            "integer"
        } else if ty.contains("time") || ty == "date" {
            "date/time"
        } else {
            "other"
        }
    };
    let Some(created) = g.physical("created_at") else {
        return;
    };
    let want = family(table.type_of(&created).unwrap_or(""));
    let mut dropped = Vec::new();
    for (logical, physical) in &mut g.columns {
        let is_time = logical.ends_with("_at") || logical == "lease_until";
        if !is_time || physical.is_empty() || *physical == created {
            continue;
        }
        let ty = table.type_of(physical).unwrap_or("");
        if family(ty) != want {
            dropped.push(format!(
                "{logical} ({physical} is {ty}, {created} is {want})"
            ));
            physical.clear();
        }
    }
    if !dropped.is_empty() {
        g.notes.push(format!(
            "not mapped, stored unlike created_at: {}",
            dropped.join(", ")
        ));
    }
}

/// How the table stores its times, from its `created_at` column's type (`epoch_ms` refined by
/// the values when the column is an integer: [`refine_epoch`]).
fn time_storage(g: &TableGuess, table: &LiveTable) -> TimeStorage {
    let Some((_, created)) = g
        .columns
        .iter()
        .find(|(l, p)| l == "created_at" && !p.is_empty())
    else {
        return TimeStorage::EpochMs;
    };
    match table.type_of(created).unwrap_or("") {
        t if t.contains("with time zone") => TimeStorage::Timestamptz,
        // MySQL's TIMESTAMP is an instant, shown in the session's zone.
        "timestamp" if !t_is_postgres_plain(table, created) => TimeStorage::Timestamptz,
        t if t.contains("timestamp") || t == "datetime" || t == "date" => TimeStorage::Datetime,
        _ => TimeStorage::EpochMs,
    }
}

/// PostgreSQL names its zone-less type "timestamp without time zone", MySQL a TIMESTAMP
/// "timestamp": a bare "timestamp" is MySQL's.
fn t_is_postgres_plain(table: &LiveTable, column: &str) -> bool {
    table
        .type_of(column)
        .is_some_and(|t| t.contains("without time zone"))
}

/// An integer time column: epoch seconds or milliseconds, by the size of its newest value.
pub async fn refine_epoch(db: &Database, g: &mut TableGuess, deadline: Duration) {
    if g.time != TimeStorage::EpochMs {
        return;
    }
    let (Some(table), Some(col)) = (g.table.clone(), g.physical("created_at")) else {
        return;
    };
    let sql = statement(db, "profile_newest_number", &table, &col);
    let read = sqlx::query_scalar::<_, Option<i64>>(&sql).fetch_one(&db.pool);
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(Some(v))) if v < 100_000_000_000 => {
            g.time = TimeStorage::EpochS;
            g.notes.push(format!("times: {col} is an integer, newest {v}: epoch seconds"));
        }
        Ok(Ok(Some(v))) => g.notes.push(format!("times: {col} is an integer, newest {v}: epoch milliseconds")),
        _ => g.notes.push(format!("times: {col} is an integer and its newest value could not be read in time: epoch milliseconds assumed (a guess)")),
    }
}

impl TableGuess {
    pub fn physical(&self, logical_column: &str) -> Option<String> {
        self.columns
            .iter()
            .find(|(l, p)| l == logical_column && !p.is_empty())
            .map(|(_, p)| p.clone())
    }
}

/// The status names idemguard knows for a logical table, and what teams write for each.
fn status_names(logical: &str) -> &'static [(&'static str, &'static [&'static str])] {
    match logical {
        "idempotency_record" => &[
            (
                "PROCESSING",
                &[
                    "PROCESSING",
                    "INIT",
                    "PENDING",
                    "IN_PROGRESS",
                    "RUNNING",
                    "DOING",
                ],
            ),
            (
                "SUCCEEDED",
                &[
                    "SUCCEEDED",
                    "SUCCESS",
                    "DONE",
                    "COMPLETED",
                    "FINISHED",
                    "OK",
                ],
            ),
            ("FAILED", &["FAILED", "FAIL", "FAILURE", "ERROR"]),
        ],
        "order_record" => &[
            (
                "CREATED",
                &[
                    "CREATED",
                    "INIT",
                    "NEW",
                    "WAIT_PAY",
                    "UNPAID",
                    "PENDING",
                    "AWAITING_PAYMENT",
                ],
            ),
            (
                "PAID",
                &["PAID", "DONE", "SUCCESS", "PAY_SUCCESS", "COMPLETED"],
            ),
            ("CANCELLED", &["CANCELLED", "CANCELED", "CLOSED"]),
            ("REFUNDED", &["REFUNDED", "REFUND"]),
        ],
        _ => &[],
    }
}

/// The article's integer codes (§5.3: 0 processing, 1 success, 2 failed; §2.1: 0 awaiting
/// payment, 1 paid), the only convention there is for codes.
fn article_code(logical: &str, name: &str) -> Option<&'static str> {
    match (logical, name) {
        ("idempotency_record", "PROCESSING") | ("order_record", "CREATED") => Some("0"),
        ("idempotency_record", "SUCCEEDED") | ("order_record", "PAID") => Some("1"),
        ("idempotency_record", "FAILED") => Some("2"),
        _ => None,
    }
}

/// The status column's kind, values and counts (a sample of the table's rows), and the value
/// guessed for each of idemguard's names.
pub async fn guess_status(db: &Database, g: &mut TableGuess, live: &LiveTable, deadline: Duration) {
    let names = status_names(g.logical);
    if names.is_empty() {
        return;
    }
    let (Some(table), Some(col)) = (g.table.clone(), g.physical("status")) else {
        return;
    };
    let ty = live.type_of(&col).unwrap_or("").to_string();
    g.status_kind = if ty.contains("int") || ty == "numeric" || ty == "decimal" {
        StatusKind::Integer
    } else {
        StatusKind::Text
    };
    let sql = statement(db, "profile_status_values", &table, &col);
    let read = sqlx::query(&sql).fetch_all(&db.pool);
    let values: Vec<(String, i64)> = match tokio::time::timeout(deadline, read).await {
        Ok(Ok(rows)) => rows
            .iter()
            .filter_map(|r| Some((r.try_get::<Option<String>, _>(0).ok()??, r.try_get(1).ok()?)))
            .collect(),
        _ => Vec::new(),
    };
    let shown: Vec<String> = values.iter().map(|(v, n)| format!("{v:?} ×{n}")).collect();
    g.notes.push(format!(
        "status: {col} is {ty}; values in a sample of up to 10,000 rows: {}",
        if shown.is_empty() {
            "none (empty table, or not read in time)".into()
        } else {
            shown.join(", ")
        }
    ));
    let mut unnamed: Vec<&str> = values.iter().map(|(v, _)| v.as_str()).collect();
    // A table that stores idemguard's own names stores the ones not in the sample the same way.
    let own_names = g.status_kind == StatusKind::Text
        && values
            .iter()
            .any(|(v, _)| names.iter().any(|(n, _)| n == v));
    for (name, words) in names {
        let value = match g.status_kind {
            StatusKind::Text => values
                .iter()
                .find(|(v, _)| words.iter().any(|w| w.eq_ignore_ascii_case(v)))
                .map(|(v, _)| v.clone()),
            StatusKind::Integer => article_code(g.logical, name).map(str::to_string),
        };
        let value = value.unwrap_or_else(|| {
            if own_names {
                name.to_string()
            } else {
                String::new()
            }
        });
        unnamed.retain(|v| *v != value);
        g.status.push((name.to_string(), value));
    }
    if g.status_kind == StatusKind::Integer {
        g.notes.push("status codes: a GUESS from the article's convention (0 processing / awaiting payment, 1 success / paid, 2 failed) — check them against the team's code".into());
    } else {
        g.notes.push("status names: by the values present (INIT → PROCESSING / CREATED, DONE → SUCCEEDED / PAID, …)".into());
    }
    if !unnamed.is_empty() {
        g.notes.push(format!(
            "values no name was given: {} (shown as stored)",
            unnamed.join(", ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, columns: &[(&str, &str)], unique: &[&str]) -> LiveTable {
        LiveTable {
            name: name.into(),
            columns: columns
                .iter()
                .map(|(c, t)| (c.to_string(), t.to_string()))
                .collect(),
            unique: unique.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn matched(live: &[LiveTable]) -> BTreeMap<&'static str, Option<String>> {
        let defaults = crate::config::Config::defaults().source;
        let columns_of = |logical: &str| -> Vec<String> {
            defaults
                .table(logical)
                .map(|t| t.columns.keys().cloned().collect())
                .unwrap_or_default()
        };
        match_tables(live, columns_of)
            .into_iter()
            .map(|g| (g.logical, g.table))
            .collect()
    }

    #[test]
    fn a_payment_table_of_alipay_names_is_a_payment_flow() {
        let live = [
            table(
                "t_order",
                &[
                    ("order_sn", "varchar"),
                    ("request_no", "varchar"),
                    ("state", "int"),
                ],
                &["order_sn"],
            ),
            table(
                "t_pay_record",
                &[("trade_no", "varchar"), ("out_trade_no", "varchar")],
                &["trade_no"],
            ),
        ];
        let m = matched(&live);
        assert_eq!(m["order_record"].as_deref(), Some("t_order"));
        assert_eq!(m["payment_flow"].as_deref(), Some("t_pay_record"));
    }

    #[test]
    fn no_inventory_without_a_numeric_stock() {
        let orders_line = table(
            "t_order_line",
            &[("sku_id", "bigint"), ("qty", "integer")],
            &[],
        );
        let text_stock = table(
            "sku_stock",
            &[("sku_id", "bigint"), ("stock", "character varying")],
            &[],
        );
        let m = matched(&[orders_line, text_stock]);
        assert_eq!(m["inventory"], None);
        let real = table("t_stock", &[("sku_id", "bigint"), ("qty", "integer")], &[]);
        assert_eq!(matched(&[real])["inventory"].as_deref(), Some("t_stock"));
    }
}
