//! The SQL idemguard runs, one statement per file under `queries/<dialect>/`, compiled in.
//!
//! Tables are written `{{logical_name}}` and replaced by the names in `[tables]`, so the console
//! can read a team's own order system; `database.queries_dir` may override any file by name.
//! Adding a statement = two files (postgres and mysql) and one line in [`BUILTIN`].

use std::collections::HashMap;
use std::path::Path;

use crate::config::{
    Config, Dialect, SourceProfile, SourceTable, StatusKind, TableNames, TimeStorage, ABSENT,
};

macro_rules! builtin {
    ($($name:literal),* $(,)?) => {
        /// (name, PostgreSQL text, MySQL text) of every built-in statement.
        pub const BUILTIN: &[(&str, &str, &str)] = &[
            $(($name,
               include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/queries/postgres/", $name, ".sql")),
               include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/queries/mysql/", $name, ".sql")))),*
        ];
    };
}

builtin![
    "schema",
    "migrate_lock",
    "migrate_unlock",
    "schema_version",
    "schema_version_record",
    "server_version",
    "connection_security",
    "schema_check",
    // every session's statement bound, set as it is opened (src/db/bounds.rs)
    "session_bound",
    // stream: the payment-event consumer's sinks and dedup state
    "stream_points_existing",
    "stream_points_insert",
    "stream_notification_existing",
    "stream_notification_insert",
    "stream_processed_existing",
    "stream_processed_insert",
    "stream_processed_find",
    // line 1: orders, stock, transitions (src/db/orders.rs, src/db/inventory.rs)
    "order_create_routine_drop",
    "order_create_routine",
    "order_create",
    "order_replay",
    "order_by_order_no",
    "order_by_req_id",
    "order_by_req_id_locked",
    "order_by_payment_event_id",
    "order_current",
    "order_transition",
    "order_lock_many",
    "order_by_payment_events",
    "order_transition_many",
    "inventory_stock",
    "inventory_set",
    // api: the idempotency record, payment callbacks and the outbox
    "api_idem_claim",
    "api_idem_get",
    "api_idem_reclaim",
    "api_idem_finalize",
    "api_idem_abandon",
    "api_idem_count_replay",
    "api_payment_insert",
    "api_payment_by_pay_no",
    "api_payment_lock_order",
    "api_payment_of_order",
    "api_outbox_insert",
    "api_outbox_claim",
    "api_outbox_mark_sent",
    // retention: batched deletes of what is past it (src/db/retention.rs)
    "retention_idempotency_record",
    "retention_outbox_sent",
    "retention_processed_event",
    // the console's read-through (src/console/read/records.rs)
    "console_trace_idempotency",
    "console_trace_order",
    "console_trace_stock",
    "console_trace_payment",
    "console_trace_outbox",
    "console_trace_processed",
    "console_trace_points",
    "console_trace_notification",
    "console_stuck",
    "console_lock_token_requests",
    // the source profile's per-dialect conversions, spliced into the console's statements
    "fragment_ms_epoch_s",
    "fragment_ms_datetime",
    "fragment_at_epoch_s",
    "fragment_at_datetime",
    "fragment_text",
    "fragment_ms_timestamptz",
    "fragment_at_timestamptz",
    // `profile suggest` and the checks of a profile against the live database (src/profile/)
    "profile_tables",
    "profile_columns",
    "profile_unique_columns",
    "profile_server_clock",
    "profile_status_values",
    "profile_newest_time",
    "profile_newest_number",
    "profile_has_value",
    // storm: what a run wrote, and the invariants checked after every scenario (src/storm/)
    "storm_orders_of_run",
    "storm_check_orders_per_request",
    "storm_check_stock_movements",
    "storm_stock_balance",
    "storm_chaos_sessions",
    "storm_check_payment_flows",
    "storm_check_paid_transitions",
    "storm_check_points",
    "storm_check_processing",
    "storm_check_notification",
    "storm_outbox_pending",
    "storm_outbox_events",
    "storm_metrics_truth",
    // metrics: the gauges `serve` refreshes (src/metrics/gauges.rs)
    "metrics_processing",
    "metrics_outbox_pending",
    // the console's actions and their audit (src/ops/)
    "console_finalize",
    "console_finalize_lock_wait",
    "console_finalize_lock_record",
    "console_finalize_foreign_get",
    "console_finalize_foreign_order",
    "console_finalize_foreign_succeeded",
    "console_finalize_foreign_failed",
    "console_audit_table",
    "doctor_columns",
    "doctor_unique_columns",
    "console_audit_attempt",
    "console_audit_outcome",
    "console_audit_list",
    "console_audit_redrives",
    "console_audit_live_redrives",
    // the post-incident report (src/console/report/)
    "report_leaks_order",
    "report_leaks_stock",
    "report_leaks_payment",
    "report_leaks_points",
    "report_leaks_notification",
    "report_orders",
    "report_contradictions",
];

/// The statements of one dialect, templated with the table names and the source profile.
#[derive(Debug, Clone)]
pub struct Queries {
    dialect: Dialect,
    by_name: HashMap<&'static str, String>,
    /// Statements the profile cannot run, with why: a table marked absent, a column mapped to "".
    missing: HashMap<&'static str, String>,
    /// The source profile describes a team's system, not idemguard's own.
    foreign: bool,
    /// What the statements were templated from, to template them again without the columns a
    /// live database turned out not to have ([`Queries::without_columns`]).
    tables: TableNames,
    source: SourceProfile,
    override_dir: Option<std::path::PathBuf>,
}

/// The configuration the statements are templated with.
pub struct Templating<'a> {
    pub tables: &'a TableNames,
    pub source: &'a SourceProfile,
}

impl Templating<'_> {
    pub fn of(config: &Config) -> Templating<'_> {
        Templating {
            tables: &config.tables,
            source: &config.source,
        }
    }
}

impl Queries {
    pub fn load(
        dialect: Dialect,
        with: &Templating<'_>,
        override_dir: Option<&Path>,
    ) -> anyhow::Result<Queries> {
        let fragments = fragments(dialect);
        let ctx = Ctx {
            dialect,
            with,
            fragments: &fragments,
            offset_ms: with
                .source
                .offset_ms()
                .map_err(|e| anyhow::anyhow!("source.time_zone: {e}"))?,
        };
        let mut by_name = HashMap::new();
        let mut missing = HashMap::new();
        for (name, pg, my) in BUILTIN {
            let (text, origin) = text_of(dialect, name, pg, my, override_dir)?;
            match template(&text, &ctx).map_err(|e| anyhow::anyhow!("{origin}: {e}"))? {
                Ok(sql) => {
                    by_name.insert(*name, sql);
                }
                Err(why) => {
                    missing.insert(*name, why);
                }
            }
        }
        Ok(Queries {
            dialect,
            by_name,
            missing,
            foreign: with.source.is_foreign(),
            tables: with.tables.clone(),
            source: with.source.clone(),
            override_dir: override_dir.map(Path::to_path_buf),
        })
    }

    /// The same statements templated as if the profile mapped none of `absent` (logical table,
    /// logical column): a column the live table does not have is shown as unknown (or its view
    /// says it cannot be shown) instead of failing every statement that names it.
    pub fn without_columns(&self, absent: &[(String, String)]) -> anyhow::Result<Queries> {
        let mut source = self.source.clone();
        for (logical, column) in absent {
            if let Some(t) = source.table_mut(logical) {
                t.columns.insert(column.clone(), String::new());
            }
        }
        let with = Templating {
            tables: &self.tables,
            source: &source,
        };
        let mut q = Queries::load(self.dialect, &with, self.override_dir.as_deref())?;
        q.foreign = self.foreign;
        Ok(q)
    }

    /// The table names the statements were templated with.
    pub fn tables(&self) -> &TableNames {
        &self.tables
    }

    /// The source profile the statements were templated with.
    pub fn source(&self) -> &SourceProfile {
        &self.source
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The text of a built-in statement. Names are compile-time constants, so an unknown one
    /// is a programming error; a statement the profile cannot run is asked for through
    /// [`Queries::missing`] first.
    pub fn get(&self, name: &str) -> &str {
        self.by_name
            .get(name)
            .unwrap_or_else(|| match self.missing.get(name) {
                Some(why) => {
                    panic!("statement `{name}` cannot run under this source profile: {why}")
                }
                None => panic!("no SQL statement named `{name}` in queries/"),
            })
    }

    /// The physical tables statement `name` names, in the order they first appear: what a
    /// statement that did not answer was waiting for ([`crate::db::bounds::no_answer`]).
    pub fn tables_in(&self, name: &str) -> Vec<String> {
        let Some(sql) = self.by_name.get(name) else {
            return Vec::new();
        };
        let mut names: Vec<String> = self
            .tables
            .pairs()
            .iter()
            .map(|(_, t)| t.to_string())
            .collect();
        names.extend(
            crate::config::CONSOLE_TABLES
                .iter()
                .map(|l| self.source.physical_name(&self.tables, l)),
        );
        let mut found: Vec<(usize, String)> = Vec::new();
        for t in names {
            if let Some(at) = word_at(sql, &t) {
                if !found.iter().any(|(_, f)| *f == t) {
                    found.push((at, t));
                }
            }
        }
        found.sort();
        found.into_iter().map(|(_, t)| t).collect()
    }

    /// The name of the statement whose text is `sql`, for saying which one did not answer.
    pub fn name_of(&self, sql: &str) -> Option<&'static str> {
        self.by_name
            .iter()
            .find(|(_, text)| text.as_str() == sql)
            .map(|(name, _)| *name)
    }

    /// True when the source profile maps a team's own idempotency record or orders.
    pub fn is_foreign(&self) -> bool {
        self.foreign
    }

    /// Why the profile cannot run statement `name` (None: it can).
    pub fn missing(&self, name: &str) -> Option<&str> {
        self.missing.get(name).map(String::as_str)
    }

    /// The console's statements (for `doctor`), runnable or not.
    pub fn console_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        BUILTIN.iter().map(|(n, _, _)| *n).filter(|n| {
            n.starts_with("console_trace")
                || *n == "console_stuck"
                || *n == "console_lock_token_requests"
                || n.starts_with("report_")
        })
    }
}

/// Where `word` first stands alone in `sql` (not inside a longer identifier), outside comments.
fn word_at(sql: &str, word: &str) -> Option<usize> {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut offset = 0;
    for line in sql.split_inclusive('\n') {
        let code = line.split("--").next().unwrap_or("");
        for (i, _) in code.match_indices(word) {
            let before = code[..i].chars().next_back();
            let after = code[i + word.len()..].chars().next();
            if !ident(before) && !ident(after) {
                return Some(offset + i);
            }
        }
        offset += line.len();
    }
    None
}

/// The built-in text of `name`, or the file of the same name under `queries_dir`.
fn text_of(
    dialect: Dialect,
    name: &str,
    pg: &str,
    my: &str,
    override_dir: Option<&Path>,
) -> anyhow::Result<(String, String)> {
    if let Some(dir) = override_dir {
        let path = dir.join(dialect.dir()).join(format!("{name}.sql"));
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            return Ok((text, path.display().to_string()));
        }
    }
    let text = match dialect {
        Dialect::Postgres => pg,
        Dialect::Mysql => my,
    };
    Ok((
        text.to_string(),
        format!("queries/{}/{name}.sql (built in)", dialect.dir()),
    ))
}

/// The `fragment_*` statements of a dialect without their comment lines: the dialect's way of
/// converting a time or a code, spliced into the statements by the profile.
fn fragments(dialect: Dialect) -> HashMap<&'static str, String> {
    BUILTIN
        .iter()
        .filter(|(n, _, _)| n.starts_with("fragment_"))
        .map(|(n, pg, my)| {
            let text = if dialect == Dialect::Postgres { pg } else { my };
            let code: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect();
            (*n, code.join(" ").trim().to_string())
        })
        .collect()
}

struct Ctx<'a> {
    /// How a profile's names are written ([`Dialect::identifier`]).
    dialect: Dialect,
    with: &'a Templating<'a>,
    fragments: &'a HashMap<&'static str, String>,
    offset_ms: i64,
}

/// Fill every `{{…}}`. Outer error: a placeholder that means nothing (a typo in a SQL file);
/// inner error: the profile lacks a table or column the statement needs.
///
/// Placeholders: `{{table}}`; `{{[alias.]table.column[?]}}` (with `?`: NULL when the profile
/// has no such column); `{{ms REF}}` a time column as epoch ms; `{{at REF PARAM}}` an epoch-ms
/// parameter as the column's own type; `{{code table.status NAME}}` the stored value of a
/// status; `{{name REF}}` the stored status shown as idemguard's name; `{{bump REF?}}` the
/// assignment `, column = column + 1`, or nothing when the profile has no such column.
fn template(text: &str, ctx: &Ctx<'_>) -> Result<Result<String, String>, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .map(|e| start + e)
            .ok_or_else(|| format!("unclosed placeholder {}", &rest[start..]))?;
        match expand(rest[start + 2..end].trim(), ctx)? {
            Ok(sql) => out.push_str(&sql),
            Err(why) => return Ok(Err(why)),
        }
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Ok(Ok(out))
}

type Expanded = Result<Result<String, String>, String>;

fn expand(inner: &str, ctx: &Ctx<'_>) -> Expanded {
    let words: Vec<&str> = inner.split_whitespace().collect();
    match words.as_slice() {
        [one] if !one.contains('.') => table_name(one, ctx),
        [one] => column(one, ctx).map(|c| c.map(|c| c.sql())),
        ["ms", r] => column(r, ctx).map(|c| c.map(|c| time_read(&c, ctx))),
        ["at", r, param] => column(r, ctx).map(|c| c.map(|c| time_param(&c, param, ctx))),
        ["code", r, status] => column(r, ctx).map(|c| c.and_then(|c| status_code(&c, status))),
        ["name", r] => column(r, ctx).map(|c| c.map(|c| status_name(&c, ctx))),
        ["bump", r] => column(r, ctx).map(|c| c.map(|c| bump(&c))),
        _ => Err(format!("unknown placeholder {{{{{inner}}}}}")),
    }
}

fn table_name(logical: &str, ctx: &Ctx<'_>) -> Expanded {
    let Some((_, physical)) = ctx
        .with
        .tables
        .pairs()
        .into_iter()
        .find(|(l, _)| *l == logical)
    else {
        return Err(format!(
            "unknown table placeholder {{{{{logical}}}}} (known: the keys of [tables])"
        ));
    };
    match ctx.with.source.table(logical).map(|t| t.table.as_str()) {
        Some(ABSENT) => Ok(Err(format!(
            "table {logical} is absent in the source profile"
        ))),
        // A team's name, as its schema spells it; `[tables]` names idemguard's own tables, which
        // its migrations created unquoted.
        Some(named) if !named.is_empty() => Ok(Ok(ctx.dialect.identifier(named))),
        _ => Ok(Ok(physical.to_string())),
    }
}

/// A resolved column reference.
struct Col<'a> {
    /// `alias.physical`, or `NULL` for an optional column the profile lacks.
    qualified: Option<String>,
    table: &'a SourceTable,
}

impl Col<'_> {
    fn sql(&self) -> String {
        self.qualified.clone().unwrap_or_else(|| "NULL".into())
    }
}

fn column<'a>(reference: &str, ctx: &Ctx<'a>) -> Result<Result<Col<'a>, String>, String> {
    let (reference, optional) = match reference.strip_suffix('?') {
        Some(r) => (r, true),
        None => (reference, false),
    };
    let parts: Vec<&str> = reference.split('.').collect();
    let (alias, logical, col) = match parts.as_slice() {
        [t, c] => (None, *t, *c),
        [a, t, c] => (Some(*a), *t, *c),
        _ => return Err(format!("`{reference}` is not [alias.]table.column")),
    };
    let table = ctx
        .with
        .source
        .table(logical)
        .ok_or_else(|| format!("`{logical}` is not a table of [source]"))?;
    if let Err(why) = table_name(logical, ctx)? {
        return Ok(Err(why));
    }
    let physical = table
        .columns
        .get(col)
        .ok_or_else(|| format!("`{col}` is not a column of [source.{logical}.columns]"))?;
    if physical.is_empty() && !optional {
        return Ok(Err(format!(
            "the source profile maps no column {logical}.{col}"
        )));
    }
    let qualified = (!physical.is_empty()).then(|| {
        let physical = ctx.dialect.identifier(physical);
        alias.map_or_else(|| physical.clone(), |a| format!("{a}.{physical}"))
    });
    Ok(Ok(Col { qualified, table }))
}

fn fragment(name: &str, ctx: &Ctx<'_>, col: &str, param: &str) -> String {
    ctx.fragments[name]
        .replace("{col}", col)
        .replace("{param}", param)
        .replace("{offset_ms}", &ctx.offset_ms.to_string())
}

fn time_read(c: &Col<'_>, ctx: &Ctx<'_>) -> String {
    let Some(col) = &c.qualified else {
        return "NULL".into();
    };
    match c.table.time {
        TimeStorage::EpochMs => col.clone(),
        TimeStorage::EpochS => fragment("fragment_ms_epoch_s", ctx, col, ""),
        TimeStorage::Datetime => fragment("fragment_ms_datetime", ctx, col, ""),
        TimeStorage::Timestamptz => fragment("fragment_ms_timestamptz", ctx, col, ""),
    }
}

fn time_param(c: &Col<'_>, param: &str, ctx: &Ctx<'_>) -> String {
    match c.table.time {
        TimeStorage::EpochMs => param.to_string(),
        TimeStorage::EpochS => fragment("fragment_at_epoch_s", ctx, "", param),
        TimeStorage::Datetime => fragment("fragment_at_datetime", ctx, "", param),
        TimeStorage::Timestamptz => fragment("fragment_at_timestamptz", ctx, "", param),
    }
}

/// `, col = col + 1` for a version column the profile maps; nothing when it maps none. The
/// column is written unqualified: it is an assignment target of an UPDATE.
fn bump(c: &Col<'_>) -> String {
    match &c.qualified {
        Some(col) => format!(", {col} = {col} + 1"),
        None => String::new(),
    }
}

fn literal(kind: StatusKind, value: &str) -> String {
    match kind {
        StatusKind::Integer => value.to_string(),
        StatusKind::Text => format!("'{value}'"),
    }
}

fn status_code(c: &Col<'_>, status: &str) -> Result<String, String> {
    match c.table.status.get(status).filter(|v| !v.is_empty()) {
        Some(v) => Ok(literal(c.table.status_kind, v)),
        None => Err(format!(
            "the source profile has no stored value for status {status}"
        )),
    }
}

/// The stored status as idemguard's name: the column itself when the names are stored as they
/// are, else a CASE over the profile's codes (an unnamed code is shown as it is stored).
fn status_name(c: &Col<'_>, ctx: &Ctx<'_>) -> String {
    let Some(col) = &c.qualified else {
        return "NULL".into();
    };
    let t = c.table;
    if t.status_kind == StatusKind::Text && t.status.iter().all(|(k, v)| k == v || v.is_empty()) {
        return col.clone();
    }
    let arms: String = t
        .status
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(name, v)| format!(" WHEN {} THEN '{name}'", literal(t.status_kind, v)))
        .collect();
    let other = fragment("fragment_text", ctx, col, "");
    format!("(CASE {col}{arms} ELSE {other} END)")
}

/// Split a schema file into statements: `;` at the end of a line ends one; comment-only
/// chunks are skipped.
pub fn statements(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            push_statement(&mut out, &current);
            current.clear();
        }
    }
    push_statement(&mut out, &current);
    out
}

fn push_statement(out: &mut Vec<String>, chunk: &str) {
    let has_code = chunk.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with("--")
    });
    if has_code {
        out.push(chunk.trim().trim_end_matches(';').to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(config: &Config, d: Dialect) -> Queries {
        Queries::load(d, &Templating::of(config), None).unwrap()
    }

    fn fill(config: &Config, text: &str) -> Result<Result<String, String>, String> {
        let fragments = fragments(Dialect::Mysql);
        let with = Templating::of(config);
        let ctx = Ctx {
            dialect: Dialect::Mysql,
            with: &with,
            fragments: &fragments,
            offset_ms: config.source.offset_ms().unwrap(),
        };
        template(text, &ctx)
    }

    #[test]
    fn every_builtin_templates_in_both_dialects() {
        let config = Config::defaults();
        for d in [Dialect::Postgres, Dialect::Mysql] {
            let q = load(&config, d);
            assert!(q
                .get("schema")
                .contains("CREATE TABLE IF NOT EXISTS idempotency_record"));
            assert!(q.missing.is_empty(), "{:?}", q.missing);
            assert!(!q.by_name.values().any(|s| s.contains("{{")));
        }
    }

    #[test]
    fn the_default_profile_leaves_idemguards_own_columns_as_they_are() {
        let config = Config::defaults();
        let sql = fill(&config, "SELECT {{name r.idempotency_record.status}}, {{ms r.idempotency_record.created_at}} FROM {{idempotency_record}} r WHERE {{idempotency_record.status}} = {{code idempotency_record.status PROCESSING}} AND created_at <= {{at idempotency_record.created_at ?}}");
        assert_eq!(
            sql.unwrap().unwrap(),
            "SELECT r.status, r.created_at FROM idempotency_record r WHERE status = 'PROCESSING' AND created_at <= ?"
        );
    }

    #[test]
    fn a_foreign_profile_maps_codes_times_and_absent_columns() {
        let mut config = Config::defaults();
        let t = &mut config.source.idempotency_record;
        t.table = "idem_req".into();
        t.time = TimeStorage::Datetime;
        t.status_kind = StatusKind::Integer;
        for (k, v) in [("PROCESSING", "0"), ("SUCCEEDED", "1"), ("FAILED", "2")] {
            t.status.insert(k.into(), v.into());
        }
        t.columns.insert("owner".into(), String::new());
        config.source.time_zone = "+08:00".into();
        let sql = fill(&config, "SELECT {{r.idempotency_record.owner?}}, {{name r.idempotency_record.status}}, {{ms r.idempotency_record.created_at}} FROM {{idempotency_record}} r WHERE status = {{code idempotency_record.status PROCESSING}}")
            .unwrap()
            .unwrap();
        assert!(sql.starts_with("SELECT NULL, (CASE r.status WHEN 2 THEN 'FAILED' WHEN 0 THEN 'PROCESSING' WHEN 1 THEN 'SUCCEEDED' ELSE CAST(r.status AS CHAR) END), "), "{sql}");
        assert!(sql.contains("- 28800000)"), "{sql}");
        assert!(sql.ends_with("FROM idem_req r WHERE status = 0"), "{sql}");
        let bumped = "UPDATE t SET a = 1{{bump idempotency_record.owner?}}";
        assert_eq!(
            fill(&config, bumped).unwrap().unwrap(),
            "UPDATE t SET a = 1"
        );
        t_version(&mut config, "version");
        assert_eq!(
            fill(
                &config,
                "UPDATE t SET a = 1{{bump idempotency_record.version?}}"
            )
            .unwrap()
            .unwrap(),
            "UPDATE t SET a = 1, version = version + 1"
        );
        let needs = fill(&config, "SELECT {{idempotency_record.owner}} FROM x").unwrap();
        assert!(needs.unwrap_err().contains("idempotency_record.owner"));
        config.source.stock_movement.table = ABSENT.into();
        assert!(fill(&config, "SELECT 1 FROM {{stock_movement}}")
            .unwrap()
            .unwrap_err()
            .contains("absent"));
    }

    fn t_version(config: &mut Config, column: &str) {
        let columns = &mut config.source.idempotency_record.columns;
        columns.insert("version".into(), column.into());
    }

    #[test]
    fn custom_table_names_and_unknown_placeholders() {
        let mut config = Config::defaults();
        config.tables.order_record = "shop_orders".into();
        assert_eq!(
            fill(&config, "SELECT * FROM {{order_record}}")
                .unwrap()
                .unwrap(),
            "SELECT * FROM shop_orders"
        );
        assert!(fill(&config, "SELECT * FROM {{orders}}")
            .unwrap_err()
            .contains("{{orders}}"));
        assert!(fill(&config, "SELECT {{order_record.colour}}")
            .unwrap_err()
            .contains("colour"));
    }

    #[test]
    fn schema_splits_into_statements() {
        let s = statements(
            "-- c\nCREATE TABLE a (x INT);\n-- only a comment\nCREATE INDEX i ON a (x);\n",
        );
        assert_eq!(
            s,
            vec![
                "-- c\nCREATE TABLE a (x INT)",
                "-- only a comment\nCREATE INDEX i ON a (x)"
            ]
        );
    }

    #[test]
    fn override_dir_replaces_a_file_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("postgres")).unwrap();
        std::fs::write(
            dir.path().join("postgres/server_version.sql"),
            "SELECT 'custom'",
        )
        .unwrap();
        let config = Config::defaults();
        let q = Queries::load(
            Dialect::Postgres,
            &Templating::of(&config),
            Some(dir.path()),
        )
        .unwrap();
        assert_eq!(q.get("server_version"), "SELECT 'custom'");
    }
}
