//! The layered loader: the documented defaults (`config/default.toml`, compiled in), then an
//! optional file, then `IDEMGUARD_<SECTION>__<KEY>` environment variables.
//!
//! The defaults file is also the list of valid keys: a key it does not contain is refused with
//! the nearest valid name, so a typo can never silently fall back to a default. Every value
//! remembers where it came from, so an error names the file or the environment variable and the
//! key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{redact_urls_in, Config, ConfigError};

/// The documented defaults, compiled in so the binary works from any directory.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "IDEMGUARD_CONFIG";
/// Prefix of per-key overrides: `IDEMGUARD_DATABASE__URL`.
pub const ENV_PREFIX: &str = "IDEMGUARD_";

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// `--config FILE`; falls back to `$IDEMGUARD_CONFIG`.
    pub file: Option<PathBuf>,
    /// Environment variables to apply (normally `std::env::vars()`).
    pub env: Vec<(String, String)>,
}

impl ConfigSource {
    /// The process's environment, with the file from `--config` or `$IDEMGUARD_CONFIG`.
    pub fn from_process(file: Option<PathBuf>) -> Self {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let file = file.or_else(|| {
            env.iter()
                .find(|(k, _)| k == CONFIG_ENV)
                .filter(|(_, v)| !v.is_empty())
                .map(|(_, v)| PathBuf::from(v))
        });
        ConfigSource { file, env }
    }
}

impl Config {
    /// Load the layered configuration and validate it.
    pub fn load(source: &ConfigSource) -> Result<Config, ConfigError> {
        let mut origins: BTreeMap<String, String> = BTreeMap::new();
        let defaults: toml::Table =
            DEFAULT_TOML
                .parse()
                .map_err(|e: toml::de::Error| ConfigError {
                    origin: "built-in defaults".into(),
                    key: String::new(),
                    message: e.to_string(),
                })?;
        let mut merged = defaults.clone();

        if let Some(path) = &source.file {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                origin: origin.clone(),
                key: String::new(),
                message: format!("cannot read the file: {e}"),
            })?;
            let file: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
                origin: origin.clone(),
                key: String::new(),
                message: format!("not valid TOML: {}", e.message()),
            })?;
            overlay(&defaults, &mut merged, &file, "", &origin, &mut origins)?;
        }

        for (name, value) in &source.env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            if !rest.contains("__") {
                continue; // IDEMGUARD_CONFIG and other non-override variables
            }
            let key = rest
                .split("__")
                .map(|s| s.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(".");
            let origin = format!("environment variable {name}");
            let existing = lookup(&defaults, &key).ok_or_else(|| ConfigError {
                origin: origin.clone(),
                key: key.clone(),
                message: unknown_key_message(&defaults, &key),
            })?;
            let parsed = parse_env_value(value, existing);
            set(&mut merged, &key, parsed);
            origins.insert(key, origin);
        }

        let config: Config =
            serde_path_to_error::deserialize(toml::Value::Table(merged)).map_err(|e| {
                let key = e.path().to_string();
                let origin = origin_of(&origins, &key);
                // A type error quotes the value, which may be a URL with its password.
                ConfigError {
                    origin,
                    key,
                    message: redact_urls_in(e.into_inner().message()),
                }
            })?;
        config.validate(&|key| origin_of(&origins, key))?;
        Ok(config)
    }

    /// Defaults only (tests, and tools that need no file).
    pub fn defaults() -> Config {
        Config::load(&ConfigSource::default()).expect("the built-in defaults are valid")
    }
}

/// Tables whose keys are not idemguard's (librdkafka's properties): not checked against the
/// defaults.
const FREE_TABLES: [&str; 1] = ["kafka.client"];

/// Lays `file` over `merged`, refusing keys the defaults do not have.
fn overlay(
    defaults: &toml::Table,
    merged: &mut toml::Table,
    file: &toml::Table,
    prefix: &str,
    origin: &str,
    origins: &mut BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (k, v) in file {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let Some(default) = lookup(defaults, &key) else {
            return Err(ConfigError {
                origin: origin.into(),
                key: key.clone(),
                message: unknown_key_message(defaults, &key),
            });
        };
        match (default, v) {
            // A table of free names (`[kafka.client]`): taken whole, checked when validated.
            (toml::Value::Table(_), toml::Value::Table(_))
                if FREE_TABLES.contains(&key.as_str()) =>
            {
                set(merged, &key, v.clone());
                origins.insert(key, origin.into());
            }
            (toml::Value::Table(_), toml::Value::Table(sub)) => {
                overlay(defaults, merged, sub, &key, origin, origins)?
            }
            (toml::Value::Table(_), _) => {
                return Err(ConfigError {
                    origin: origin.into(),
                    key,
                    message: "is a section: write it as [section]".into(),
                })
            }
            _ => {
                set(merged, &key, v.clone());
                origins.insert(key, origin.into());
            }
        }
    }
    Ok(())
}

fn lookup<'a>(table: &'a toml::Table, dotted: &str) -> Option<&'a toml::Value> {
    let mut parts = dotted.split('.');
    let mut current = table.get(parts.next()?)?;
    for p in parts {
        current = current.as_table()?.get(p)?;
    }
    Some(current)
}

fn set(table: &mut toml::Table, dotted: &str, value: toml::Value) {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut current = table;
    for p in parts {
        current = current
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .as_table_mut()
            .expect("sections are tables");
    }
    current.insert(last.to_string(), value);
}

/// An environment value takes the type of the default it replaces: strings stay strings
/// (a URL is never parsed as TOML), numbers and booleans are parsed, lists are comma-separated
/// or a TOML array.
fn parse_env_value(raw: &str, default: &toml::Value) -> toml::Value {
    let as_toml = || {
        format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
    };
    match default {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Array(_) => {
            if raw.trim_start().starts_with('[') {
                if let Some(v) = as_toml() {
                    return v;
                }
            }
            toml::Value::Array(
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| toml::Value::String(s.into()))
                    .collect(),
            )
        }
        _ => as_toml().unwrap_or_else(|| toml::Value::String(raw.to_string())),
    }
}

fn origin_of(origins: &BTreeMap<String, String>, key: &str) -> String {
    // The most specific key that was set, else the section, else the defaults.
    let mut k = key.to_string();
    loop {
        if let Some(o) = origins.get(&k) {
            return o.clone();
        }
        match k.rfind('.') {
            Some(i) => k.truncate(i),
            None => return "built-in defaults".into(),
        }
    }
}

fn unknown_key_message(defaults: &toml::Table, key: &str) -> String {
    let mut all = Vec::new();
    collect_keys(defaults, "", &mut all);
    let best = all.iter().map(|k| (strsim::levenshtein(k, key), k)).min();
    match best {
        Some((d, k)) if d <= 3 => format!("unknown setting (did you mean `{k}`?)"),
        _ => "unknown setting (config/default.toml lists every valid key)".into(),
    }
}

fn collect_keys(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let toml::Value::Table(t) = v {
            collect_keys(t, &key, out);
        } else {
            out.push(key);
        }
    }
}

/// The configuration the defaults, `file_text` as a file and `env` give (tests of every file).
#[cfg(test)]
pub(super) fn load_with(
    file_text: Option<&str>,
    env: &[(&str, &str)],
) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let file = file_text.map(|t| {
        let p = dir.path().join("test.toml");
        std::fs::write(&p, t).unwrap();
        p
    });
    let env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load(&ConfigSource { file, env })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Dialect;
    use super::*;

    #[test]
    fn defaults_load_and_validate() {
        let c = Config::defaults();
        assert_eq!(c.lock.ttl, Duration::from_secs(30));
        assert_eq!(c.idempotency.retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(c.dialect(), Dialect::Postgres);
    }

    #[test]
    fn a_config_written_back_loads_again() {
        // `storm` hands its child processes the config as a file it serializes: every key it
        // writes must be one the loader accepts, for idemguard's own profile and a team's.
        for file in [
            None,
            Some(include_str!("../../config/profiles/article-mysql.toml")),
        ] {
            // The profile is a production one; its connections here are the defaults' plaintext.
            let allowed = [(
                "IDEMGUARD_ENVIRONMENT__ALLOW_UNVERIFIED",
                "database,redis,kafka",
            )];
            let config = load_with(file, &allowed).expect("loads");
            let text = toml::to_string(&config).expect("serializes");
            let again = load_with(Some(&text), &[]).expect("written back, loads again");
            assert_eq!(again.source, config.source);
        }
    }

    #[test]
    fn local_file_points_at_the_stack() {
        let c = load_with(Some(include_str!("../../config/local.toml")), &[]).unwrap();
        assert_eq!(c.redis.redlock_nodes.len(), 5);
        assert_eq!(c.kafka.bootstrap_servers, "127.0.0.1:9092");
    }

    #[test]
    fn typo_key_is_refused_with_suggestion() {
        let e = load_with(Some("[database]\nurll = \"postgres://x@h/db\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "database.urll");
        assert!(e.origin.ends_with("test.toml"), "{e}");
        assert!(e.message.contains("did you mean `database.url`"), "{e}");
    }

    #[test]
    fn bad_duration_names_the_key() {
        let e = load_with(Some("[lock]\nttl = \"3 fortnights\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "lock.ttl");
        assert!(e.origin.ends_with("test.toml"));
    }

    #[test]
    fn environment_overrides_file_and_is_named_in_errors() {
        let c = load_with(
            Some("[lock]\nttl = \"10s\"\n"),
            &[
                ("IDEMGUARD_LOCK__TTL", "2s"),
                (
                    "IDEMGUARD_REDIS__REDLOCK_NODES",
                    "redis://a:1, redis://b:2,redis://c:3",
                ),
            ],
        )
        .unwrap();
        assert_eq!(c.lock.ttl, Duration::from_secs(2));
        assert_eq!(
            c.redis.redlock_nodes,
            vec!["redis://a:1", "redis://b:2", "redis://c:3"]
        );

        let e = load_with(None, &[("IDEMGUARD_DATABASE__MAX_CONNECTIONS", "lots")]).unwrap_err();
        assert_eq!(
            e.origin,
            "environment variable IDEMGUARD_DATABASE__MAX_CONNECTIONS"
        );
        assert_eq!(e.key, "database.max_connections");

        let e = load_with(None, &[("IDEMGUARD_DATABSE__URL", "postgres://h/d")]).unwrap_err();
        assert_eq!(e.key, "databse.url");
        assert!(e.message.contains("did you mean `database.url`"), "{e}");
    }

    #[test]
    fn unreadable_toml_names_the_file() {
        let e = load_with(Some("[database\nurl="), &[]).unwrap_err();
        assert!(e.origin.ends_with("test.toml"));
        assert!(e.message.starts_with("not valid TOML"));
    }
}
