//! Secrets kept out of everything shown: every URL goes through [`redact_url`] before it is
//! printed, logged or put in an error (`config`, `doctor`, the console, reports), and texts that
//! merely quote a value through [`redact_urls_in`]. One place decides what a secret looks like
//! (a userinfo password, a password-like parameter or property), so no face can show one that
//! another hides.

use super::target::{cluster_scheme, RedisTarget};
use super::Config;

/// Query parameters that carry a secret (libpq's `password` and `sslpassword`, and what other
/// drivers and proxies call theirs); matched in any case, and as part of a longer name
/// (`client_secret`, `access_token`).
const SECRET_PARAMS: [&str; 6] = ["password", "sslpassword", "pass", "pwd", "secret", "token"];

pub(super) fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.contains(&name.as_str())
        || ["password", "passwd", "secret", "token"]
            .iter()
            .any(|s| name.contains(s))
}

/// A `[kafka.client]` property whose value is a secret (a client secret, a key or keystore
/// password, a PEM key, the OAUTHBEARER configuration): shown as `***`, removed from logs.
pub fn is_secret_property(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    is_secret_param(&name)
        || (name.ends_with(".pem") && name.contains("key"))
        || name == "sasl.oauthbearer.config"
}

/// A URL with every secret replaced by `***`: the password of its userinfo
/// (`redis://:pw@…` included) and the value of every password-like query parameter
/// (`?password=…`, `?sslpassword=…`, any case). Anything unparsable is shown as
/// `<unparsable url>` rather than risking a password in a log. The one function every URL goes
/// through before it is shown: `config`, `doctor`, the console, errors and logs.
pub fn redact_url(raw: &str) -> String {
    if raw.is_empty() {
        return String::new();
    }
    if cluster_scheme(raw).is_some() {
        return redact_cluster_url(raw);
    }
    let mut u = match url::Url::parse(raw) {
        Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => u,
        // Without a host the url crate sees no userinfo (`postgres:/root:pw@h/db` is a path to
        // it): such a string is redacted by its text.
        Ok(_) => return redact_loose(raw, true),
        Err(_) => return redact_loose(raw, false),
    };
    if u.password().is_some() && u.set_password(Some("***")).is_err() {
        return "<unparsable url>".into();
    }
    if u.query_pairs().any(|(k, _)| is_secret_param(&k)) {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_param(&k) {
                    "***".to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// [`redact_url`] of a string that is no URL with a host (`postgres:/root:pw@127.0.0.1/db`,
/// `postgresql:root:pw@h`, `redis:/:pw@h`): its scheme, then everything up to the last `@` (where
/// a userinfo ends, whatever it holds) hidden, then the rest with its password-like parameters
/// hidden. Without an `@`, a string that parsed is shown as its scheme alone (`postgres:***`:
/// what follows could be a user and a password), one that did not as `<unparsable url>`.
fn redact_loose(raw: &str, parsed: bool) -> String {
    let scheme_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    let (scheme, rest) = match raw.split_once(':') {
        Some((s, r)) if !s.is_empty() && s.chars().all(scheme_char) => (s, r),
        _ => return "<unparsable url>".into(),
    };
    let Some(at) = rest.rfind('@') else {
        return if parsed {
            format!("{scheme}:***")
        } else {
            "<unparsable url>".into()
        };
    };
    let slashes = &rest[..rest.len() - rest.trim_start_matches('/').len()];
    format!(
        "{scheme}:{slashes}***@{}",
        redact_query_text(&rest[at + 1..])
    )
}

/// `text` (`host:port/path?query`) with the value of every password-like query parameter
/// replaced by `***`, by its text alone.
fn redact_query_text(text: &str) -> String {
    let Some((head, query)) = text.split_once('?') else {
        return text.to_string();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if secret_param_text(name) => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// A query parameter's name, as written or percent-decoded, is password-like.
fn secret_param_text(name: &str) -> bool {
    is_secret_param(name) || percent_decoded(name).is_some_and(|n| is_secret_param(&n))
}

/// The secrets of a string that is no URL with a host, by its text (as [`redact_loose`] hides
/// them): the userinfo's password (after its first `:`, before the last `@`) and the values of
/// password-like parameters.
pub(super) fn loose_secrets(raw: &str) -> Vec<String> {
    let mut out = Vec::new();
    let rest = raw.split_once(':').map_or(raw, |(_, r)| r);
    let rest = rest.trim_start_matches('/');
    if let Some(at) = rest.rfind('@') {
        if let Some((_, password)) = rest[..at].split_once(':') {
            out.push(password.to_string());
            out.extend(percent_decoded(password));
        }
    }
    if let Some((_, query)) = raw.split_once('?') {
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=') {
                if secret_param_text(name) {
                    out.push(value.to_string());
                    out.extend(percent_decoded(value));
                }
            }
        }
    }
    out
}

/// `text` with every URL in it that carries a secret shown through [`redact_url`]: for texts
/// that quote a value (a type error, a library's message) rather than show a URL on purpose.
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let scheme_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
        let start = rest[..i]
            .char_indices()
            .rev()
            .find(|(_, c)| !scheme_char(*c))
            .map_or(0, |(p, c)| p + c.len_utf8());
        let end = rest[i..]
            .find(|c: char| {
                c.is_whitespace()
                    || matches!(c, '"' | '\'' | '`' | '<' | '>' | ',' | ')' | ']' | '}')
            })
            .map_or(rest.len(), |e| i + e);
        let token = &rest[start..end];
        out.push_str(&rest[..start]);
        match url::Url::parse(token) {
            Ok(u)
                if u.password().is_some() || u.query_pairs().any(|(k, _)| is_secret_param(&k)) =>
            {
                out.push_str(&redact_url(token))
            }
            _ => out.push_str(token),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A query component or password as its bytes mean it (`%40` → `@`, `+` → space); `None` when
/// that is the text itself.
pub(super) fn percent_decoded(raw: &str) -> Option<String> {
    let decoded: String = url::form_urlencoded::parse(format!("x={raw}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    (decoded != raw).then_some(decoded)
}

/// [`redact_url`] of a `redis+cluster://` URL: each seed redacted, joined again.
fn redact_cluster_url(raw: &str) -> String {
    let Ok(RedisTarget::Cluster { seeds }) = RedisTarget::parse(raw) else {
        return "<unparsable url>".into();
    };
    let scheme = if raw.starts_with("rediss") {
        "rediss"
    } else {
        "redis"
    };
    let shown: Vec<String> = seeds.iter().map(|s| redact_url(s)).collect();
    // The first seed keeps its credentials and path; the others only their host:port.
    let first = shown[0].strip_prefix(&format!("{scheme}://")).unwrap_or("");
    let hosts: Vec<String> = seeds.iter().skip(1).map(|s| host_port(s)).collect();
    let (authority, tail) = first.split_at(first.find(['/', '?']).unwrap_or(first.len()));
    let mut out = format!("{scheme}+cluster://{authority}");
    for h in hosts {
        out.push(',');
        out.push_str(&h);
    }
    out.push_str(tail);
    out
}

/// `host:port` of a URL, for error rows and hints (`cluster h:p,h:p` for a cluster's seeds).
pub fn host_port(raw: &str) -> String {
    if cluster_scheme(raw).is_some() {
        return RedisTarget::parse(raw)
            .map_or_else(|_| "<unparsable url>".into(), |t| t.describe());
    }
    match url::Url::parse(raw) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or("?"),
            u.port_or_known_default()
                .map_or("?".into(), |p| p.to_string())
        ),
        Err(_) => "<unparsable url>".into(),
    }
}

impl Config {
    /// The effective configuration as TOML, passwords replaced by `***`.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        shown.database.url = redact_url(&shown.database.url);
        shown.database.replica_url = redact_url(&shown.database.replica_url);
        shown.database.actions_url = redact_url(&shown.database.actions_url);
        shown.redis.url = redact_url(&shown.redis.url);
        shown.foreign_locks.actions_redis_url = redact_url(&shown.foreign_locks.actions_redis_url);
        shown.redis.redlock_nodes = shown
            .redis
            .redlock_nodes
            .iter()
            .map(|u| redact_url(u))
            .collect();
        for secret in [
            &mut shown.kafka.sasl_password,
            &mut shown.kafka.ssl_key_password,
        ] {
            if !secret.is_empty() {
                *secret = "***".into();
            }
        }
        for (name, value) in shown.kafka.client.iter_mut() {
            if is_secret_property(name) {
                *value = "***".into();
            }
        }
        toml::to_string_pretty(&shown)
            .unwrap_or_else(|e| format!("# cannot render configuration: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::load::load_with;
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        let c = load_with(
            None,
            &[(
                "IDEMGUARD_DATABASE__URL",
                "postgres://app:s3cret@db:5432/orders",
            )],
        )
        .unwrap();
        let shown = c.to_redacted_toml();
        assert!(!shown.contains("s3cret"));
        assert!(shown.contains("app:***@db"));
        let e = load_with(
            None,
            &[("IDEMGUARD_DATABASE__URL", "ftp://app:s3cret@db/x")],
        )
        .unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn redact_url_hides_userinfo_and_every_password_like_parameter() {
        for (raw, shown) in [
            (
                "postgres://root@127.0.0.1:5432/db?password=s3cret",
                "postgres://root@127.0.0.1:5432/db?password=***",
            ),
            (
                "postgres://app:s3cret@db:5432/orders",
                "postgres://app:***@db:5432/orders",
            ),
            (
                "mysql://root@h:3306/db?sslmode=disable&PassWord=s3cret",
                "mysql://root@h:3306/db?sslmode=disable&PassWord=***",
            ),
            (
                "postgres://h/db?SSLPASSWORD=s3cret&application_name=x",
                "postgres://h/db?SSLPASSWORD=***&application_name=x",
            ),
            (
                "redis://:s3cret@127.0.0.1:6379",
                "redis://:***@127.0.0.1:6379",
            ),
            (
                "redis://default:s3cret@127.0.0.1:6381/0?Token=s3cret",
                "redis://default:***@127.0.0.1:6381/0?Token=***",
            ),
            (
                "postgres://h/db?pass=s3cret&Pwd=s3cret&secret=s3cret&client_secret=s3cret",
                "postgres://h/db?pass=***&Pwd=***&secret=***&client_secret=***",
            ),
            // A percent-encoded name or value is still the secret.
            (
                "postgres://h/db?pass%77ord=s3cr%65t",
                "postgres://h/db?password=***",
            ),
            (
                "postgres://root@h/db?sslmode=require",
                "postgres://root@h/db?sslmode=require",
            ),
            ("not a url s3cret", "<unparsable url>"),
            ("", ""),
        ] {
            assert_eq!(redact_url(raw), shown, "{raw}");
        }
    }

    /// Strings that are no URL with a host: the url crate sees no userinfo in them, so they are
    /// redacted by their text, and their secrets are still found for the log writer.
    #[test]
    fn a_string_that_is_no_url_with_a_host_keeps_its_password_hidden() {
        for (raw, shown) in [
            (
                "postgres:/root:Secret_51@127.0.0.1:5432/db",
                "postgres:/***@127.0.0.1:5432/db",
            ),
            (
                "postgresql:root:Secret_52@127.0.0.1:5432/db",
                "postgresql:***@127.0.0.1:5432/db",
            ),
            (
                "redis:/:Secret_53@127.0.0.1:6379",
                "redis:/***@127.0.0.1:6379",
            ),
            ("postgres://root:Secret_54@/db", "postgres://***@/db"),
            // A password holding `@` or `?`: everything up to the last `@` goes.
            (
                "mysql:/u:p@ss?w@h/db?token=Secret_55&x=1",
                "mysql:/***@h/db?token=***&x=1",
            ),
            (
                "postgres://root:Secret_56@h:99999/db",
                "postgres://***@h:99999/db",
            ),
            ("postgresql:root:Secret_57", "postgresql:***"),
            ("postgres://root:Secret_58", "<unparsable url>"),
            ("postgres:/db?password=Secret_59", "postgres:***"),
        ] {
            assert_eq!(redact_url(raw), shown, "{raw}");
        }
        let mut secrets = loose_secrets("postgres:/root:Secret_51@127.0.0.1:5432/db");
        secrets.extend(loose_secrets("mysql:/u:p%40ss@h/db?Token=Secret_55"));
        assert_eq!(secrets, ["Secret_51", "p%40ss", "p@ss", "Secret_55"]);
    }

    #[test]
    fn every_configured_url_is_shown_redacted() {
        let c = load_with(
            None,
            &[
                (
                    "IDEMGUARD_DATABASE__URL",
                    "postgres://root:s3cret@h/db?password=s3cret",
                ),
                (
                    "IDEMGUARD_DATABASE__REPLICA_URL",
                    "postgres://root@h/db?sslpassword=s3cret",
                ),
                ("IDEMGUARD_REDIS__URL", "redis://:s3cret@h:6379"),
                (
                    "IDEMGUARD_REDIS__REDLOCK_NODES",
                    "redis://a:s3cret@a:1,redis://b:2?password=s3cret,redis://c:3",
                ),
            ],
        )
        .unwrap();
        let shown = c.to_redacted_toml();
        assert!(!shown.contains("s3cret"), "{shown}");
        // Kafka addresses cannot carry credentials at all; the refusal does not echo them.
        let e = load_with(
            None,
            &[(
                "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
                "user:s3cret@127.0.0.1:9092",
            )],
        )
        .unwrap_err();
        assert_eq!(e.key, "kafka.bootstrap_servers");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn urls_quoted_in_a_text_are_redacted() {
        let text = "invalid type: string \"redis://:s3cret@h:1\", expected a sequence; see http://example.com/x and …mysql://root@h/db?pwd=s3cret, ok";
        assert_eq!(
            redact_urls_in(text),
            "invalid type: string \"redis://:***@h:1\", expected a sequence; see http://example.com/x and …mysql://root@h/db?pwd=***, ok"
        );
        let e = load_with(
            Some("[redis]\nredlock_nodes = \"redis://:s3cret@h:1\"\n"),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key, "redis.redlock_nodes");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
}
