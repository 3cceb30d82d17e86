//! The source profile (`[source]`): which tables, columns, status values and time storage the
//! console's queries read. It is what lets one set of SQL files serve idemguard's own order
//! system and a team's that follows the article's shapes under other names, so it is checked
//! here as one piece — identifiers that go into SQL, status values of the declared kind.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Config, Dialect, TableNames};

/// The source profile (`[source]`): how the console's queries map onto an order system —
/// idemguard's own by default, or a team's that follows the article's shapes. Applied to the
/// SQL when it is loaded (src/db/queries.rs); the SQL itself stays in `queries/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceProfile {
    /// "+HH:MM": the offset of `datetime` columns' wall-clock values.
    pub time_zone: String,
    pub idempotency_record: SourceTable,
    pub order_record: SourceTable,
    pub inventory: SourceTable,
    pub stock_movement: SourceTable,
    pub payment_flow: SourceTable,
    pub points_ledger: SourceTable,
    pub notification: SourceTable,
    pub outbox: SourceTable,
    pub processed_event: SourceTable,
}

/// How time columns are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeStorage {
    #[default]
    EpochMs,
    EpochS,
    /// DATETIME / TIMESTAMP (PostgreSQL `timestamp`), wall clock in `source.time_zone`.
    Datetime,
    /// An instant, whatever the session's zone: PostgreSQL `timestamptz`, MySQL `TIMESTAMP`
    /// (read through UNIX_TIMESTAMP); `source.time_zone` does not apply.
    Timestamptz,
}

/// Whether a status column holds text or integer codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusKind {
    #[default]
    Text,
    Integer,
}

/// One logical table of the profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceTable {
    /// "" = the name in `[tables]`; [`ABSENT`] = the system has no such table.
    pub table: String,
    // Written only where set: a table without time or status columns has no such keys in
    // config/default.toml, and a config written back (`storm`'s child processes) must load.
    #[serde(default, skip_serializing_if = "is_default")]
    pub time: TimeStorage,
    #[serde(default, skip_serializing_if = "is_default")]
    pub status_kind: StatusKind,
    /// idemguard's status name → the value the table stores for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub status: BTreeMap<String, String>,
    /// idemguard's logical column → the physical column; "" = no such column.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub columns: BTreeMap<String, String>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The `table` value of a table the system does not have.
pub const ABSENT: &str = "absent";

/// The logical tables of a source profile the console reads: a team's system maps each one to
/// its own table, or marks it absent.
pub const CONSOLE_TABLES: [&str; 7] = [
    "idempotency_record",
    "order_record",
    "inventory",
    "stock_movement",
    "payment_flow",
    "points_ledger",
    "notification",
];

/// The logical tables only idemguard's own services have (its outbox and its consumer's dedup
/// state): profiled like the others, never checked on a team's system.
pub const OWN_TABLES: [&str; 2] = ["outbox", "processed_event"];

impl SourceProfile {
    /// The profile's section of a logical table (None: not a profiled table).
    pub fn table(&self, logical: &str) -> Option<&SourceTable> {
        Some(match logical {
            "idempotency_record" => &self.idempotency_record,
            "order_record" => &self.order_record,
            "inventory" => &self.inventory,
            "stock_movement" => &self.stock_movement,
            "payment_flow" => &self.payment_flow,
            "points_ledger" => &self.points_ledger,
            "notification" => &self.notification,
            "outbox" => &self.outbox,
            "processed_event" => &self.processed_event,
            _ => return None,
        })
    }

    /// [`SourceProfile::table`], to change.
    pub fn table_mut(&mut self, logical: &str) -> Option<&mut SourceTable> {
        Some(match logical {
            "idempotency_record" => &mut self.idempotency_record,
            "order_record" => &mut self.order_record,
            "inventory" => &mut self.inventory,
            "stock_movement" => &mut self.stock_movement,
            "payment_flow" => &mut self.payment_flow,
            "points_ledger" => &mut self.points_ledger,
            "notification" => &mut self.notification,
            "outbox" => &mut self.outbox,
            "processed_event" => &mut self.processed_event,
            _ => return None,
        })
    }

    /// The physical name of a logical table: the profile's, else `[tables]`'s.
    pub fn physical_name(&self, tables: &TableNames, logical: &str) -> String {
        match self.table(logical) {
            Some(t) if !t.table.is_empty() => t.table.clone(),
            _ => tables
                .pairs()
                .into_iter()
                .find(|(l, _)| *l == logical)
                .map_or_else(|| logical.to_string(), |(_, p)| p.to_string()),
        }
    }

    /// The offset of `time_zone` in milliseconds ("+08:00" → 28 800 000).
    pub fn offset_ms(&self) -> Result<i64, String> {
        parse_offset(&self.time_zone)
    }

    /// True when the idempotency record or the orders are not idemguard's own (a team's system):
    /// actions then take the paths that need no owner, lease or fence of idemguard's.
    pub fn is_foreign(&self) -> bool {
        let own = Config::defaults().source;
        self.idempotency_record != own.idempotency_record || self.order_record != own.order_record
    }

    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        self.offset_ms()
            .map_err(|m| ("source.time_zone".to_string(), m))?;
        for logical in CONSOLE_TABLES.iter().chain(&OWN_TABLES) {
            let t = self.table(logical).expect("a profiled table");
            let key = |k: &str| format!("source.{logical}.{k}");
            if t.table != ABSENT && !t.table.is_empty() && !is_identifier(&t.table) {
                return Err((
                    key("table"),
                    "must be a plain SQL identifier, \"\" or \"absent\"".into(),
                ));
            }
            for (c, v) in &t.columns {
                if !v.is_empty() && !is_identifier(v) {
                    return Err((
                        key(&format!("columns.{c}")),
                        "must be a plain SQL identifier or \"\"".into(),
                    ));
                }
            }
            for (name, v) in t.status.iter().filter(|(_, v)| !v.is_empty()) {
                let ok = match t.status_kind {
                    StatusKind::Integer => v.parse::<i64>().is_ok(),
                    StatusKind::Text => !v.is_empty() && !v.contains(['\'', '\\']),
                };
                if !ok {
                    return Err((
                        key(&format!("status.{name}")),
                        format!("`{v}` is not a valid {:?} status value", t.status_kind),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn is_identifier(s: &str) -> bool {
    SourceProfile::is_plain_name(s)
}

impl SourceProfile {
    /// Letters, digits and `_`, not starting with a digit, at most 64 long: the names a profile
    /// may hold for tables and columns (written into SQL through [`Dialect::identifier`]).
    pub fn is_plain_name(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 64
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    }
}

impl Dialect {
    /// A profile's table or column name as SQL text that names exactly it: bare when the server
    /// reads it back unchanged (lowercase, no reserved word), else quoted. Unquoted, PostgreSQL
    /// folds Prisma's `Order` to `order` and both servers refuse `order` as a name; the names
    /// are written as `information_schema` spells them, so a quoted one matches.
    pub fn identifier(self, name: &str) -> String {
        let bare = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && !name.is_empty()
            && !RESERVED.contains(&name);
        let quote = match self {
            Dialect::Postgres => '"',
            Dialect::Mysql => '`',
        };
        if bare {
            name.to_string()
        } else {
            let doubled = name.replace(quote, &format!("{quote}{quote}"));
            format!("{quote}{doubled}{quote}")
        }
    }
}

/// Words either server refuses as a bare table or column name (PostgreSQL's reserved key words,
/// MySQL's and MariaDB's reserved words): such a name is quoted, in both dialects alike.
#[rustfmt::skip]
const RESERVED: &[&str] = &[
    "accessible", "add", "all", "alter", "analyse", "analyze", "and", "any", "array", "as",
    "asc", "asensitive", "asymmetric", "authorization", "before", "between", "bigint", "binary",
    "blob", "both", "by", "call", "cascade", "case", "cast", "change", "char", "character",
    "check", "collate", "collation", "column", "concurrently", "condition", "constraint",
    "continue", "convert", "create", "cross", "cube", "cume_dist", "current_catalog",
    "current_date", "current_role", "current_schema", "current_time", "current_timestamp",
    "current_user", "cursor", "database", "databases", "day_hour", "day_microsecond",
    "day_minute", "day_second", "dec", "decimal", "declare", "default", "deferrable", "delayed",
    "delete", "dense_rank", "desc", "describe", "deterministic", "distinct", "distinctrow",
    "div", "do", "double", "drop", "dual", "each", "else", "elseif", "empty", "enclosed", "end",
    "escaped", "except", "exists", "exit", "explain", "false", "fetch", "first_value", "float",
    "float4", "float8", "for", "force", "foreign", "freeze", "from", "full", "fulltext",
    "function", "generated", "get", "grant", "group", "grouping", "groups", "having",
    "high_priority", "hour_microsecond", "hour_minute", "hour_second", "if", "ignore", "ilike",
    "in", "index", "infile", "initially", "inner", "inout", "insensitive", "insert", "int",
    "int1", "int2", "int3", "int4", "int8", "integer", "intersect", "interval", "into", "is",
    "isnull", "iterate", "join", "json_table", "key", "keys", "kill", "lag", "last_value",
    "lateral", "lead", "leading", "leave", "left", "like", "limit", "linear", "lines", "load",
    "localtime", "localtimestamp", "lock", "long", "longblob", "longtext", "loop",
    "low_priority", "match", "maxvalue", "mediumblob", "mediumint", "mediumtext", "middleint",
    "minute_microsecond", "minute_second", "mod", "modifies", "natural", "no_write_to_binlog",
    "not", "notnull", "nth_value", "ntile", "null", "numeric", "of", "offset", "on", "only",
    "optimize", "option", "optionally", "or", "order", "out", "outer", "outfile", "over",
    "overlaps", "partition", "percent_rank", "placing", "precision", "primary", "procedure",
    "purge", "range", "rank", "read", "read_write", "reads", "real", "recursive", "references",
    "regexp", "release", "rename", "repeat", "replace", "require", "resignal", "restrict",
    "return", "returning", "revoke", "right", "rlike", "row", "row_number", "rows", "schema",
    "schemas", "second_microsecond", "select", "sensitive", "separator", "session_user", "set",
    "show", "signal", "similar", "smallint", "some", "spatial", "specific", "sql",
    "sql_big_result", "sql_calc_found_rows", "sql_small_result", "sqlexception", "sqlstate",
    "sqlwarning", "ssl", "starting", "stored", "straight_join", "symmetric", "system",
    "system_user", "table", "tablesample", "terminated", "then", "tinyblob", "tinyint",
    "tinytext", "to", "trailing", "trigger", "true", "undo", "union", "unique", "unlock",
    "unsigned", "update", "usage", "use", "user", "using", "utc_date", "utc_time",
    "utc_timestamp", "values", "varbinary", "varchar", "varcharacter", "variadic", "varying",
    "verbose", "virtual", "when", "where", "while", "window", "with", "write", "xor",
    "year_month", "zerofill",
];

fn parse_offset(tz: &str) -> Result<i64, String> {
    let bad = || format!("`{tz}` is not an offset like +08:00 or -05:00");
    let (sign, rest) = match tz.as_bytes().first() {
        Some(b'+') => (1, &tz[1..]),
        Some(b'-') => (-1, &tz[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let (h, m): (i64, i64) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 14 || m > 59 || rest.len() != 5 {
        return Err(bad());
    }
    Ok(sign * (h * 3_600_000 + m * 60_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_where_the_server_would_read_them_otherwise() {
        for (name, pg, my) in [
            ("order_record", "order_record", "order_record"),
            ("Order", "\"Order\"", "`Order`"),
            ("orderNo", "\"orderNo\"", "`orderNo`"),
            ("order", "\"order\"", "`order`"),
            ("user", "\"user\"", "`user`"),
            ("a\"b`c", "\"a\"\"b`c\"", "`a\"b``c`"),
        ] {
            assert_eq!(Dialect::Postgres.identifier(name), pg);
            assert_eq!(Dialect::Mysql.identifier(name), my);
        }
    }
}
