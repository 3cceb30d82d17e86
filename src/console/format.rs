//! How the console writes times, durations and long IDs — one function each, shared by the TUI
//! and the headless tables, so the two always read the same.

use std::time::{Duration, UNIX_EPOCH};

/// A duration for people: `350ms`, `4.2s`, `4m12s`, `2h03m`, `3d04h`. Negative values get `-`.
pub fn age(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", age(-ms));
    }
    let s = ms / 1000;
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}.{}s", s, (ms % 1000) / 100),
        60_000..=3_599_999 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..=86_399_999 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// A Redis PTTL: `no TTL` for -1, `gone` for -2, else the time left.
pub fn pttl(ms: i64) -> String {
    match ms {
        -1 => "no TTL".into(),
        i64::MIN..=-2 => "gone".into(),
        _ => age(ms),
    }
}

/// `14:05:42.123` (UTC) of an epoch-ms time.
pub fn clock(ms: i64) -> String {
    let full =
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
            .to_string();
    full.get(11..23).unwrap_or(&full).to_string()
}

/// `2026-11-29 14:05:42.123` (UTC).
pub fn datetime(ms: i64) -> String {
    let full =
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
            .to_string();
    full.trim_end_matches('Z').replacen('T', " ", 1)
}

/// At most `n` characters, the rest replaced by `…` — escaped first
/// ([`crate::untrusted::escape_cut`]): what is cut is mostly text other systems wrote (a lock
/// value, a message body), and a cut must never leave a terminal escape open.
pub fn short(s: &str, n: usize) -> String {
    crate::untrusted::escape_cut(s, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_an_operator_writes_them() {
        assert_eq!(age(350), "350ms");
        assert_eq!(age(4_250), "4.2s");
        assert_eq!(age(252_000), "4m12s");
        assert_eq!(age(2 * 3_600_000 + 3 * 60_000), "2h03m");
        assert_eq!(age(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
        assert_eq!(age(-1500), "-1.5s");
        assert_eq!(pttl(-1), "no TTL");
        assert_eq!(pttl(-2), "gone");
        assert_eq!(clock(1_764_425_142_123), "14:05:42.123");
        assert_eq!(datetime(1_764_425_142_123), "2025-11-29 14:05:42.123");
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(short("abc", 4), "abc");
        assert_eq!(short("\x1b]0;x\x07", 6), "\\x1b]…");
    }
}
