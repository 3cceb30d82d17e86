//! Sensitive fields masked in every face (`[mask]`): operators of a payment system see what they
//! need to follow an order — its IDs, statuses, times, which layer stopped what — not the
//! customer's id, the amount or the response the API stored, where the configuration says so
//! (by default in an environment with `environment.production = true`: `user_id` and
//! `response_body`).
//!
//! A value is masked where a trace is *built* ([`crate::console::read::timeline`]), before it
//! reaches any face: the TUI, the CLI tables and their JSON, and the reports all get the same
//! finished timeline, and the `/` filter, which matches what is drawn, can never find a masked
//! value. The readers below keep the clear value only to link the trace.
//!
//! - [`Mask::column`] / [`Mask::cell`] / [`Mask::row`]: database columns, by logical name
//!   (`user_id` in every table) or as `table.column`;
//! - [`Mask::kafka_body`] / [`Mask::log_line`]: JSON pointers into a payment message's body or a
//!   log line (what a face shows of them: a body's payNo, a line's message, service and level);
//! - [`Mask::json_text`]: a JSON text such as an audited record's before/after state, every
//!   object member named like a masked column, at any depth.

use std::collections::BTreeSet;
use std::fmt::Display;

use serde_json::Value;

use crate::config::Config;

/// What a masked value is shown as, in every face (a string in JSON too).
pub const MASKED: &str = "[masked]";

/// Which fields are masked: built once from the configuration, carried to where a trace is
/// built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mask {
    /// `column` (every table) or `table.column`.
    columns: BTreeSet<String>,
    kafka_json: Vec<String>,
    log_json: Vec<String>,
    /// The pointers of a log line's message, service and level fields (`/message`…).
    log_fields: LogFields,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LogFields {
    message: String,
    service: String,
    level: String,
}

/// The log-line fields a face shows, as [`Mask::log_line_fields`] says which are masked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskedLogFields {
    pub message: bool,
    pub service: bool,
    pub level: bool,
}

impl Mask {
    /// Nothing masked.
    pub fn none() -> Mask {
        Mask::default()
    }

    /// `[mask]`: its columns, plus `production_columns` in a production environment.
    pub fn of(config: &Config) -> Mask {
        let m = &config.mask;
        let mut columns: BTreeSet<String> = m.columns.iter().cloned().collect();
        if config.environment.production {
            columns.extend(m.production_columns.iter().cloned());
        }
        let pointer = |field: &str| format!("/{}", field.replace('~', "~0").replace('/', "~1"));
        Mask {
            columns,
            kafka_json: m.kafka_json.clone(),
            log_json: m.log_json.clone(),
            log_fields: LogFields {
                message: pointer(&config.logs.message_field),
                service: pointer(&config.logs.service_field),
                level: pointer(&config.logs.level_field),
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty() && self.kafka_json.is_empty() && self.log_json.is_empty()
    }

    /// True when `column` of the logical `table` is masked.
    pub fn column(&self, table: &str, column: &str) -> bool {
        self.columns
            .iter()
            .any(|c| c == column || c.split_once('.') == Some((table, column)))
    }

    /// `shown`, or [`MASKED`] when `table.column` is masked.
    pub fn cell(&self, table: &str, column: &str, shown: impl Display) -> String {
        if self.column(table, column) {
            MASKED.to_string()
        } else {
            shown.to_string()
        }
    }

    /// A row as JSON (`serde_json::to_value` of it) with its masked columns' values replaced by
    /// [`MASKED`].
    pub fn row(&self, table: &str, mut row: Value) -> Value {
        if self.columns.is_empty() {
            return row;
        }
        if let Value::Object(fields) = &mut row {
            for (name, v) in fields.iter_mut() {
                if !v.is_null() && self.column(table, name) {
                    *v = Value::String(MASKED.into());
                }
            }
        }
        row
    }

    /// A payment message's body with its masked pointers replaced.
    pub fn kafka_body(&self, body: &mut Value) {
        mask_pointers(body, &self.kafka_json);
    }

    /// True when `pointer` of a payment message's body is masked (`/pay_no`).
    pub fn kafka_pointer(&self, pointer: &str) -> bool {
        self.kafka_json.iter().any(|p| p == pointer)
    }

    /// A log line (one JSON object) with its masked pointers replaced.
    pub fn log_line(&self, line: &mut Value) {
        mask_pointers(line, &self.log_json);
    }

    /// Which of the fields a face shows of a log line are masked.
    pub fn log_line_fields(&self) -> MaskedLogFields {
        let masked = |p: &str| self.log_json.iter().any(|m| m == p);
        MaskedLogFields {
            message: masked(&self.log_fields.message),
            service: masked(&self.log_fields.service),
            level: masked(&self.log_fields.level),
        }
    }

    /// A JSON text (an audited record's before/after state) with every object member named like
    /// a masked column replaced, at any depth; a text that is not JSON is returned as it is.
    pub fn json_text(&self, text: &str) -> String {
        let names: Vec<&str> = self
            .columns
            .iter()
            .map(|c| c.rsplit('.').next().unwrap_or(c))
            .collect();
        if names.is_empty() {
            return text.to_string();
        }
        let Ok(mut v) = serde_json::from_str::<Value>(text) else {
            return text.to_string();
        };
        mask_members(&mut v, &names);
        v.to_string()
    }
}

fn mask_pointers(v: &mut Value, pointers: &[String]) {
    for p in pointers {
        if let Some(found) = v.pointer_mut(p) {
            if !found.is_null() {
                *found = Value::String(MASKED.into());
            }
        }
    }
}

fn mask_members(v: &mut Value, names: &[&str]) {
    match v {
        Value::Object(fields) => {
            for (k, child) in fields.iter_mut() {
                if names.contains(&k.as_str()) && !child.is_null() {
                    *child = Value::String(MASKED.into());
                } else {
                    mask_members(child, names);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| mask_members(i, names)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSource;
    use serde_json::json;

    fn config(env: &[(&str, &str)]) -> Config {
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(&ConfigSource { file: None, env }).unwrap()
    }

    #[test]
    fn production_masks_the_user_id_and_the_response_by_default() {
        assert!(Mask::of(&config(&[])).is_empty());
        let m = Mask::of(&config(&[
            ("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true"),
            (
                "IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED",
                "database,redis,kafka",
            ),
        ]));
        assert!(m.column("order_record", "user_id") && m.column("points_ledger", "user_id"));
        assert!(m.column("idempotency_record", "response_body"));
        assert!(!m.column("order_record", "amount"));
        let m = Mask::of(&config(&[
            ("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true"),
            (
                "IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED",
                "database,redis,kafka",
            ),
            ("IDEMGUARD_MASK__PRODUCTION_COLUMNS", ""),
            ("IDEMGUARD_MASK__COLUMNS", "notification.body,amount"),
        ]));
        assert!(!m.column("order_record", "user_id"));
        assert!(m.column("notification", "body") && !m.column("outbox", "body"));
        assert_eq!(m.cell("payment_flow", "amount", 1999), MASKED);
        assert_eq!(m.cell("payment_flow", "status", "PAID"), "PAID");
    }

    #[test]
    fn rows_bodies_lines_and_json_texts_are_masked_where_named() {
        let m = Mask::of(&config(&[
            ("IDEMGUARD_MASK__COLUMNS", "user_id,response_body"),
            ("IDEMGUARD_MASK__KAFKA_JSON", "/pay_no,/customer/phone"),
            ("IDEMGUARD_MASK__LOG_JSON", "/message"),
        ]));
        let row = m.row(
            "order_record",
            json!({"user_id": 42, "amount": 1, "fence": null}),
        );
        assert_eq!(row, json!({"user_id": MASKED, "amount": 1, "fence": null}));
        let mut body = json!({"pay_no": "P1", "customer": {"phone": "555"}, "order_no": "O"});
        m.kafka_body(&mut body);
        assert_eq!(
            body,
            json!({"pay_no": MASKED, "customer": {"phone": MASKED}, "order_no": "O"})
        );
        assert!(m.kafka_pointer("/pay_no") && !m.kafka_pointer("/order_no"));
        let f = m.log_line_fields();
        assert!(f.message && !f.service && !f.level);
        let audit =
            r#"{"request_id":"R","response_body":"{\"userId\":42}","nested":[{"user_id":7}]}"#;
        let masked: Value = serde_json::from_str(&m.json_text(audit)).unwrap();
        assert_eq!(
            masked,
            json!({"request_id": "R", "response_body": MASKED, "nested": [{"user_id": MASKED}]})
        );
        assert_eq!(m.json_text("not json"), "not json");
    }

    #[test]
    fn an_unknown_or_linking_column_is_refused_naming_the_key() {
        let load = |v: &str| {
            Config::load(&ConfigSource {
                file: None,
                env: vec![("IDEMGUARD_MASK__COLUMNS".into(), v.into())],
            })
            .unwrap_err()
            .to_string()
        };
        let e = load("user_idd");
        assert!(
            e.contains("mask.columns") && e.contains("`user_idd` is not a column"),
            "{e}"
        );
        let e = load("order_no");
        assert!(e.contains("cannot be masked"), "{e}");
        let e = load("orders.user_id");
        assert!(e.contains("no table `orders`"), "{e}");
        let e = Config::load(&ConfigSource {
            file: None,
            env: vec![("IDEMGUARD_MASK__LOG_JSON".into(), "message".into())],
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("mask.log_json") && e.contains("not a JSON pointer"),
            "{e}"
        );
    }
}
