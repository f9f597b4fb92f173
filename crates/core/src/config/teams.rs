//! `[[teams]]`: who a GPU's holder belongs to.
//!
//! Waste is acted on by teams, not by pids: cost counters, the allocation series and the
//! fleet report speak of a team. A team is a name and glob patterns over what a holder is
//! known by — Kubernetes namespace, Unix user, Slurm account, host name. The first team
//! with a pattern matching the holder wins (file order, so a specific team goes before a
//! catch-all); a holder no team claims is [`UNASSIGNED`].
//!
//! Patterns are parsed when the file is read ([`super::Parsed`]), so a bad one is a
//! configuration problem with its key and line, and matching never parses text again.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use super::Parsed;

/// The team of a holder that no `[[teams]]` entry claims.
pub const UNASSIGNED: &str = "unassigned";

/// One `[[teams]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TeamConfig {
    /// The team's name, as the `team` label and the report write it.
    pub name: String,
    /// Kubernetes namespaces (glob patterns: `ml-*`).
    pub namespaces: Vec<Parsed<Glob>>,
    /// Unix users of the processes, or of the Slurm job.
    pub users: Vec<Parsed<Glob>>,
    /// Slurm accounts.
    pub slurm_accounts: Vec<Parsed<Glob>>,
    /// Host names (the `hostname` label): every holder on those hosts.
    pub hosts: Vec<Parsed<Glob>>,
    /// Receiver (`[[alerting.receivers]]` name) that gets the team's fleet report.
    pub receiver: Option<String>,
}

/// What a GPU's holder is known by; `None` where the source does not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holder<'a> {
    pub namespace: Option<&'a str>,
    pub user: Option<&'a str>,
    pub slurm_account: Option<&'a str>,
    pub host: Option<&'a str>,
}

impl TeamConfig {
    /// Whether any of the team's patterns matches what the holder is known by.
    pub fn claims(&self, holder: &Holder<'_>) -> bool {
        let any = |patterns: &[Parsed<Glob>], value: Option<&str>| {
            value.is_some_and(|v| {
                patterns
                    .iter()
                    .any(|p| p.valid().is_some_and(|g| g.matches(v)))
            })
        };
        any(&self.namespaces, holder.namespace)
            || any(&self.users, holder.user)
            || any(&self.slurm_accounts, holder.slurm_account)
            || any(&self.hosts, holder.host)
    }

    fn patterns(&self) -> [(&'static str, &[Parsed<Glob>]); 4] {
        [
            ("namespaces", &self.namespaces),
            ("users", &self.users),
            ("slurm_accounts", &self.slurm_accounts),
            ("hosts", &self.hosts),
        ]
    }
}

/// The team of a holder: the first entry that claims it, else [`UNASSIGNED`].
pub fn team_of<'t>(teams: &'t [TeamConfig], holder: &Holder<'_>) -> &'t str {
    teams
        .iter()
        .find(|t| t.claims(holder))
        .map_or(UNASSIGNED, |t| t.name.as_str())
}

/// A shell-style pattern: `*` any run of characters, `?` one character, `[…]` a class.
/// Matching is case-sensitive (namespaces and users are).
#[derive(Clone)]
pub struct Glob(glob::Pattern);

impl Glob {
    pub fn matches(&self, value: &str) -> bool {
        self.0.matches(value)
    }
}

impl FromStr for Glob {
    type Err = GlobError;
    fn from_str(text: &str) -> Result<Glob, GlobError> {
        if text.is_empty() {
            return Err(GlobError("an empty pattern matches nothing".into()));
        }
        glob::Pattern::new(text)
            .map(Glob)
            .map_err(|e| GlobError(format!("bad pattern {text:?}: {}", e.msg)))
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.0.as_str())
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Glob) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// Why a pattern is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct GlobError(String);

/// Value checks of `[[teams]]`, as `(dotted key, message)`. `receivers` are the names
/// of `[[alerting.receivers]]`.
pub(super) fn problems(teams: &[TeamConfig], receivers: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, team) in teams.iter().enumerate() {
        let key = |option: &str| format!("teams[{i}].{option}");
        let name = team.name.as_str();
        if name.trim().is_empty() {
            out.push((key("name"), "a team needs a name".into()));
        } else if name == UNASSIGNED {
            out.push((
                key("name"),
                format!("{UNASSIGNED:?} is the team of holders no entry claims"),
            ));
        } else if !names.insert(name) {
            out.push((key("name"), format!("team {name:?} is defined twice")));
        }
        let mut has_pattern = false;
        for (option, patterns) in team.patterns() {
            has_pattern |= !patterns.is_empty();
            for (j, pattern) in patterns.iter().enumerate() {
                if let Parsed::Invalid { error, .. } = pattern {
                    out.push((
                        format!("teams[{i}].{option}[{j}]"),
                        format!("team {name:?}: {error}"),
                    ));
                }
            }
        }
        if !has_pattern {
            out.push((
                format!("teams[{i}]"),
                format!(
                    "team {name:?} claims nothing: give namespaces, users, slurm_accounts or hosts"
                ),
            ));
        }
        if let Some(receiver) = &team.receiver
            && !receivers.contains(&receiver.as_str())
        {
            out.push((
                key("receiver"),
                format!("team {name:?}: no receiver named {receiver:?} in [[alerting.receivers]]"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests;
