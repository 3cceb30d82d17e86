//! Text idemguard did not write, shown safely. Rows other teams' services insert, lock keys and
//! values any Redis client sets (Redisson fields, tokens), Kafka headers, keys and bodies any
//! producer sends, log lines on disk: each reaches a terminal, a text log line or a report only
//! through this module, so a value can never retitle or clear the operator's terminal
//! (`ESC ] 0 ; … BEL`, `ESC [ 2 J`), overwrite a row (`\r`), forge a row or a log line (`\n`),
//! reorder what is drawn (the bidi override U+202E) or hide itself (zero-width characters).
//!
//! - [`escape`] — **the** function: every character a terminal would act on or not draw is
//!   replaced by a visible escape: `\n`, `\r`, `\t`, `\x1b` (the other C0 controls and DEL as
//!   `\xNN`), `\u{9b}` (C1 controls), `\u{202e}` (bidi overrides and isolates, zero-width and
//!   other invisible format characters, line and paragraph separators, tag characters; see
//!   [`is_hidden`]). Everything else is shown as it is — a backslash too, so a path or a JSON
//!   text stays readable (a literal `\x1b` typed by someone reads the same as an escaped ESC, and
//!   neither does anything).
//! - [`escape_cut`] — escape first, then cut to a width with `…`: a cut can never leave an
//!   escape sequence open (there is none left to open) nor split a visible escape in two.
//! - [`escape_lines`] — [`escape`] line by line, keeping the line breaks: for texts idemguard
//!   writes in several lines itself (an error chain) that may quote a value.
//! - [`markdown`] — [`escape`], then Markdown and HTML neutralized, for reports: no raw HTML, no
//!   link or image (`[x](javascript:…)`, `<javascript:…>`), no emphasis, no table cell split by
//!   a `|`; the rendered text reads exactly as the value.
//! - [`html`] — [`escape`], then `&`, `<`, `>`, `"` and `'` as character references, for the
//!   HTML report's text, attribute values and inline SVG: a value is text there, never a tag, an
//!   attribute, a script or a link (`javascript:…` is shown, never followed: the report puts no
//!   value in a URL attribute).
//!
//! The JSON twins do not use it: serde escapes every control character, and a JSON reader must
//! get the value byte for byte. Masking sensitive fields is another matter ([`crate::mask`]).

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for a character shown escaped: one a terminal acts on, or one that draws nothing and
/// can make text read as what it is not.
///
/// - C0 controls U+0000–U+001F, DEL U+007F, C1 controls U+0080–U+009F (`\u{9b}` is CSI on
///   terminals that honour 8-bit controls);
/// - bidirectional formatting: U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069;
/// - invisible format and separator characters: U+00AD, U+180E, U+200B–U+200D, U+2028–U+2029,
///   U+2060–U+2064, U+206A–U+206F, U+FEFF, U+FFF9–U+FFFB, and the rest of Unicode's `Cf`
///   category (U+0600–U+0605, U+06DD, U+070F, U+0890–U+0891, U+08E2, U+110BD, U+110CD,
///   U+13430–U+1343F, U+1BCA0–U+1BCA3, U+1D173–U+1D17A);
/// - the Hangul fillers U+115F, U+1160, U+3164, U+FFA0 (blank, used to fake names);
/// - tag characters U+E0000–U+E007F (invisible text).
pub fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{ad}'
        | '\u{600}'..='\u{605}'
        | '\u{61c}'
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{890}'..='\u{891}'
        | '\u{8e2}'
        | '\u{115f}'..='\u{1160}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206f}'
        | '\u{3164}'
        | '\u{feff}'
        | '\u{ffa0}'
        | '\u{fff9}'..='\u{fffb}'
        | '\u{110bd}'
        | '\u{110cd}'
        | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e007f}')
}

/// The visible form of a hidden character: `\n`, `\r`, `\t`, `\xNN` (other C0 and DEL),
/// `\u{NN}` (the rest).
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{0}'..='\u{1f}' | '\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        _ => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `s` with every [hidden](is_hidden) character replaced by its visible escape (`\x1b`,
/// `\u{202e}`, `\n`…); borrowed when there is none. The one way untrusted text reaches a
/// terminal, a text log or a table.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape`] of `s`, then at most `max` characters: what does not fit is replaced by `…`, and a
/// visible escape is kept whole or not at all.
pub fn escape_cut(s: &str, max: usize) -> String {
    let shown = escape(s);
    if shown.chars().count() <= max {
        return shown.into_owned();
    }
    let room = max.saturating_sub(1);
    let mut out = String::new();
    let mut used = 0;
    let mut unit = String::new();
    for c in s.chars() {
        unit.clear();
        if is_hidden(c) {
            push_escaped(&mut unit, c);
        } else {
            unit.push(c);
        }
        let n = unit.chars().count();
        if used + n > room {
            break;
        }
        out.push_str(&unit);
        used += n;
    }
    out.push('…');
    out
}

/// [`escape`] of each line of `s`, the line breaks kept: for a text idemguard itself writes on
/// several lines (an error and its causes) that may quote a value.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && is_hidden(c)) {
        return Cow::Borrowed(s);
    }
    let lines: Vec<Cow<'_, str>> = s.split('\n').map(escape).collect();
    Cow::Owned(lines.join("\n"))
}

/// Markdown's (and HTML's) active characters among ASCII punctuation: HTML tags and entities,
/// links and images, emphasis and strike-through, code spans, table cells, and the backslash
/// that escapes them all.
const MARKDOWN_ACTIVE: &[char] = &['\\', '`', '*', '_', '[', ']', '<', '>', '&', '|', '~'];

/// [`escape`], then every Markdown/HTML active character backslash-escaped (CommonMark renders
/// `\<` as `<`, never as a tag): for a value in a report's text or table cell. Never put the
/// result in a code span (backslashes are literal there).
pub fn markdown(s: &str) -> String {
    let shown = escape(s);
    let mut out = String::with_capacity(shown.len() + 8);
    for c in shown.chars() {
        if MARKDOWN_ACTIVE.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// [`escape`], then HTML's and XML's five special characters as character references: for a
/// value in the HTML report's text or in a quoted attribute value, and in inline SVG (its text
/// and `<title>`s). The page shows exactly the value, never markup made of it.
pub fn html(s: &str) -> String {
    let shown = escape(s);
    let mut out = String::with_capacity(shown.len() + 8);
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_shown_escaped_and_the_rest_as_it_is() {
        assert_eq!(escape("PN\x1b]0;pwned\x07"), "PN\\x1b]0;pwned\\x07");
        assert_eq!(escape("a\r\n\tb\0\x7f"), "a\\r\\n\\tb\\x00\\x7f");
        assert_eq!(escape("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(escape("\u{202e}gnp.exe"), "\\u{202e}gnp.exe");
        assert_eq!(escape("\u{2067}x\u{2069}"), "\\u{2067}x\\u{2069}");
        assert_eq!(
            escape("a\u{200b}b\u{2028}c\u{feff}"),
            "a\\u{200b}b\\u{2028}c\\u{feff}"
        );
        assert_eq!(escape("tag\u{e0041}"), "tag\\u{e0041}");
        // Printable text, other scripts and emoji are untouched (and not copied).
        for plain in [
            "APP:ORDER:20261129:0193a1c2",
            "支付成功 ✓ 🎉",
            r"C:\logs",
            "a|b <i>",
        ] {
            assert!(matches!(escape(plain), Cow::Borrowed(_)), "{plain}");
        }
    }

    #[test]
    fn a_cut_never_leaves_an_escape_open_nor_splits_a_visible_one() {
        // An OSC 8 hyperlink whose terminator lies past the cut.
        let osc = format!("\x1b]8;;http://evil/\x07{}\x1b]8;;\x07", "A".repeat(50));
        let cut = escape_cut(&osc, 20);
        assert_eq!(cut, "\\x1b]8;;http://evil…");
        assert!(!cut.chars().any(is_hidden));
        assert_eq!(cut.chars().count(), 20);
        // The cut falls inside `\x1b`: the escape goes whole to the `…`.
        assert_eq!(escape_cut("ab\x1bcdef", 5), "ab…");
        assert_eq!(escape_cut("ab\x1bcdef", 7), "ab\\x1b…");
        assert_eq!(escape_cut("short", 10), "short");
        assert_eq!(escape_cut("abcdef", 4), "abc…");
    }

    #[test]
    fn lines_keep_their_breaks_and_lose_their_controls() {
        assert_eq!(escape_lines("one\ntwo\x1b[2J"), "one\ntwo\\x1b[2J");
        assert_eq!(escape_lines("a\r\nb"), "a\\r\nb");
    }

    #[test]
    fn markdown_renders_the_value_and_nothing_else() {
        assert_eq!(
            markdown("<img src=x onerror=alert(1)>"),
            "\\<img src=x onerror=alert(1)\\>"
        );
        assert_eq!(
            markdown("[pay](javascript:alert(1))"),
            "\\[pay\\](javascript:alert(1))"
        );
        assert_eq!(markdown("a|b"), "a\\|b");
        assert_eq!(
            markdown("**x** `y` ~~z~~ &lt;"),
            "\\*\\*x\\*\\* \\`y\\` \\~\\~z\\~\\~ \\&lt;"
        );
        // The visible escapes' backslashes are escaped too, so they render as written.
        assert_eq!(markdown("PN\x1b]0;x\x07"), "PN\\\\x1b\\]0;x\\\\x07");
        assert_eq!(
            markdown("APP:ORDER:20261129:0193"),
            "APP:ORDER:20261129:0193"
        );
    }

    #[test]
    fn html_shows_the_value_as_text_and_nothing_else() {
        assert_eq!(
            html("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            html("\" onmouseover='x' a=\"&amp;"),
            "&quot; onmouseover=&#39;x&#39; a=&quot;&amp;amp;"
        );
        // `javascript:` stays text: the report never puts a value in a URL attribute.
        assert_eq!(html("javascript:alert(1)"), "javascript:alert(1)");
        // Controls and bidi overrides are shown escaped first, as everywhere else.
        assert_eq!(html("a\u{202e}b\x1b[2J"), "a\\u{202e}b\\x1b[2J");
        assert_eq!(html("支付成功 ✓"), "支付成功 ✓");
    }
}
