//! `doctor`'s check of the source profile against the live database: every mapped table and
//! column exists with a type its mapping can read (a `datetime` time column is a date/time type,
//! an `integer` status is an integer, …), and every console statement prepares on the server —
//! which resolves each table and column the way an EXPLAIN would, without needing parameter
//! values — and that each mapping means what the console takes it for: the order and request keys
//! are unique, a status column holds states, a stock is a number. Each problem is a row of its
//! own that names the profile key and the fix.

use std::time::Instant;

use sqlx::Row;

use super::CheckRow;
use crate::config::{SourceTable, StatusKind, TimeStorage, ABSENT, CONSOLE_TABLES};
use crate::db::Database;

const SERVICE: &str = "source profile";
/// The row of `source.time_zone`, apart from the profile's own (tables and columns).
const ZONE: &str = "time zone";

pub async fn check(config: &crate::config::Config, db: &Database) -> Vec<CheckRow> {
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut mapped = 0;
    for logical in CONSOLE_TABLES {
        let t = config.source.table(logical).expect("a profiled table");
        if t.table == ABSENT {
            continue;
        }
        let physical = physical_name(config, logical, t);
        match table_columns(db, &physical).await {
            Ok(cols) if cols.is_empty() => rows.push(CheckRow::fail(
                SERVICE,
                format!("source.{logical}.table"),
                started,
                format!("table {physical} does not exist (or this role cannot see it)"),
                format!("set source.{logical}.table to the team's table, or \"absent\" if there is none; a role needs SELECT on it"),
            )),
            Ok(cols) => {
                mapped += 1;
                let found = check_columns(logical, &physical, t, &cols, started);
                if found.is_empty() {
                    let mapping = Mapping { logical, physical: &physical, table: t };
                    rows.extend(check_meaning(db, &mapping, started).await);
                }
                rows.extend(found);
            }
            Err(e) => rows.push(CheckRow::fail(SERVICE, format!("source.{logical}"), started, e.to_string(), "check the database connection")),
        }
    }
    let prepared = prepare_all(db, started, &mut rows).await;
    if rows.is_empty() {
        rows.push(CheckRow::ok(
            SERVICE,
            "[source]",
            started,
            format!("{mapped} tables and their columns found with compatible types, their keys unique, their statuses states; {prepared} console statements prepare"),
        ));
    }
    rows.extend(check_time_zone(config, db).await);
    rows
}

/// `source.time_zone` against the server's zone and the newest rows of the wall-clock tables
/// (only those depend on it): a warning, since an application may write its own clock, which
/// the newest rows then show.
async fn check_time_zone(config: &crate::config::Config, db: &Database) -> Option<CheckRow> {
    use crate::db::clock;
    if !clock::profile_uses_wall_clock(&config.source) {
        return None;
    }
    let started = Instant::now();
    let offset = config.source.offset_ms().ok()?;
    let target = "source.time_zone";
    let evidence =
        clock::read_evidence(db, &config.source, &config.tables, super::CHECK_TIMEOUT).await;
    Some(match evidence {
        Err(e) => CheckRow::fail(
            ZONE,
            target,
            started,
            format!("{e:#}"),
            "the server's clock could not be read",
        ),
        Ok(e) => match e.check(offset) {
            Ok(agrees) => CheckRow::ok(ZONE, target, started, agrees),
            Err(warning) => CheckRow::warn(
                ZONE,
                target,
                started,
                warning,
                "a trace says the same on every order until it is fixed",
            ),
        },
    })
}

fn physical_name(config: &crate::config::Config, logical: &str, t: &SourceTable) -> String {
    if !t.table.is_empty() {
        return t.table.clone();
    }
    config
        .tables
        .pairs()
        .into_iter()
        .find(|(l, _)| *l == logical)
        .map_or_else(|| logical.to_string(), |(_, p)| p.to_string())
}

async fn table_columns(db: &Database, table: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows = sqlx::query(db.sql("doctor_columns"))
        .bind(table)
        .fetch_all(&db.pool)
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get::<String, _>(0)?.to_lowercase(),
                r.try_get::<String, _>(1)?.to_lowercase(),
            ))
        })
        .collect()
}

fn check_columns(
    logical: &str,
    physical: &str,
    t: &SourceTable,
    cols: &[(String, String)],
    started: Instant,
) -> Vec<CheckRow> {
    let mut out = Vec::new();
    for (key, column) in t.columns.iter().filter(|(_, c)| !c.is_empty()) {
        let profile_key = format!("source.{logical}.columns.{key}");
        let Some((_, ty)) = cols.iter().find(|(c, _)| c.eq_ignore_ascii_case(column)) else {
            let names: Vec<&str> = cols.iter().map(|(c, _)| c.as_str()).collect();
            out.push(CheckRow::fail(
                SERVICE,
                profile_key,
                started,
                format!("column {physical}.{column} does not exist"),
                format!(
                    "set it to one of {physical}'s columns ({}), or \"\" if it has none",
                    names.join(", ")
                ),
            ));
            continue;
        };
        if let Some(want) = expected_type(key, t).filter(|w| !w.accepts(ty)) {
            out.push(CheckRow::fail(
                SERVICE,
                profile_key,
                started,
                format!(
                    "column {physical}.{column} is {ty}, but the profile reads it as {}",
                    want.name()
                ),
                want.fix(logical, key),
            ));
        }
    }
    out
}

/// The family of types a mapping can read.
#[derive(Clone, Copy)]
enum Want {
    Integer,
    DateTime,
    Text,
}

impl Want {
    fn accepts(self, ty: &str) -> bool {
        match self {
            Want::Integer => ty.contains("int") || ty == "numeric" || ty == "decimal",
            Want::DateTime => ty.contains("timestamp") || ty == "datetime",
            Want::Text => ty.contains("char") || ty.contains("text"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Want::Integer => "an integer",
            Want::DateTime => "a date/time (DATETIME / TIMESTAMP)",
            Want::Text => "text",
        }
    }
    fn fix(self, logical: &str, key: &str) -> String {
        match (self, key) {
            (Want::DateTime | Want::Integer, k) if k.ends_with("_at") || k == "lease_until" => format!(
                "set source.{logical}.time to how the table stores times (\"datetime\" for DATETIME / TIMESTAMP, \"epoch_ms\" / \"epoch_s\" for BIGINT)"
            ),
            (_, "stock") => format!("set source.{logical}.columns.stock to the table's numeric stock column, or source.{logical}.table = \"absent\" if it keeps no stock"),
            _ => format!("set source.{logical}.status_kind to \"integer\" for codes or \"text\" for names"),
        }
    }
}

fn expected_type(key: &str, t: &SourceTable) -> Option<Want> {
    if key == "stock" {
        return Some(Want::Integer);
    }
    if key.ends_with("_at") || key == "lease_until" {
        return Some(match t.time {
            TimeStorage::Datetime | TimeStorage::Timestamptz => Want::DateTime,
            TimeStorage::EpochMs | TimeStorage::EpochS => Want::Integer,
        });
    }
    if key == "status" && !t.status.is_empty() {
        return Some(match t.status_kind {
            StatusKind::Integer => Want::Integer,
            StatusKind::Text => Want::Text,
        });
    }
    None
}

/// One mapped table whose columns all exist with compatible types.
struct Mapping<'a> {
    logical: &'a str,
    physical: &'a str,
    table: &'a SourceTable,
}

impl Mapping<'_> {
    fn column(&self, key: &str) -> Option<&str> {
        self.table
            .columns
            .get(key)
            .map(String::as_str)
            .filter(|c| !c.is_empty())
    }
}

/// What the console takes each mapping for: a key that identifies one order (or request), a
/// status column of states, a stock that is a number.
async fn check_meaning(db: &Database, m: &Mapping<'_>, started: Instant) -> Vec<CheckRow> {
    let mut rows = Vec::new();
    let key = match m.logical {
        "order_record" => Some("order_no"),
        "idempotency_record" => Some("request_id"),
        _ => None,
    };
    if let Some(row) = match key {
        Some(key) => check_unique(db, m, key, started).await,
        None => None,
    } {
        rows.push(row);
    }
    if m.logical == "inventory" && m.column("stock").is_none() {
        rows.push(CheckRow::fail(
            SERVICE,
            format!("source.{}.columns.stock", m.logical),
            started,
            format!("the inventory table {} is mapped without a stock column", m.physical),
            "set source.inventory.columns.stock to its numeric stock column, or source.inventory.table = \"absent\" if the system keeps no stock table",
        ));
    }
    if !m.table.status.is_empty() {
        rows.extend(check_states(db, m, started).await);
    }
    rows
}

/// The key column has a unique index of its own: else it is not what identifies one order (a
/// trace would merge several), or the table lets the duplicate through.
async fn check_unique(
    db: &Database,
    m: &Mapping<'_>,
    key: &str,
    started: Instant,
) -> Option<CheckRow> {
    let column = m.column(key)?;
    let target = format!("source.{}.columns.{key}", m.logical);
    let read = sqlx::query_scalar::<_, String>(db.sql("doctor_unique_columns"))
        .bind(m.physical)
        .fetch_all(&db.pool);
    match tokio::time::timeout(super::CHECK_TIMEOUT, read).await {
        Ok(Ok(unique)) if unique.iter().any(|u| u == column) => None,
        Ok(Ok(unique)) => Some(CheckRow::fail(
            SERVICE,
            target,
            started,
            format!(
                "column {}.{column} has no unique index or constraint of its own ({}), so it does not identify one row",
                m.physical,
                if unique.is_empty() { "the table has none".to_string() } else { format!("unique on their own: {}", unique.join(", ")) }
            ),
            format!(
                "set source.{}.columns.{key} to the table's unique {} column; if it is that column, the table lets duplicates in: add the unique key it needs",
                m.logical,
                key.replace('_', " ")
            ),
        )),
        Ok(Err(e)) => Some(CheckRow::fail(SERVICE, target, started, format!("the unique keys of {} could not be read: {e}", m.physical), "check the database connection")),
        Err(_) => Some(CheckRow::fail(SERVICE, target, started, format!("the unique keys of {} were not read within {:?}", m.physical, super::CHECK_TIMEOUT), "check the database's load")),
    }
}

/// A status column holds states: the profile's values occur in a sample of its rows, or its
/// values are few and short (names, small codes). An empty table says nothing.
async fn check_states(db: &Database, m: &Mapping<'_>, started: Instant) -> Option<CheckRow> {
    /// More distinct values than this in the sample is no set of states.
    const FEW: usize = 16;
    let column = m.column("status")?;
    let target = format!("source.{}.columns.status", m.logical);
    let sql = crate::profile::schema::statement(db, "profile_status_values", m.physical, column);
    let read = sqlx::query(&sql).fetch_all(&db.pool);
    let values: Vec<String> = match tokio::time::timeout(super::CHECK_TIMEOUT, read).await {
        Ok(Ok(rows)) => rows
            .iter()
            .map(|r| r.try_get::<Option<String>, _>(0).ok().flatten().unwrap_or_default())
            .collect(),
        Ok(Err(e)) => return Some(CheckRow::fail(SERVICE, target, started, format!("the values of {}.{column} could not be read: {e}", m.physical), "check the database connection")),
        Err(_) => return Some(CheckRow::warn(SERVICE, target, started, format!("the values of {}.{column} were not read within {:?}: whether it holds states is unchecked", m.physical, super::CHECK_TIMEOUT), "run doctor again when the database is less loaded")),
    };
    if values.is_empty() {
        return None;
    }
    let expected: Vec<&String> = m.table.status.values().filter(|v| !v.is_empty()).collect();
    if values.iter().any(|v| expected.contains(&v)) {
        return None;
    }
    let state_like = |v: &String| match v.parse::<i64>() {
        Ok(code) => code.abs() < 1_000,
        Err(_) => v.len() <= 32 && !v.contains(char::is_whitespace),
    };
    let shown: Vec<String> = values.iter().take(5).map(|v| format!("{v:?}")).collect();
    let expected: Vec<String> = expected.iter().map(|v| format!("{v:?}")).collect();
    let profile_values = format!(
        "none of the profile's status values ({}) occurs in a sample of up to 10,000 rows",
        expected.join(", ")
    );
    if values.len() <= FEW && values.iter().all(state_like) {
        return Some(CheckRow::warn(
            SERVICE,
            format!("source.{}.status", m.logical),
            started,
            format!(
                "{}.{column} looks like states, but {profile_values}: it holds {}",
                m.physical,
                shown.join(", ")
            ),
            format!(
                "set source.{}.status.* to the values the column stores",
                m.logical
            ),
        ));
    }
    let distinct = if values.len() > FEW {
        format!("more than {FEW} distinct values")
    } else {
        "values that are not names or small codes".into()
    };
    Some(CheckRow::fail(
        SERVICE,
        target,
        started,
        format!("column {}.{column} does not hold states: {profile_values}, and it has {distinct} (e.g. {})", m.physical, shown.join(", ")),
        format!("set source.{}.columns.status to the column that holds the table's states, or \"\" if it has none", m.logical),
    ))
}

/// Prepare every console statement the profile can run; returns how many did.
async fn prepare_all(db: &Database, started: Instant, rows: &mut Vec<CheckRow>) -> usize {
    let mut ok = 0;
    for name in db.queries.console_names() {
        if db.queries.missing(name).is_some() {
            continue;
        }
        match sqlx::Executor::describe(&db.pool, db.sql(name)).await {
            Ok(_) => ok += 1,
            Err(e) => rows.push(CheckRow::fail(
                SERVICE,
                format!("queries/{}/{name}.sql", db.dialect().dir()),
                started,
                format!("does not prepare: {e}"),
                "a profile key names a column or table the database does not have (see the rows above), or a queries_dir override is wrong",
            )),
        }
    }
    ok
}
