//! What `run` checks before it starts, as the one function `check-config` runs too.
//!
//! Beyond the value checks of [`Config::parse`], `run` builds parts that can refuse a
//! configuration: the risk model file, the rule set, the routing tree, each receiver's
//! notifier (its URL, and the URL and secret read from the environment), the advice API
//! key and the web configuration file (TLS certificates, users). [`check`] calls the same builders with the same inputs — no network, no thread, no
//! file written — and turns each refusal into a [`Problem`] with its key and line, so
//! `check-config` says ok exactly when `run` would start.
//!
//! Environment variables that `*_env` options name but that are not set are kept apart
//! ([`Checked::unset_env`]): `run` refuses them, `check-config` warns, since they may well
//! be set where the agent runs. When set, their values are checked like any other, and a
//! value never appears in a message (a URL may carry its token): the variable is named.
//!
//! It lives in the command line layer, not beside the configuration it checks, because it
//! builds the engine, the rules, the route, the notifiers and the advice key: parts of
//! every layer above the configuration, which itself imports none of them.

use std::path::Path;

use crate::advice::AdviceError;
use crate::alert::notify::{ReceiverIssue, Settings, build_with};
use crate::config::{Config, ConfigError, Problem};

/// Reads the variables `*_env` options name: `std::env::var` in the agent, a table in
/// tests.
pub(crate) type Env<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The process environment, as `run` reads it. A value that is not UTF-8 counts as unset.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What checking a configuration for `run` found.
#[derive(Debug)]
pub struct Checked {
    /// The configuration, when the text is TOML of the right shape (even if its values
    /// are wrong).
    pub config: Option<Config>,
    /// What `run` refuses wherever it starts, in file order.
    pub errors: Vec<Problem>,
    /// `*_env` options naming a variable that is not set, in file order.
    pub unset_env: Vec<Problem>,
    /// The warning about `[export] web_config`'s certificate (expired, or ending within 14
    /// days) that `run` logs when it starts serving it; `check-config` prints it.
    pub certificate: Option<String>,
}

impl Checked {
    /// The configuration `run` may start with, or every problem, unset variables
    /// included, as one error.
    pub(crate) fn into_runnable(self, path: &Path) -> Result<Config, ConfigError> {
        match self.config {
            Some(config) if self.errors.is_empty() && self.unset_env.is_empty() => Ok(config),
            _ => {
                let mut problems = self.errors;
                problems.extend(self.unset_env);
                sort_by_line(&mut problems);
                Err(ConfigError {
                    path: path.to_owned(),
                    problems,
                })
            }
        }
    }
}

/// Checks configuration text as `run` would, reading variables through `env`.
pub fn check(text: &str, env: &Env<'_>) -> Checked {
    let (config, mut errors) = match Config::parse_with_problems(text) {
        Ok(parsed) => parsed,
        Err(errors) => {
            return Checked {
                config: None,
                errors,
                unset_env: Vec::new(),
                certificate: None,
            };
        }
    };
    let mut unset_env = Vec::new();
    // Parts whose values already failed are not built: their builder would only say the
    // same thing again.
    let failed: Vec<String> = errors.iter().filter_map(|p| p.key.clone()).collect();
    let built = |prefix: &str| !failed.iter().any(|key| is_under(key, prefix));

    if let Err(e) = crate::engine::EngineConfig::from_config(&config) {
        errors.push(Problem::at_key(text, "risk.model", format!("{e:#}")));
    }
    if built("alerting.rules") {
        errors.extend(rule_problems(text, &config));
    }
    if built("alerting.route") {
        if let Err(e) = crate::alert::route::Route::compile(&config.alerting.route) {
            errors.push(Problem::at_key(text, "alerting.route", e.to_string()));
        }
    }
    let settings = Settings::from_config(&config.alerting);
    for (i, receiver) in config.alerting.receivers.iter().enumerate() {
        let entry = format!("alerting.receivers[{i}]");
        if !built(&entry) {
            continue;
        }
        let Err(e) = build_with(receiver, env, &settings) else {
            continue;
        };
        for p in e.problems {
            let key = format!("{entry}.{}", p.option);
            let message = format!("receiver {:?}: {}", receiver.name, p.issue);
            let problem = Problem::at_key(text, &key, message);
            match p.issue {
                ReceiverIssue::Unset(_) => unset_env.push(problem),
                ReceiverIssue::Empty(_) | ReceiverIssue::Invalid(_) => errors.push(problem),
            }
        }
    }
    let mut certificate = None;
    if let Some(path) = &config.export.web_config {
        match crate::webconfig::WebConfig::load(path) {
            Ok(web) => certificate = web.certificate_warning(),
            Err(e) => errors.push(Problem::at_key(text, "export.web_config", e.to_string())),
        }
    }
    match crate::advice::api_key(&config.advice, env) {
        Ok(_) => {}
        Err(AdviceError::MissingApiKey { env, base_url }) => unset_env.push(Problem::at_key(
            text,
            "advice.api_key_env",
            format!("environment variable {env} is not set (it holds the API key for {base_url})"),
        )),
        Err(AdviceError::EmptyApiKey { env }) => errors.push(Problem::at_key(
            text,
            "advice.api_key_env",
            format!("environment variable {env} is empty"),
        )),
        Err(AdviceError::NoKeyVariable) => errors.push(Problem::at_key(
            text,
            "advice.api_key_env",
            "is empty: name the environment variable that holds the API key".into(),
        )),
        Err(other) => errors.push(Problem::at_key(text, "advice", other.to_string())),
    }
    sort_by_line(&mut errors);
    sort_by_line(&mut unset_env);
    Checked {
        config: Some(config),
        errors,
        unset_env,
        certificate,
    }
}

/// The rule set's refusal, at the entry that causes it. Entries apply in order (a later
/// one may tune a rule an earlier one added), so the culprit is the first entry whose
/// prefix of the list no longer builds.
fn rule_problems(text: &str, config: &Config) -> Option<Problem> {
    let threshold = config.risk.threshold;
    let rules = &config.alerting.rules;
    let message = crate::alert::rules::from_config(threshold, rules).err()?;
    let culprit = (0..rules.len())
        .find(|&i| crate::alert::rules::from_config(threshold, &rules[..=i]).is_err());
    let key = match culprit {
        Some(i) => format!("alerting.rules[{i}]"),
        None => "alerting.rules".to_string(),
    };
    Some(Problem::at_key(text, &key, message.to_string()))
}

/// `key` is `prefix` or one of its options or entries (`prefix.x`, `prefix[2]`).
fn is_under(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// File order; problems without a line (the file as a whole) last.
fn sort_by_line(problems: &mut [Problem]) {
    problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
}

#[cfg(test)]
mod tests;
