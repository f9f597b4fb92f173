//! The routing tree, Alertmanager's: a route matches alerts by its label matchers and
//! sends them to its receiver, unless a child route matches them first; a child inherits
//! every option it leaves unset. Compiled once from `[alerting.route]`, shared by dispatch
//! and the advice digest.
//!
//! The matchers are configuration values ([`crate::config::Matcher`], parsed when the file
//! was read); what happens to the alerts a route sends on (grouping and its timers) is
//! [`super::dispatch`].

use std::time::Duration;

use super::LabelSet;
use crate::config::{
    DEFAULT_GROUP_BY, DEFAULT_GROUP_INTERVAL, DEFAULT_GROUP_WAIT, DEFAULT_REPEAT_INTERVAL, Matcher,
    MatcherError, Parsed, RouteConfig,
};

/// A compiled route: unset options inherited from the parent.
#[derive(Debug, Clone)]
pub struct Route {
    pub receiver: String,
    matchers: Vec<Matcher>,
    pub group_by: Vec<String>,
    pub group_wait: Duration,
    pub group_interval: Duration,
    pub repeat_interval: Duration,
    continue_matching: bool,
    children: Vec<Route>,
    /// Position in the tree ("0", "0.2", …): part of group keys.
    pub(super) id: String,
}

/// A route that cannot be compiled: a matcher whose text did not parse. A configuration
/// that loaded has none (its value checks refuse them, with key and line); this is for
/// route configurations built otherwise.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("matcher {text:?}: {error}")]
pub struct RouteError {
    /// The matcher as written.
    pub text: String,
    pub error: MatcherError,
}

impl Route {
    /// Compiles `[alerting.route]`.
    pub fn compile(config: &RouteConfig) -> Result<Route, RouteError> {
        let root = Route {
            receiver: config.receiver.clone(),
            matchers: Vec::new(),
            group_by: config
                .group_by
                .clone()
                .unwrap_or_else(|| DEFAULT_GROUP_BY.map(String::from).to_vec()),
            group_wait: config.group_wait.unwrap_or(DEFAULT_GROUP_WAIT),
            group_interval: config.group_interval.unwrap_or(DEFAULT_GROUP_INTERVAL),
            repeat_interval: config.repeat_interval.unwrap_or(DEFAULT_REPEAT_INTERVAL),
            continue_matching: false,
            children: Vec::new(),
            id: "0".into(),
        };
        Route::fill(root, config)
    }

    fn fill(mut route: Route, config: &RouteConfig) -> Result<Route, RouteError> {
        route.matchers = config
            .matchers
            .iter()
            .map(|m| match m {
                Parsed::Valid(matcher) => Ok(matcher.clone()),
                Parsed::Invalid { text, error } => Err(RouteError {
                    text: text.clone(),
                    error: error.clone(),
                }),
            })
            .collect::<Result<_, _>>()?;
        for (i, child) in config.routes.iter().enumerate() {
            let inherited = Route {
                receiver: if child.receiver.is_empty() {
                    route.receiver.clone()
                } else {
                    child.receiver.clone()
                },
                matchers: Vec::new(),
                group_by: child
                    .group_by
                    .clone()
                    .unwrap_or_else(|| route.group_by.clone()),
                group_wait: child.group_wait.unwrap_or(route.group_wait),
                group_interval: child.group_interval.unwrap_or(route.group_interval),
                repeat_interval: child.repeat_interval.unwrap_or(route.repeat_interval),
                continue_matching: child.continue_matching,
                children: Vec::new(),
                id: format!("{}.{i}", route.id),
            };
            route.children.push(Route::fill(inherited, child)?);
        }
        Ok(route)
    }

    /// The routes an alert with `labels` goes to, as Alertmanager's `Route.Match`: the
    /// deepest matching routes, siblings after a match only with `continue`.
    pub fn matches(&self, labels: &LabelSet) -> Vec<&Route> {
        if !self.matchers.iter().all(|m| m.matches(labels)) {
            return Vec::new();
        }
        let mut all = Vec::new();
        for child in &self.children {
            let found = child.matches(labels);
            let matched = !found.is_empty();
            all.extend(found);
            if matched && !child.continue_matching {
                break;
            }
        }
        if all.is_empty() {
            all.push(self);
        }
        all
    }
}

#[cfg(test)]
mod tests;
