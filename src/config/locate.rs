//! Turns configuration problems into messages that name the dotted key and its line.
//!
//! serde reports *what* is wrong with a byte span; validation knows *which key* is wrong.
//! Both are mapped onto the same document tree, parsed once more with spans, so every
//! message reads `config.toml:3: collect.interval: …`.

use std::ops::Range;
use std::path::Path;

use toml::de::{DeTable, DeValue};

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key, e.g. `collect.interval`, where one could be identified.
    pub key: Option<String>,
    /// 1-based line, where one could be identified.
    pub line: Option<usize>,
    pub message: String,
}

impl Problem {
    /// A problem with the file as a whole (unreadable, say).
    pub fn file(message: String) -> Problem {
        Problem {
            key: None,
            line: None,
            message,
        }
    }

    /// A parse or type error from the TOML deserializer.
    pub fn from_toml(text: &str, err: &toml::de::Error) -> Problem {
        let span = err.span();
        let key = span.as_ref().and_then(|s| key_at(text, s.start));
        Problem {
            key,
            line: span.map(|s| line_of(text, s.start)),
            message: err.message().trim().to_string(),
        }
    }

    /// A validation problem with a known key; the line is looked up in the text.
    pub fn at_key(text: &str, key: &str, message: String) -> Problem {
        Problem {
            line: span_of_key(text, key).map(|s| line_of(text, s.start)),
            key: Some(key.to_string()),
            message,
        }
    }

    /// `path:line: key: message`, leaving out what is unknown.
    pub fn render(&self, path: &Path) -> String {
        let mut out = path.display().to_string();
        if let Some(line) = self.line {
            out.push_str(&format!(":{line}"));
        }
        out.push_str(": ");
        if let Some(key) = &self.key {
            out.push_str(key);
            out.push_str(": ");
        }
        out.push_str(&self.message);
        out
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The dotted key whose name or value covers `offset`, the deepest one if nested.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    let mut best: Option<(usize, String)> = None;
    walk_table(
        doc.get_ref(),
        &mut Vec::new(),
        &mut |path, key_span, value_span| {
            if contains(key_span, offset) || contains(value_span, offset) {
                let depth = path.len();
                if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
                    best = Some((depth, path.join(".")));
                }
            }
        },
    );
    best.map(|(_, key)| key)
}

/// Span of the key named by a dotted path (array-of-tables elements are searched in order).
fn span_of_key(text: &str, dotted: &str) -> Option<Range<usize>> {
    let doc = DeTable::parse(text).ok()?;
    let mut found = None;
    walk_table(doc.get_ref(), &mut Vec::new(), &mut |path, key_span, _| {
        if found.is_none() && path.join(".") == dotted {
            found = Some(key_span.clone());
        }
    });
    found
}

fn contains(span: &Range<usize>, offset: usize) -> bool {
    span.start <= offset && offset < span.end.max(span.start + 1)
}

type Visit<'a> = dyn FnMut(&[String], &Range<usize>, &Range<usize>) + 'a;

fn walk_table(table: &DeTable<'_>, path: &mut Vec<String>, visit: &mut Visit<'_>) {
    for (key, value) in table.iter() {
        path.push(key.get_ref().to_string());
        visit(path, &key.span(), &value.span());
        walk_value(value.get_ref(), path, visit);
        path.pop();
    }
}

fn walk_value(value: &DeValue<'_>, path: &mut Vec<String>, visit: &mut Visit<'_>) {
    match value {
        DeValue::Table(table) => walk_table(table, path, visit),
        DeValue::Array(items) => {
            for item in items.iter() {
                walk_value(item.get_ref(), path, visit);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_key_lines() {
        let text = "[collect]\ninterval = \"5s\"\n\n[export]\nlisten = \"x\"\n";
        assert_eq!(
            Problem::at_key(text, "export.listen", "bad".into()).line,
            Some(5)
        );
        assert_eq!(
            Problem::at_key(text, "collect.interval", "bad".into()).line,
            Some(2)
        );
        assert_eq!(Problem::at_key(text, "nope", "bad".into()).line, None);
    }

    #[test]
    fn renders_path_line_key_message() {
        let p = Problem {
            key: Some("collect.interval".into()),
            line: Some(2),
            message: "too short".into(),
        };
        assert_eq!(
            p.render(Path::new("c.toml")),
            "c.toml:2: collect.interval: too short"
        );
    }
}
