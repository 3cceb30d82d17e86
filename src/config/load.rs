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
/// Environment variable choosing one of the file's contexts (`--context NAME` sets it).
pub const CONTEXT_ENV: &str = "IDEMGUARD_CONTEXT";
/// The name of a file's top-level sections when it also has `[contexts.NAME]` tables.
pub const DEFAULT_CONTEXT: &str = "default";

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// `--config FILE`; falls back to `$IDEMGUARD_CONFIG`.
    pub file: Option<PathBuf>,
    /// Environment variables to apply (normally `std::env::vars()`).
    pub env: Vec<(String, String)>,
}

impl ConfigSource {
    /// The context `IDEMGUARD_CONTEXT` names, if any.
    pub fn context(&self) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, v)| k == CONTEXT_ENV && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// The same source with `name` as its context (`idemguard contexts`, `doctor --all-contexts`).
    pub fn with_context(&self, name: &str) -> ConfigSource {
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| k != CONTEXT_ENV)
            .cloned()
            .collect();
        env.push((CONTEXT_ENV.into(), name.into()));
        ConfigSource {
            file: self.file.clone(),
            env,
        }
    }

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
        let mut context = None;

        if let Some(path) = &source.file {
            let (file, origin) = read_table(path)?;
            let (chosen, name, origin) = choose_context(file, source.context(), &origin)?;
            overlay(&defaults, &mut merged, &chosen, "", &origin, &mut origins)?;
            context = name;
        } else if let Some(name) = source.context() {
            return Err(ConfigError {
                origin: format!("environment variable {CONTEXT_ENV}"),
                key: String::new(),
                message: format!(
                    "names the context `{name}`, but no config file is given: contexts are \
                     [contexts.NAME] tables of the file given with --config or IDEMGUARD_CONFIG"
                ),
            });
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

        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(merged))
            .map_err(|e| {
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
        config.context = context;
        Ok(config)
    }

    /// The contexts of `source`'s file, [`DEFAULT_CONTEXT`] (its top-level sections) first; none
    /// when it has no `[contexts]` table, or there is no file.
    pub fn contexts(source: &ConfigSource) -> Result<Vec<String>, ConfigError> {
        let Some(path) = &source.file else {
            return Ok(vec![]);
        };
        let (mut file, origin) = read_table(path)?;
        let contexts = take_contexts(&mut file, &origin)?;
        if contexts.is_empty() {
            return Ok(vec![]);
        }
        let mut names = vec![DEFAULT_CONTEXT.to_string()];
        names.extend(contexts.keys().cloned());
        Ok(names)
    }

    /// Defaults only (tests, and tools that need no file).
    pub fn defaults() -> Config {
        Config::load(&ConfigSource::default()).expect("the built-in defaults are valid")
    }
}

/// The TOML table of the file at `path`, and the origin its keys are reported with.
fn read_table(path: &std::path::Path) -> Result<(toml::Table, String), ConfigError> {
    let origin = path.display().to_string();
    let failed = |message: String| ConfigError {
        origin: origin.clone(),
        key: String::new(),
        message,
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| failed(format!("cannot read the file: {e}")))?;
    let table = text
        .parse()
        .map_err(|e: toml::de::Error| failed(format!("not valid TOML: {}", e.message())))?;
    Ok((table, origin))
}

/// The `[contexts]` table of `file`, removed from it: each context's table, by name.
fn take_contexts(file: &mut toml::Table, origin: &str) -> Result<toml::Table, ConfigError> {
    let refused = |key: String, message: &str| ConfigError {
        origin: origin.into(),
        key,
        message: message.into(),
    };
    let contexts = match file.remove("contexts") {
        None => return Ok(toml::Table::new()),
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(refused(
                "contexts".into(),
                "is a section: write each context as [contexts.NAME]",
            ))
        }
    };
    for (name, table) in &contexts {
        let key = format!("contexts.{name}");
        if name == DEFAULT_CONTEXT {
            return Err(refused(
                key,
                "`default` names the file's top-level sections: give this context another name",
            ));
        }
        if !table.is_table() {
            return Err(refused(
                key,
                "is a context: write it as [contexts.NAME] with its own sections",
            ));
        }
    }
    Ok(contexts)
}

/// What of `file` is laid over the defaults for the context `wanted`, its name (`None` when the
/// file has no contexts) and the origin its keys are reported with. A context is whole on its
/// own: its sections are laid over the built-in defaults, not over the file's top level, so a
/// production context never inherits a local connection by omission.
fn choose_context(
    mut file: toml::Table,
    wanted: Option<&str>,
    origin: &str,
) -> Result<(toml::Table, Option<String>, String), ConfigError> {
    let mut contexts = take_contexts(&mut file, origin)?;
    match wanted {
        None if contexts.is_empty() => Ok((file, None, origin.into())),
        None => Ok((file, Some(DEFAULT_CONTEXT.into()), origin.into())),
        Some(DEFAULT_CONTEXT) => Ok((file, Some(DEFAULT_CONTEXT.into()), origin.into())),
        Some(name) => match contexts.remove(name) {
            Some(toml::Value::Table(t)) => {
                Ok((t, Some(name.into()), format!("{origin} [contexts.{name}]")))
            }
            _ => {
                let mut names = vec![DEFAULT_CONTEXT.to_string()];
                names.extend(contexts.keys().cloned());
                let guess = names
                    .iter()
                    .map(|n| (strsim::levenshtein(n, name), n))
                    .min()
                    .filter(|(d, _)| *d <= 2)
                    .map_or(String::new(), |(_, n)| format!(" (did you mean `{n}`?)"));
                Err(ConfigError {
                    origin: origin.into(),
                    key: String::new(),
                    message: format!(
                        "no context `{name}`{guess}: its contexts are {}",
                        names.join(", ")
                    ),
                })
            }
        },
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

    const TWO_CONTEXTS: &str = r#"
[environment]
name = "local"
[database]
url = "postgres://root@127.0.0.1:5432/idemguard"
[lock]
ttl = "10s"

[contexts.tls.environment]
name = "tls"
color = "yellow"
[contexts.tls.database]
url = "mysql://idemguard@localhost:3307/idemguard?ssl-mode=verify_identity"
"#;

    #[test]
    fn a_context_is_laid_over_the_defaults_not_over_the_top_level() {
        let top = load_with(Some(TWO_CONTEXTS), &[]).unwrap();
        assert_eq!(top.context.as_deref(), Some("default"));
        assert_eq!(top.environment.name, "local");
        assert_eq!(top.lock.ttl, Duration::from_secs(10));
        let tls = load_with(Some(TWO_CONTEXTS), &[("IDEMGUARD_CONTEXT", "tls")]).unwrap();
        assert_eq!(tls.context.as_deref(), Some("tls"));
        assert_eq!(
            (tls.environment.name.as_str(), tls.dialect()),
            ("tls", Dialect::Mysql)
        );
        // The top level's lock TTL is not the context's: a context is whole on its own.
        assert_eq!(tls.lock.ttl, Duration::from_secs(30));
        // The environment still overrides the context's keys.
        let env = [
            ("IDEMGUARD_CONTEXT", "tls"),
            ("IDEMGUARD_ENVIRONMENT__NAME", "other"),
        ];
        assert_eq!(
            load_with(Some(TWO_CONTEXTS), &env)
                .unwrap()
                .environment
                .name,
            "other"
        );
        let named = load_with(Some(TWO_CONTEXTS), &[("IDEMGUARD_CONTEXT", "default")]).unwrap();
        assert_eq!(named.environment.name, "local");
        // A file without contexts has none, as before contexts existed.
        let plain = load_with(Some("[environment]\nname = \"x\"\n"), &[]).unwrap();
        assert_eq!(plain.context, None);
    }

    #[test]
    fn an_unknown_context_is_refused_with_the_ones_there_are() {
        let e = load_with(Some(TWO_CONTEXTS), &[("IDEMGUARD_CONTEXT", "tsl")]).unwrap_err();
        assert!(
            e.message.contains("no context `tsl` (did you mean `tls`?)")
                && e.message.contains("its contexts are default, tls"),
            "{e}"
        );
        let e = load_with(None, &[("IDEMGUARD_CONTEXT", "tls")]).unwrap_err();
        assert!(e.message.contains("no config file is given"), "{e}");
        let e = load_with(Some("[contexts.default.database]\nurl = \"x\"\n"), &[]).unwrap_err();
        assert_eq!(e.key, "contexts.default");
    }

    #[test]
    fn a_key_wrong_inside_a_context_names_the_context() {
        let file = "[contexts.prod.database]\nurll = \"postgres://x@h/db\"\n";
        let e = load_with(Some(file), &[("IDEMGUARD_CONTEXT", "prod")]).unwrap_err();
        assert_eq!(e.key, "database.urll");
        assert!(e.origin.ends_with("test.toml [contexts.prod]"), "{e}");
        assert!(e.message.contains("did you mean `database.url`"), "{e}");
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
