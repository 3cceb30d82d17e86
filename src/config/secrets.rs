//! The secrets themselves: passwords read from their files (kept off the command line and out of
//! the configuration), put into a URL only where a driver is given it, and every secret value
//! listed for the log writer to remove from any line.

use super::redact::{is_secret_param, is_secret_property, loose_secrets, percent_decoded};
use super::{redact_url, Config, DatabaseConfig, KafkaConfig, RedisConfig};

/// The most a secret file may hold: a password, a passphrase.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;
/// The most a certificate, key or CA bundle file may hold (a provider's bundle is a few hundred
/// kilobytes).
pub const MAX_CERTIFICATE_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A configured file's bytes: a regular file of at most `max` bytes. A device (`/dev/zero`), a
/// FIFO or a directory is refused at once — opened without blocking, never read until memory
/// runs out or waited on — and so is a larger file. The errors name the file, never its content.
pub fn read_bounded_file(path: &str, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| format!("cannot read `{path}`: {e}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(format!(
            "`{path}` is not a regular file (a device, a pipe or a directory): name the file itself"
        ));
    }
    if meta.len() > max {
        return Err(format!(
            "`{path}` holds {} bytes, more than the {max} such a file may: is it the right file?",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > max {
        return Err(format!("`{path}` grew past {max} bytes while it was read"));
    }
    Ok(bytes)
}

/// Whether every user of the machine may read `path` (its mode has o+r).
pub fn readable_by_others(path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

/// The content of a secret file without its trailing newline: a password kept off the command
/// line and out of the configuration ([`read_bounded_file`], at most [`MAX_SECRET_FILE_BYTES`]).
/// The errors name the file, never its content.
pub fn read_secret_file(path: &str) -> Result<String, String> {
    let bytes = read_bounded_file(path, MAX_SECRET_FILE_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8 text"))?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(format!("`{path}` is empty"));
    }
    Ok(secret.to_string())
}

impl DatabaseConfig {
    /// `url` as the driver is given it: with the password of its file (`actions_password_file`
    /// for `actions_url`, else `password_file`) when it carries none. Never shown.
    pub fn url_with_password(&self, url: &str) -> Result<String, String> {
        let file = if !self.actions_url.is_empty() && url == self.actions_url {
            &self.actions_password_file
        } else {
            &self.password_file
        };
        let Ok(mut u) = url::Url::parse(url) else {
            return Ok(url.to_string());
        };
        if file.is_empty() || u.password().is_some() {
            return Ok(url.to_string());
        }
        let password = read_secret_file(file)?;
        u.set_password(Some(&password))
            .map_err(|_| format!("{} cannot carry a password", redact_url(url)))?;
        Ok(u.to_string())
    }
}

impl RedisConfig {
    /// The password of `password_file` (for Redis URLs that carry none), if one is configured.
    pub fn password(&self) -> Result<Option<String>, String> {
        if self.password_file.is_empty() {
            return Ok(None);
        }
        read_secret_file(&self.password_file).map(Some)
    }
}

impl KafkaConfig {
    /// The SASL password: `sasl_password`, else the content of `sasl_password_file`.
    pub fn sasl_password(&self) -> Result<String, String> {
        secret_of(&self.sasl_password, &self.sasl_password_file)
    }

    /// The client key's passphrase: `ssl_key_password`, else its file's content.
    pub fn ssl_key_password(&self) -> Result<String, String> {
        secret_of(&self.ssl_key_password, &self.ssl_key_password_file)
    }
}

fn secret_of(value: &str, file: &str) -> Result<String, String> {
    if file.is_empty() {
        Ok(value.to_string())
    } else {
        read_secret_file(file)
    }
}

impl Config {
    /// Every secret of the configured URLs — userinfo passwords and password-like parameters,
    /// as written and percent-decoded — for the log writer to remove from any line
    /// ([`crate::logging`]). Shorter than 4 characters: not a secret worth mangling logs for.
    pub fn secrets(&self) -> Vec<String> {
        let mut urls = vec![
            &self.database.url,
            &self.database.replica_url,
            &self.database.actions_url,
            &self.redis.url,
            &self.foreign_locks.actions_redis_url,
        ];
        urls.extend(self.redis.redlock_nodes.iter());
        let mut out: Vec<String> = Vec::new();
        for raw in urls {
            let u = match url::Url::parse(raw) {
                Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => u,
                _ => {
                    out.extend(loose_secrets(raw));
                    continue;
                }
            };
            if let Some(p) = u.password() {
                out.push(p.to_string());
                out.extend(percent_decoded(p));
            }
            for pair in u.query().unwrap_or("").split('&') {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                if percent_decoded(name).is_some_and(|n| is_secret_param(&n))
                    || is_secret_param(name)
                {
                    out.push(value.to_string());
                    out.extend(percent_decoded(value));
                }
            }
        }
        out.extend(self.secret_values());
        out.retain(|s| s.len() >= 4);
        out.sort();
        out.dedup();
        out
    }

    /// The secrets that are no part of a URL: the Kafka passwords, the secret `[kafka.client]`
    /// properties and the content of every password file (each as written and percent-encoded,
    /// as it may appear in a URL idemguard built).
    fn secret_values(&self) -> Vec<String> {
        let k = &self.kafka;
        let mut out = vec![k.sasl_password.clone(), k.ssl_key_password.clone()];
        out.extend(
            k.client
                .iter()
                .filter(|(n, _)| is_secret_property(n))
                .map(|(_, v)| v.clone()),
        );
        for file in [
            &self.database.password_file,
            &self.database.actions_password_file,
            &self.redis.password_file,
            &k.sasl_password_file,
            &k.ssl_key_password_file,
        ] {
            if let Ok(secret) = read_secret_file(file) {
                let encoded: String =
                    url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
                out.push(secret);
                out.push(encoded);
            }
        }
        out
    }
}
