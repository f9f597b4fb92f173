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
    pub(crate) fn from_toml(text: &str, err: &toml::de::Error) -> Problem {
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
                    best = Some((depth, dotted(path)));
                }
            }
        },
    );
    best.map(|(_, key)| key)
}

/// Span of the key named by a dotted path such as `alerting.receivers[1].url`; a key
/// that is absent (a missing option) is placed at its nearest written ancestor, so a
/// problem about what an entry lacks still points at that entry.
fn span_of_key(text: &str, key: &str) -> Option<Range<usize>> {
    let doc = DeTable::parse(text).ok()?;
    let mut spans: Vec<(String, Range<usize>)> = Vec::new();
    walk_table(doc.get_ref(), &mut Vec::new(), &mut |path, key_span, _| {
        spans.push((dotted(path), key_span.clone()));
    });
    let mut wanted = key;
    loop {
        if let Some((_, span)) = spans.iter().find(|(k, _)| k == wanted) {
            return Some(span.clone());
        }
        wanted = parent(wanted)?;
    }
}

/// `a.b[2].c` → `a.b[2]` → `a.b` → `a`; None at the top.
fn parent(key: &str) -> Option<&str> {
    key.rfind(['.', '[']).map(|at| &key[..at])
}

/// Path segments joined as written in messages: `alerting.receivers[1].url`.
fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        if !out.is_empty() && !segment.starts_with('[') {
            out.push('.');
        }
        out.push_str(segment);
    }
    out
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
            for (index, item) in items.iter().enumerate() {
                path.push(format!("[{index}]"));
                visit(path, &item.span(), &item.span());
                walk_value(item.get_ref(), path, visit);
                path.pop();
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
    fn finds_array_elements_by_index_and_absent_keys_at_their_entry() {
        let text = "[[alerting.receivers]]\nname = \"a\"\nurl = \"x\"\n\n\
                    [[alerting.receivers]]\nname = \"b\"\nurl = \"y\"\n\n\
                    [alerting.route]\nmatchers = [\"a=b\",\n  \"c=~(\"]\n";
        let line = |key: &str| Problem::at_key(text, key, String::new()).line;
        assert_eq!(line("alerting.receivers[0].url"), Some(3));
        assert_eq!(line("alerting.receivers[1].url"), Some(7));
        assert_eq!(line("alerting.receivers[1].timeout"), Some(5));
        assert_eq!(line("alerting.receivers[1]"), Some(5));
        assert_eq!(line("alerting.route.matchers[1]"), Some(11));
        assert_eq!(line("alerting.route.receiver"), Some(9));
    }

    #[test]
    fn toml_errors_inside_array_elements_name_the_element() {
        let text = "[[alerting.receivers]]\nname = \"a\"\nkind = \"log\"\n\
                    [[alerting.receivers]]\nname = \"b\"\nkind = \"log\"\nurll = \"y\"\n";
        let err = toml::from_str::<crate::config::Config>(text).unwrap_err();
        let p = Problem::from_toml(text, &err);
        assert_eq!(p.line, Some(7));
        assert_eq!(p.key.as_deref(), Some("alerting.receivers[1].urll"));
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
