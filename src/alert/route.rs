//! Routing and grouping with Alertmanager's semantics: a tree of routes with label
//! matchers sends each alert to receivers; alerts sharing the `group_by` labels form an
//! aggregation group, notified after `group_wait`, again after `group_interval` when the
//! group changed, and every `repeat_interval` while it keeps firing unchanged.

use regex::Regex;

use super::LabelSet;

/// One label matcher: `name=value`, `name!=value`, `name=~regex`, `name!~regex`.
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

impl Matcher {
    /// Parses a matcher; values may be quoted (`severity="critical"`).
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let text = text.trim();
        let (pos, op_len, kind) = ["=~", "!~", "!=", "="]
            .iter()
            .filter_map(|op| text.find(op).map(|p| (p, op.len(), *op)))
            .min_by_key(|(p, len, _)| (*p, usize::MAX - len))
            .ok_or_else(|| {
                "expected name=value, name!=value, name=~regex or name!~regex".to_string()
            })?;
        let name = text[..pos].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{name:?} is not a label name"));
        }
        let raw = text[pos + op_len..].trim();
        let value = raw
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(raw)
            .to_string();
        let regex = |v: &str| {
            Regex::new(&format!("^(?:{v})$")).map_err(|e| format!("bad regex {v:?}: {e}"))
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
    pub fn matches(&self, labels: &LabelSet) -> bool {
        let value = labels.get(&self.name).map_or("", String::as_str);
        match &self.op {
            MatchOp::Equal(v) => value == v,
            MatchOp::NotEqual(v) => value != v,
            MatchOp::Regex(r) => r.is_match(value),
            MatchOp::NotRegex(r) => !r.is_match(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matchers_parse_and_match() {
        let l = labels(&[("severity", "critical"), ("gpu", "3")]);
        assert!(Matcher::parse("severity=critical").unwrap().matches(&l));
        assert!(
            Matcher::parse("severity = \"critical\"")
                .unwrap()
                .matches(&l)
        );
        assert!(!Matcher::parse("severity!=critical").unwrap().matches(&l));
        assert!(Matcher::parse("gpu=~[0-3]").unwrap().matches(&l));
        assert!(!Matcher::parse("gpu=~3.+").unwrap().matches(&l), "anchored");
        assert!(
            Matcher::parse("team!~.+").unwrap().matches(&l),
            "missing label is empty"
        );
        assert!(Matcher::parse("nonsense").is_err());
        assert!(Matcher::parse("gpu=~(").is_err());
    }
}
