//! The SQL idemguard runs, one statement per file under `queries/<dialect>/`, compiled in.
//!
//! Tables are written `{{logical_name}}` and replaced by the names in `[tables]`, so the console
//! can read a team's own order system; `database.queries_dir` may override any file by name.
//! Adding a statement = two files (postgres and mysql) and one line in [`BUILTIN`].

use std::collections::HashMap;
use std::path::Path;

use crate::config::{Dialect, TableNames};

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
    "schema_check",
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
    // the console's actions and their audit (src/ops/)
    "console_finalize",
    "console_finalize_lock_wait",
    "console_finalize_lock_record",
    "console_audit_attempt",
    "console_audit_outcome",
    "console_audit_list",
    // the post-incident report (src/console/cli/report.rs)
    "report_leaks",
    "report_orders",
    "report_contradictions",
];

/// The statements of one dialect, templated with the configured table names.
#[derive(Debug, Clone)]
pub struct Queries {
    dialect: Dialect,
    by_name: HashMap<&'static str, String>,
}

impl Queries {
    pub fn load(
        dialect: Dialect,
        tables: &TableNames,
        override_dir: Option<&Path>,
    ) -> anyhow::Result<Queries> {
        let mut by_name = HashMap::new();
        for (name, pg, my) in BUILTIN {
            let mut text = match dialect {
                Dialect::Postgres => pg.to_string(),
                Dialect::Mysql => my.to_string(),
            };
            let mut origin = format!("queries/{}/{name}.sql (built in)", dialect.dir());
            if let Some(dir) = override_dir {
                let path = dir.join(dialect.dir()).join(format!("{name}.sql"));
                if path.exists() {
                    text = std::fs::read_to_string(&path)
                        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                    origin = path.display().to_string();
                }
            }
            by_name.insert(
                *name,
                template(&text, tables).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?,
            );
        }
        Ok(Queries { dialect, by_name })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The text of a built-in statement. Names are compile-time constants, so an unknown one
    /// is a programming error.
    pub fn get(&self, name: &str) -> &str {
        self.by_name
            .get(name)
            .unwrap_or_else(|| panic!("no SQL statement named `{name}` in queries/"))
    }
}

/// Replace `{{logical}}` with the physical table name; any other `{{…}}` is an error.
fn template(text: &str, tables: &TableNames) -> Result<String, String> {
    let mut out = text.to_string();
    for (logical, physical) in tables.pairs() {
        out = out.replace(&format!("{{{{{logical}}}}}"), physical);
    }
    if let Some(start) = out.find("{{") {
        let end = out[start..].find("}}").map_or(out.len(), |e| start + e + 2);
        return Err(format!(
            "unknown table placeholder {} (known: the keys of [tables])",
            &out[start..end]
        ));
    }
    Ok(out)
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
    use crate::config::Config;

    #[test]
    fn every_builtin_templates_in_both_dialects() {
        let tables = Config::defaults().tables;
        for d in [Dialect::Postgres, Dialect::Mysql] {
            let q = Queries::load(d, &tables, None).unwrap();
            assert!(q
                .get("schema")
                .contains("CREATE TABLE IF NOT EXISTS idempotency_record"));
            assert!(!q.get("schema").contains("{{"));
        }
    }

    #[test]
    fn custom_table_names_and_unknown_placeholders() {
        let mut tables = Config::defaults().tables;
        tables.order_record = "shop_orders".into();
        assert_eq!(
            template("SELECT * FROM {{order_record}}", &tables).unwrap(),
            "SELECT * FROM shop_orders"
        );
        assert!(template("SELECT * FROM {{orders}}", &tables)
            .unwrap_err()
            .contains("{{orders}}"));
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
        let q = Queries::load(
            Dialect::Postgres,
            &Config::defaults().tables,
            Some(dir.path()),
        )
        .unwrap();
        assert_eq!(q.get("server_version"), "SELECT 'custom'");
    }
}
