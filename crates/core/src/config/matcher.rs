//! Label matchers, Alertmanager's: `name=value`, `name!=value`, `name=~regex`,
//! `name!~regex`, as written in `[alerting.route] matchers`.
//!
//! A matcher is a configuration value (parsed once, when the file is read: see
//! [`super::Parsed`]), and the routing tree (`alert::route`) uses it as it is. It matches
//! plain label maps, so it needs nothing from alerting.

use std::collections::BTreeMap;
use std::str::FromStr;

use regex::Regex;

/// One label matcher.
#[derive(Debug, Clone)]
pub struct Matcher {
    name: String,
    op: MatchOp,
}

#[derive(Debug, Clone)]
enum MatchOp {
    Equal(String),
    NotEqual(String),
    /// Anchored like Alertmanager's (`^(?:…)$`).
    Regex(Regex),
    NotRegex(Regex),
}

/// Why a matcher's text is not a matcher.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MatcherError {
    #[error("expected name=value, name!=value, name=~regex or name!~regex")]
    NoOperator,
    #[error("{0:?} is not a label name")]
    LabelName(String),
    /// The regex's own message is part of this one (not a separate source), as it was
    /// before matchers were typed.
    #[error("bad regex {pattern:?}: {error}")]
    Regex {
        pattern: String,
        error: regex::Error,
    },
}

impl Matcher {
    /// Parses a matcher; values may be quoted (`severity="critical"`).
    pub fn parse(text: &str) -> Result<Matcher, MatcherError> {
        let text = text.trim();
        let (pos, op_len, kind) = ["=~", "!~", "!=", "="]
            .iter()
            .filter_map(|op| text.find(op).map(|p| (p, op.len(), *op)))
            .min_by_key(|(p, len, _)| (*p, usize::MAX - len))
            .ok_or(MatcherError::NoOperator)?;
        let name = text[..pos].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(MatcherError::LabelName(name.to_string()));
        }
        let raw = text[pos + op_len..].trim();
        let value = raw
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(raw)
            .to_string();
        let regex = |v: &str| {
            Regex::new(&format!("^(?:{v})$")).map_err(|error| MatcherError::Regex {
                pattern: v.to_string(),
                error,
            })
        };
        let op = match kind {
            "=" => MatchOp::Equal(value),
            "!=" => MatchOp::NotEqual(value),
            "=~" => MatchOp::Regex(regex(&value)?),
            _ => MatchOp::NotRegex(regex(&value)?),
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
        })
    }

    /// A missing label matches as the empty string, as in Alertmanager.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.name).map_or("", String::as_str);
        match &self.op {
            MatchOp::Equal(v) => value == v,
            MatchOp::NotEqual(v) => value != v,
            MatchOp::Regex(r) => r.is_match(value),
            MatchOp::NotRegex(r) => !r.is_match(value),
        }
    }
}

impl FromStr for Matcher {
    type Err = MatcherError;

    fn from_str(text: &str) -> Result<Matcher, MatcherError> {
        Matcher::parse(text)
    }
}

/// Same label, operator and value (a regex by its pattern): configurations compare equal
/// when they match the same way.
impl PartialEq for Matcher {
    fn eq(&self, other: &Matcher) -> bool {
        let same_op = match (&self.op, &other.op) {
            (MatchOp::Equal(a), MatchOp::Equal(b))
            | (MatchOp::NotEqual(a), MatchOp::NotEqual(b)) => a == b,
            (MatchOp::Regex(a), MatchOp::Regex(b))
            | (MatchOp::NotRegex(a), MatchOp::NotRegex(b)) => a.as_str() == b.as_str(),
            _ => false,
        };
        self.name == other.name && same_op
    }
}

#[cfg(test)]
mod tests;
