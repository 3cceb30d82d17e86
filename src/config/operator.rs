//! The operator's name, written into every audit row: the configured one, else who the process
//! runs as — found even where `$USER` is unset (cron jobs, `sudo -i`, containers), so an audit
//! row never names nobody.

use super::Config;

impl Config {
    /// The operator's name for audit rows: `console.operator`, else `$USER`, else the login name
    /// of the process's uid (cron jobs, `sudo -i`, containers often have no `$USER`).
    pub fn operator(&self) -> String {
        operator_name(&self.console.operator, std::env::var("USER").ok())
    }
}

fn operator_name(configured: &str, user_env: Option<String>) -> String {
    if !configured.is_empty() {
        return configured.to_string();
    }
    // SAFETY: getuid cannot fail and has no side effects.
    let uid = unsafe { libc::getuid() };
    user_env
        .filter(|u| !u.is_empty())
        .or_else(|| login_name(uid))
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// The login name of `uid` in the password database (getpwuid_r: thread-safe, unlike getpwuid).
fn login_name(uid: libc::uid_t) -> Option<String> {
    // SAFETY: passwd is a plain C struct (integers and pointers); all zeroes is a valid value.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: every pointer is valid for the call and `buf.len()` is the buffer's real size; the
    // strings of `entry` point into `buf`, which outlives their use below.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name is a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) }
        .to_string_lossy()
        .into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_falls_back_to_the_login_name_of_the_uid() {
        let login = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let login = String::from_utf8(login.stdout).unwrap().trim().to_string();
        assert_eq!(operator_name("", None), login);
        assert_eq!(operator_name("", Some(String::new())), login);
        assert_eq!(operator_name("", Some("alice".into())), "alice");
        assert_eq!(operator_name("oncall", Some("alice".into())), "oncall");
    }
}
