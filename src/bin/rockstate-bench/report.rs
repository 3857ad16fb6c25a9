//! Output lines of the benches: the same fields printed either as `key=value` text (the
//! default) or, with `rockstate-bench --json`, as one JSON object per line.
//!
//! Text: `[# ][label ]k1=v1 k2=v2[ (note)]`; a `#` line is a header or summary. JSON:
//! `{"line":"label","header":true,"k1":v1,…,"note":"…"}` (`line`, `header`, `note` only when
//! set); numbers stay numbers, with the decimals the text shows.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

static JSON: AtomicBool = AtomicBool::new(false);

/// Selects JSON output for every following [`Line::print`].
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// One value of a line: a number already formatted with its decimals, or text.
enum Value {
    Number(String),
    Text(String),
}

/// One output line of a bench (see the module docs).
pub struct Line {
    header: bool,
    label: Option<String>,
    fields: Vec<(String, Value)>,
    note: Option<String>,
}

impl Line {
    /// A data line.
    pub fn new() -> Line {
        Line {
            header: false,
            label: None,
            fields: Vec::new(),
            note: None,
        }
    }

    /// A header or summary line (`# ` in text).
    pub fn header() -> Line {
        Line {
            header: true,
            ..Line::new()
        }
    }

    /// Names what the line measures (text before the fields; `line` in JSON).
    pub fn label(mut self, label: impl Into<String>) -> Line {
        self.label = Some(label.into());
        self
    }

    /// An integer field.
    pub fn int(mut self, key: &str, v: impl Into<u64>) -> Line {
        self.fields
            .push((key.to_string(), Value::Number(v.into().to_string())));
        self
    }

    /// A decimal field shown with `decimals` digits (JSON `null` when not finite).
    pub fn num(mut self, key: &str, v: f64, decimals: usize) -> Line {
        let text = if v.is_finite() {
            format!("{v:.decimals$}")
        } else {
            "null".to_string()
        };
        self.fields.push((key.to_string(), Value::Number(text)));
        self
    }

    /// A text field.
    pub fn text(mut self, key: &str, v: impl Into<String>) -> Line {
        self.fields.push((key.to_string(), Value::Text(v.into())));
        self
    }

    /// A trailing remark (`(…)` in text).
    pub fn note(mut self, note: impl Into<String>) -> Line {
        self.note = Some(note.into());
        self
    }

    /// The line as text.
    pub fn to_text(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.header {
            parts.push("#".into());
        }
        parts.extend(self.label.clone());
        for (k, v) in &self.fields {
            match v {
                Value::Number(n) => parts.push(format!("{k}={n}")),
                Value::Text(t) => parts.push(format!("{k}={t}")),
            }
        }
        if let Some(n) = &self.note {
            parts.push(format!("({n})"));
        }
        parts.join(" ")
    }

    /// The line as one JSON object.
    pub fn to_json(&self) -> String {
        let q = |s: &str| serde_json::Value::from(s).to_string();
        let mut out = String::from("{");
        let mut first = true;
        let mut put = |k: &str, v: &str| {
            let _ = write!(out, "{}{}:{v}", if first { "" } else { "," }, q(k));
            first = false;
        };
        if let Some(l) = &self.label {
            put("line", &q(l.trim_end_matches(':')));
        }
        if self.header {
            put("header", "true");
        }
        for (k, v) in &self.fields {
            match v {
                Value::Number(n) => put(k, n),
                Value::Text(t) => put(k, &q(t)),
            }
        }
        if let Some(n) = &self.note {
            put("note", &q(n));
        }
        out.push('}');
        out
    }

    /// Prints the line to stdout in the selected format.
    pub fn print(&self) {
        if JSON.load(Ordering::Relaxed) {
            println!("{}", self.to_json());
        } else {
            println!("{}", self.to_text());
        }
    }

    /// Prints the line while `bar` is hidden, so the bar is redrawn below it.
    pub fn print_above(&self, bar: &indicatif::ProgressBar) {
        bar.suspend(|| self.print());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Line {
        Line::header()
            .label("sync:")
            .num("rockstate_ms", 1.23456, 2)
            .int("bytes", 42u64)
            .text("mode", "full \"x\"")
            .note("median of 6")
    }

    #[test]
    fn text_keeps_the_key_value_format() {
        assert_eq!(
            sample().to_text(),
            "# sync: rockstate_ms=1.23 bytes=42 mode=full \"x\" (median of 6)"
        );
    }

    #[test]
    fn json_has_the_same_fields_as_numbers() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        assert_eq!(v["line"], "sync");
        assert_eq!(v["header"], true);
        assert_eq!(v["rockstate_ms"].as_f64(), Some(1.23));
        assert_eq!(v["bytes"].as_u64(), Some(42));
        assert_eq!(v["mode"], "full \"x\"");
        assert_eq!(v["note"], "median of 6");
        let nan: serde_json::Value =
            serde_json::from_str(&Line::new().num("r", f64::NAN, 3).to_json()).unwrap();
        assert!(nan["r"].is_null());
    }
}
