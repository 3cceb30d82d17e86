//! What `redis.url` names — one node or a Redis Cluster by its seeds — parsed once into
//! [`RedisTarget`], and the check every configured URL passes: a plain URL cannot list several
//! hosts, so the cluster form has its own syntax and its one parser here.

use super::{host_port, redact_url};

/// What `redis.url` names: one node, or a Redis Cluster by its seed nodes. Parsed once from the
/// URL and carried as this type: `redis+cluster://[user:password@]host:port,host:port[/?query]`
/// (`rediss+cluster://` for TLS) — a plain URL cannot list several hosts, so the seeds are
/// written comma-separated and each becomes a `redis://` URL with the same credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Single(String),
    Cluster { seeds: Vec<String> },
}

impl RedisTarget {
    pub fn parse(raw: &str) -> Result<RedisTarget, String> {
        let Some((scheme, rest)) = cluster_scheme(raw) else {
            return Ok(RedisTarget::Single(raw.to_string()));
        };
        let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let seeds: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| format!("{scheme}://{userinfo}{h}{tail}"))
            .collect();
        if seeds.is_empty() {
            // (Not shown through redact_url: it parses the URL with this function.)
            return Err(format!("`{scheme}+cluster://…` names no seed node"));
        }
        for s in &seeds {
            check_url(s, &["redis", "rediss"])?;
        }
        Ok(RedisTarget::Cluster { seeds })
    }

    /// host:port of the node, or of the seeds joined by commas.
    pub fn describe(&self) -> String {
        match self {
            RedisTarget::Single(url) => host_port(url),
            RedisTarget::Cluster { seeds } => {
                // Each seed is a plain redis:// URL: host_port does not come back here.
                let hosts: Vec<String> = seeds.iter().map(|s| host_port(s)).collect();
                format!("cluster {}", hosts.join(","))
            }
        }
    }
}

/// `redis`/`rediss` and the text after `://` when `raw` is a `redis(s)+cluster://` URL.
pub(super) fn cluster_scheme(raw: &str) -> Option<(&'static str, &str)> {
    if let Some(rest) = raw.strip_prefix("redis+cluster://") {
        Some(("redis", rest))
    } else {
        raw.strip_prefix("rediss+cluster://").map(|r| ("rediss", r))
    }
}

/// A `redis(s)://` URL, or a `redis(s)+cluster://` one ([`RedisTarget`]).
pub(super) fn check_redis_url(raw: &str) -> Result<(), String> {
    match RedisTarget::parse(raw)? {
        RedisTarget::Single(url) => check_url(&url, &["redis", "rediss"]),
        RedisTarget::Cluster { .. } => Ok(()),
    }
}

/// A URL of one of `schemes` with a host: every address the configuration names (databases,
/// Redis nodes, a cluster's seeds). The message shows the URL redacted.
pub(super) fn check_url(raw: &str, schemes: &[&str]) -> Result<(), String> {
    let u = url::Url::parse(raw).map_err(|e| format!("`{}` is not a URL: {e}", redact_url(raw)))?;
    if !schemes.contains(&u.scheme()) {
        return Err(format!(
            "`{}` has scheme `{}`; expected {}",
            redact_url(raw),
            u.scheme(),
            schemes
                .iter()
                .map(|s| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{}` has no host", redact_url(raw)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::load::load_with;
    use super::*;

    #[test]
    fn a_cluster_url_is_parsed_once_into_its_seeds_and_redacted() {
        let raw = "redis+cluster://app:s3cret@127.0.0.1:7001,127.0.0.1:7002/0?password=s3cret";
        let target = RedisTarget::parse(raw).unwrap();
        assert_eq!(
            target,
            RedisTarget::Cluster {
                seeds: vec![
                    "redis://app:s3cret@127.0.0.1:7001/0?password=s3cret".into(),
                    "redis://app:s3cret@127.0.0.1:7002/0?password=s3cret".into(),
                ]
            }
        );
        assert_eq!(target.describe(), "cluster 127.0.0.1:7001,127.0.0.1:7002");
        let shown = redact_url(raw);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(
            shown,
            "redis+cluster://app:***@127.0.0.1:7001,127.0.0.1:7002/0?password=***"
        );
        assert_eq!(
            RedisTarget::parse("redis://127.0.0.1:6379").unwrap(),
            RedisTarget::Single("redis://127.0.0.1:6379".into())
        );
        assert!(RedisTarget::parse("redis+cluster://").is_err());
        let c = load_with(
            None,
            &[(
                "IDEMGUARD_REDIS__URL",
                "redis+cluster://127.0.0.1:7001,127.0.0.1:7002",
            )],
        )
        .unwrap();
        assert!(matches!(
            RedisTarget::parse(&c.redis.url),
            Ok(RedisTarget::Cluster { .. })
        ));
        let e = load_with(
            None,
            &[("IDEMGUARD_REDIS__URL", "redis+cluster://:pw@h:x,h:2")],
        )
        .unwrap_err();
        assert_eq!(e.key, "redis.url");
        assert!(!e.to_string().contains("pw@"), "{e}");
    }
}
