//! Which zone a system's wall-clock times are written in. A `DATETIME` (PostgreSQL `timestamp`)
//! holds no zone: `source.time_zone` says it, and when it is wrong every row time is read hours
//! off, every window of the trace misses the messages and log lines, and nothing fails. So the
//! profile's zone is checked where it is relied on — `profile suggest`, `doctor`, every trace —
//! against two witnesses: the server's own zone (what `DEFAULT CURRENT_TIMESTAMP` writes) and
//! the newest rows (an application that writes its own wall clock, ahead of a server in UTC,
//! leaves rows "in the future" of the server's clock).
//!
//! [`ZoneEvidence`] is read with [`read_evidence`] ([`trace_check`] for a trace); what it says is pure ([`ZoneEvidence::rows_zone`],
//! [`ZoneEvidence::check`]).

use std::time::Duration;

use sqlx::Row;

use crate::config::{SourceProfile, TableNames, TimeStorage, CONSOLE_TABLES};

use crate::db::Database;

/// A row this far ahead of the server's clock was not written by it.
const AHEAD_TOLERANCE_MS: i64 = 5 * 60_000;
/// Zones are whole quarters of an hour (Nepal's +05:45 included).
const QUARTER_HOUR_MS: i64 = 15 * 60_000;

/// The server's clock: its zone's name, its offset from UTC and its wall clock now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerClock {
    pub zone: String,
    pub offset_ms: i64,
    /// Epoch ms of the server's wall clock now (UTC + offset).
    pub wall_ms: i64,
}

/// The newest wall-clock time of one time column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewestRow {
    /// `table.column`.
    pub column: String,
    /// Epoch ms of the stored wall clock, as if it were UTC.
    pub wall_ms: i64,
}

/// What the live database says about the zone of its wall-clock times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneEvidence {
    pub server: ServerClock,
    pub newest: Vec<NewestRow>,
}

/// "+08:00" of an offset in ms.
pub fn offset_text(ms: i64) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    let m = ms.abs() / 60_000;
    format!("{sign}{:02}:{:02}", m / 60, m % 60)
}

/// "8 h", "5 h 30 min", "20 min".
pub fn span_text(ms: i64) -> String {
    let m = ms.abs() / 60_000;
    match (m / 60, m % 60) {
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}

impl ZoneEvidence {
    /// The zone the rows were written in, when the newest row is ahead of the server's clock
    /// (the server's zone plus how far ahead, to the quarter hour), with what says so; `None`
    /// when no row is ahead (the rows may be the server's own clock, or simply older).
    pub fn rows_zone(&self) -> Option<(i64, String)> {
        let newest = self.newest.iter().max_by_key(|n| n.wall_ms)?;
        let ahead = newest.wall_ms - self.server.wall_ms;
        if ahead <= AHEAD_TOLERANCE_MS {
            return None;
        }
        // The newest row is older than now by however long ago it was written: its zone is
        // at least `ahead` east of the server's, rounded up to the quarter hour.
        let quarters = (ahead + QUARTER_HOUR_MS - 1) / QUARTER_HOUR_MS;
        let offset = self.server.offset_ms + quarters * QUARTER_HOUR_MS;
        let why = format!(
            "the newest {} is {} ahead of the server's clock ({} {}): the application writes its own wall clock",
            newest.column,
            span_text(ahead),
            self.server.zone,
            offset_text(self.server.offset_ms)
        );
        Some((offset, why))
    }

    /// The zone a profile should say, and what it is based on.
    pub fn suggested(&self) -> (i64, String) {
        self.rows_zone().unwrap_or_else(|| {
            let why = format!(
                "the server's zone {} ({}); no row is ahead of its clock",
                self.server.zone,
                offset_text(self.server.offset_ms)
            );
            (self.server.offset_ms, why)
        })
    }

    /// `Ok(what agrees)` when `profile_ms` is the zone the evidence points at, else the warning.
    pub fn check(&self, profile_ms: i64) -> Result<String, String> {
        let (want, why) = self.suggested();
        if want == profile_ms {
            return Ok(format!(
                "source.time_zone {} agrees with {why}",
                offset_text(profile_ms)
            ));
        }
        let off = profile_ms - want;
        Err(format!(
            "source.time_zone is {} but {why}: every wall-clock time is read {} {} and the trace's windows miss what happened then; set source.time_zone = \"{}\"",
            offset_text(profile_ms),
            span_text(off),
            if off > 0 { "early" } else { "late" },
            offset_text(want)
        ))
    }
}

/// True when some mapped table stores wall-clock times (`time = "datetime"`): only those depend
/// on `source.time_zone`.
pub fn profile_uses_wall_clock(source: &SourceProfile) -> bool {
    CONSOLE_TABLES.iter().any(|l| {
        source
            .table(l)
            .is_some_and(|t| t.table != crate::config::ABSENT && t.time == TimeStorage::Datetime)
    })
}

/// The server's clock.
pub async fn server_clock(db: &Database) -> anyhow::Result<ServerClock> {
    let read = sqlx::query(db.sql("profile_server_clock")).fetch_one(&db.pool);
    let row = db
        .bounded(read)
        .await
        .map_err(|e| anyhow::anyhow!("reading the server's clock ({}): {e}", db.shown_url))?;
    Ok(ServerClock {
        zone: row.try_get("zone")?,
        offset_ms: row.try_get::<i64, _>("offset_s")? * 1000,
        wall_ms: row.try_get("wall_ms")?,
    })
}

/// The newest wall-clock time of `column` of `table` (names a profile may hold, checked by the
/// caller), within `deadline` (a `MAX` over a column without an index reads the table): `None`
/// when empty or slow.
pub async fn newest_wall_ms(
    db: &Database,
    table: &str,
    column: &str,
    deadline: Duration,
) -> Option<i64> {
    let sql = db
        .sql("profile_newest_time")
        .replace("{table}", &db.dialect().identifier(table))
        .replace("{col}", &db.dialect().identifier(column));
    let read = sqlx::query_scalar::<_, Option<i64>>(&sql).fetch_one(&db.pool);
    tokio::time::timeout(deadline, read).await.ok()?.ok()?
}

/// The server's clock and the newest `created_at` of every mapped wall-clock table.
pub async fn read_evidence(
    db: &Database,
    source: &SourceProfile,
    tables: &TableNames,
    deadline: Duration,
) -> anyhow::Result<ZoneEvidence> {
    let server = server_clock(db).await?;
    let mut newest = Vec::new();
    for logical in CONSOLE_TABLES {
        let Some(t) = source.table(logical) else {
            continue;
        };
        if t.table == crate::config::ABSENT || t.time != TimeStorage::Datetime {
            continue;
        }
        let Some(column) = t.columns.get("created_at").filter(|c| !c.is_empty()) else {
            continue;
        };
        let table = source.physical_name(tables, logical);
        if let Some(wall_ms) = newest_wall_ms(db, &table, column, deadline).await {
            newest.push(NewestRow {
                column: format!("{table}.{column}"),
                wall_ms,
            });
        }
    }
    Ok(ZoneEvidence { server, newest })
}

/// How long a trace waits for the newest rows of the wall-clock tables (read once per
/// connection).
const NEWEST_ROWS_DEADLINE: Duration = Duration::from_secs(2);

/// A trace's check of `source.time_zone`: against the server's zone, the newest rows of the
/// wall-clock tables (read once per connection) and `trace_walls` (the trace's own rows, as
/// (`table.column`, epoch ms read)). `None`: it agrees, or nothing relies on it.
pub async fn trace_check(db: &Database, trace_walls: &[(String, i64)]) -> Option<String> {
    let source = db.queries.source();
    if !profile_uses_wall_clock(source) {
        return None;
    }
    let profile_ms = source.offset_ms().ok()?;
    let server = server_clock(db).await.ok()?;
    let tables = db
        .newest_rows
        .get_or_init(|| async {
            let read = read_evidence(db, source, db.queries.tables(), NEWEST_ROWS_DEADLINE);
            let all = NEWEST_ROWS_DEADLINE * 3;
            match tokio::time::timeout(all, read).await {
                Ok(Ok(e)) => e.newest,
                _ => Vec::new(),
            }
        })
        .await;
    let mut newest = tables.clone();
    newest.extend(trace_walls.iter().map(|(column, ms)| NewestRow {
        column: column.clone(),
        wall_ms: ms + profile_ms,
    }));
    ZoneEvidence { server, newest }.check(profile_ms).err()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn evidence(server_offset: i64, ahead: Option<i64>) -> ZoneEvidence {
        let wall = 1_764_576_000_000 + server_offset;
        ZoneEvidence {
            server: ServerClock {
                zone: "UTC".into(),
                offset_ms: server_offset,
                wall_ms: wall,
            },
            newest: ahead
                .map(|a| NewestRow {
                    column: "shop_order.created_at".into(),
                    wall_ms: wall + a,
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn rows_ahead_of_a_utc_server_were_written_in_their_own_zone() {
        // Written at +08:00 two minutes ago, on a UTC server.
        let e = evidence(0, Some(8 * H - 120_000));
        assert_eq!(e.suggested().0, 8 * H);
        assert!(e.check(8 * H).is_ok());
        let warning = e.check(0).unwrap_err();
        assert!(
            warning.contains("set source.time_zone = \"+08:00\""),
            "{warning}"
        );
        assert!(warning.contains("7 h 58 min ahead"), "{warning}");
        assert!(warning.contains("read 8 h late"), "{warning}");
    }

    #[test]
    fn without_rows_ahead_the_servers_zone_is_the_witness() {
        let e = evidence(0, Some(-3 * H));
        assert_eq!(e.suggested().0, 0);
        let warning = e.check(8 * H).unwrap_err();
        assert!(warning.contains("read 8 h early"), "{warning}");
        assert!(evidence(-5 * H - 30 * 60_000, None)
            .check(-5 * H - 30 * 60_000)
            .is_ok());
        assert_eq!(offset_text(-5 * H - 30 * 60_000), "-05:30");
    }
}
