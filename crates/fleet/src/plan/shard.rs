//! The PromQL text of a piece: the matcher that picks a group of hosts, selectors with it,
//! and durations to the millisecond.

use std::ops::Range;

/// `label=~"host-a|host-b"` for the hosts in `range`: each name escaped for the regular
/// expression, then for the PromQL string. The group that holds the last host also takes
/// series without the label (an empty alternative: a missing label reads as ""), so the
/// groups together cover every series.
pub(crate) fn host_matcher(label: &str, hosts: &[String], range: Range<usize>) -> String {
    let last = range.end >= hosts.len();
    let mut names: Vec<String> = hosts
        .get(range)
        .unwrap_or_default()
        .iter()
        .map(|h| regex::escape(h))
        .collect();
    if last {
        names.push(String::new());
    }
    let pattern = names.join("|");
    format!("{label}=~\"{}\"", quote(&pattern))
}

/// `family{a,b}` with the non-empty matchers given, or `family` alone.
pub fn select(family: &str, matchers: &[&str]) -> String {
    let matchers: Vec<&str> = matchers.iter().copied().filter(|m| !m.is_empty()).collect();
    if matchers.is_empty() {
        family.to_string()
    } else {
        format!("{family}{{{}}}", matchers.join(","))
    }
}

/// A PromQL duration: whole seconds where it has no fraction (`604800s`), else milliseconds.
pub fn duration(millis: i64) -> String {
    let millis = millis.max(1);
    if millis % 1000 == 0 {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

/// A label value inside a PromQL double-quoted string.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
