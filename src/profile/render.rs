//! The suggested profile as TOML: sections of keys, each key with the note of what it was based
//! on. Values are written by the `toml` crate (quoted and escaped), notes with every control
//! character escaped: names and values come from systems idemguard did not write, and must
//! neither break the file nor reach a terminal raw.

use std::time::Duration;

/// One `[section]` of the file.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    /// Comment lines above the keys.
    pub notes: Vec<String>,
    /// (key, TOML value, note after it).
    pub entries: Vec<(String, toml::Value, String)>,
}

impl Section {
    pub fn new(name: &str) -> Section {
        Section {
            name: name.to_string(),
            notes: Vec::new(),
            entries: Vec::new(),
        }
    }

    pub fn note(&mut self, text: &str) {
        self.notes.push(text.to_string());
    }

    pub fn set(&mut self, key: &str, value: &str, note: &str) {
        self.entries.push((
            key.to_string(),
            toml::Value::String(value.to_string()),
            note.to_string(),
        ));
    }

    pub fn set_bool(&mut self, key: &str, value: bool, note: &str) {
        self.entries.push((
            key.to_string(),
            toml::Value::Boolean(value),
            note.to_string(),
        ));
    }

    pub fn set_list(&mut self, key: &str, values: &[String], note: &str) {
        let list = values.iter().cloned().map(toml::Value::String).collect();
        self.entries
            .push((key.to_string(), toml::Value::Array(list), note.to_string()));
    }

    /// The value of `key` (tests, and the caller's summary).
    pub fn get(&self, key: &str) -> Option<&toml::Value> {
        self.entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, _)| v)
    }
}

/// Text safe in a TOML comment and on a terminal: what other systems wrote, through the one
/// escaping function (a newline would end the comment; an escape sequence would drive the
/// terminal).
pub fn comment_safe(text: &str) -> String {
    crate::untrusted::escape(text).into_owned()
}

/// A key as TOML writes it: bare when it can be (`status.PAID` is a dotted key of two bare
/// parts), else quoted.
fn key_text(key: &str) -> String {
    key.split('.')
        .map(|part| {
            let bare = !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if bare {
                part.to_string()
            } else {
                toml::Value::String(part.to_string()).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The whole file.
pub fn toml_text(sections: &[Section], problems: &[String], took: Duration) -> String {
    let mut out = String::from(
        "# A source profile suggested by `idemguard profile suggest` from the live systems (read\n\
         # only, each source sampled within its bounds). Every value says what it was based on: check\n\
         # the ones marked GUESS, then `idemguard --config THIS_FILE doctor` validates the file against\n\
         # the live systems and `idemguard --config THIS_FILE console` opens the console on them.\n",
    );
    out.push_str(&format!("# Read in {} ms.\n", took.as_millis()));
    for p in problems {
        out.push_str(&format!("# NOT READ: {}\n", comment_safe(p)));
    }
    for s in sections {
        out.push_str(&format!("\n[{}]\n", s.name));
        for n in &s.notes {
            out.push_str(&format!("# {}\n", comment_safe(n)));
        }
        for (k, v, note) in &s.entries {
            let line = format!("{} = {v}", key_text(k));
            if note.is_empty() {
                out.push_str(&format!("{line}\n"));
            } else {
                out.push_str(&format!("{line}  # {}\n", comment_safe(note)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_names_and_values_stay_inside_the_file() {
        let mut s = Section::new("source.order_record");
        s.note("status values: \"A\nB\" ×2, \u{1b}[2J");
        s.set("status.PAID", "DO\"NE", "a \u{7} bell");
        s.set("columns.weird key", "x", "");
        let text = toml_text(&[s], &[], Duration::from_millis(3));
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text}"
        );
        let parsed: toml::Table = toml::from_str(&text).expect("the file parses");
        let t = &parsed["source"]["order_record"];
        assert_eq!(t["status"]["PAID"].as_str(), Some("DO\"NE"));
        assert_eq!(t["columns"]["weird key"].as_str(), Some("x"));
    }
}
