//! `doctor`'s check of the source profile against the live database: every mapped table and
//! column exists with a type its mapping can read (a `datetime` time column is a date/time type,
//! an `integer` status is an integer, …), and every console statement prepares on the server —
//! which resolves each table and column the way an EXPLAIN would, without needing parameter
//! values. Each problem is a row of its own that names the profile key and the fix.

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
                rows.extend(check_columns(logical, &physical, t, &cols, started));
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
            format!("{mapped} tables and their columns found with compatible types; {prepared} console statements prepare"),
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
            _ => format!("set source.{logical}.status_kind to \"integer\" for codes or \"text\" for names"),
        }
    }
}

fn expected_type(key: &str, t: &SourceTable) -> Option<Want> {
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
