//! Notifiers: one small file per integration behind one trait.
//!
//! Each integration turns a [`Notification`] into its service's payload and sends it; its
//! error says whether trying again can help. Retrying, backoff, rate limits and counting
//! live outside the integrations (`alert::deliver`), and no integration imports another.
//! What they share lives here and in helper modules: [`http`] (the client, the one place
//! HTTP outcomes are classified, its secrets registered with [`crate::redact`]),
//! [`crate::retry_after`] (the wait a service asks for) and [`text`] (what a human-readable
//! message says, and cutting it to a service's size limit).
//!
//! [`build`] turns a `[[alerting.receivers]]` entry into a notifier, resolving `url_env`
//! and `secret_env` from the environment; [`kind`] holds what each receiver kind takes and
//! how it is fed, declared by each integration next to its code.
//!
//! What integrations expect of a [`Notification`]: pending alerts are never shown or sent
//! (a notification with nothing else is a no-op); firing and resolved alerts are told
//! apart by `state`, and a resolved alert's `ends_at` is when it resolved. An Alertmanager
//! receiver gets the whole current alert list on every resend, firing alerts with
//! `ends_at: None` (stamped send time + 4 × resend interval when sent; see
//! [`alertmanager`]). With `send_resolved = false`, dispatch (`alert::dispatch`) leaves
//! resolved alerts out (never for Alertmanager, whose alerts end only that way).

pub mod alertmanager;
pub mod dingtalk;
pub mod feishu;
pub mod http;
pub mod kind;
pub mod log;
pub mod slack;
pub mod text;
pub mod webhook;
pub mod wecom;

use std::time::Duration;

use super::Notification;
use crate::config::{Parsed, ReceiverConfig, ReceiverKind};

pub use http::{BodyCheck, EndpointError, Reply, classify, redacted_url, retry_after};

/// Delivers notifications to one receiver.
pub trait Notifier: Send + Sync {
    /// Sends one notification. Blocking, bounded by the receiver's timeout.
    fn send(&self, notification: &Notification) -> Result<(), NotifyError>;
}

/// Why a delivery failed, and whether to try again.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotifyError {
    /// Worth retrying (5xx, 429, a transport error, a chat service's rate-limit code);
    /// `after` is the wait the service asked for (`Retry-After`), if any.
    #[error("{reason} (will retry)")]
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    /// Retrying cannot help (other 4xx, a rejected payload, a bad token); dropped and counted.
    #[error("{reason} (dropped)")]
    Drop { reason: String },
}

/// What notifiers need beyond their receiver's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `[alerting] resend_interval`: Alertmanager receivers send firing alerts with
    /// `endsAt` four of these ahead.
    pub resend_interval: Duration,
}

impl Settings {
    pub fn from_config(alerting: &crate::config::AlertingConfig) -> Settings {
        Settings {
            resend_interval: alerting.resend_interval,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resend_interval: Duration::from_secs(60),
        }
    }
}

/// Builds the notifier of a receiver with default [`Settings`]; see [`build_with`].
pub fn build(
    receiver: &ReceiverConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn Notifier>, ReceiverError> {
    build_with(receiver, env, &Settings::default())
}

/// Builds the notifier of a receiver: resolves `url` / `url_env` and `secret_env` through
/// `env` (`|name| std::env::var(name).ok()` in the agent) and checks the URL. Errors name
/// the receiver and the missing variable, never a secret;
/// every problem of the entry is found in one pass, so `run` and `check-config`
/// (`cli::preflight`) report the same ones.
///
/// `secret_env` means what the kind's [`kind::KindFacts::secret`] says: the signing secret
/// for `feishu` and `dingtalk`, a bearer token for `webhook` and `alertmanager`; `slack`,
/// `wecom` and `log` take none (their URL is their credential), and setting one is an
/// error rather than silently ignored.
pub fn build_with(
    receiver: &ReceiverConfig,
    env: &dyn Fn(&str) -> Option<String>,
    settings: &Settings,
) -> Result<Box<dyn Notifier>, ReceiverError> {
    let kind = receiver.kind.valid().copied();
    let mut problems = Vec::new();
    let invalid = |option, message: String| ReceiverProblem {
        option,
        issue: ReceiverIssue::Invalid(message),
    };
    let from_env = |option, var: &str| match env(var) {
        Some(value) if !value.trim().is_empty() => Ok(value.trim().to_string()),
        Some(_) => Err(ReceiverProblem {
            option,
            issue: ReceiverIssue::Empty(var.to_string()),
        }),
        None => Err(ReceiverProblem {
            option,
            issue: ReceiverIssue::Unset(var.to_string()),
        }),
    };
    if let Parsed::Invalid { error, .. } = &receiver.kind {
        problems.push(invalid("kind", error.to_string()));
    }
    if receiver.timeout.is_zero() {
        problems.push(invalid("timeout", "must be more than 0s".into()));
    }
    let secret = match (receiver.secret_env.as_deref(), kind) {
        (None, _) => None,
        (Some(_), Some(kind)) if kind::facts(kind).secret.is_none() => {
            problems.push(invalid(
                "secret_env",
                format!("kind {kind} takes no secret_env (its URL carries the token)"),
            ));
            None
        }
        (Some(var), _) => from_env("secret_env", var)
            .map_err(|p| problems.push(p))
            .ok(),
    };
    // The URL and the option it came from; never quoted in messages (it may hold the token).
    // An unknown kind is checked as one that needs a URL, so its other problems show too.
    let url = match (&receiver.url, &receiver.url_env) {
        _ if kind.is_some_and(|k| !k.needs_url()) => None,
        (Some(_), Some(_)) => {
            problems.push(invalid("url_env", "set url or url_env, not both".into()));
            None
        }
        (Some(url), None) => match crate::config::url::check_http_url(url) {
            Ok(()) => Some(("url", url.trim().to_string())),
            Err(p) => {
                problems.push(invalid("url", format!("the URL {p}")));
                None
            }
        },
        (None, Some(var)) => match from_env("url_env", var) {
            Ok(url) => match crate::config::url::check_http_url(&url) {
                Ok(()) => Some(("url_env", url)),
                Err(p) => {
                    problems.push(invalid(
                        "url_env",
                        format!("the URL in environment variable {var} {p}"),
                    ));
                    None
                }
            },
            Err(p) => {
                problems.push(p);
                None
            }
        },
        (None, None) => {
            problems.push(invalid("url", "needs url or url_env".into()));
            None
        }
    };
    // Built even when another option failed, so what only the integration checks is
    // reported in the same pass; the notifier is then dropped.
    let built = match (kind, url) {
        (Some(ReceiverKind::Log), _) => {
            Some(Box::new(log::LogNotifier::new(&receiver.name)) as Box<dyn Notifier>)
        }
        (Some(kind), Some((option, url))) => {
            match construct(kind, &url, secret, receiver, settings) {
                Ok(notifier) => Some(notifier),
                Err(error) => {
                    let message = match (option, &receiver.url_env) {
                        // The integration's message may show parts of the URL: name the
                        // variable instead.
                        ("url_env", Some(var)) => {
                            format!("the URL in environment variable {var} is not usable")
                        }
                        _ => error.to_string(),
                    };
                    problems.push(invalid(option, message));
                    None
                }
            }
        }
        _ => None,
    };
    match built {
        Some(notifier) if problems.is_empty() => Ok(notifier),
        _ => Err(ReceiverError {
            receiver: receiver.name.clone(),
            problems,
        }),
    }
}

/// A receiver entry that cannot become a notifier: every problem found in it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("receiver {receiver:?}: {}", join_problems(.problems))]
pub struct ReceiverError {
    pub receiver: String,
    pub problems: Vec<ReceiverProblem>,
}

fn join_problems(problems: &[ReceiverProblem]) -> String {
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    shown.join("; ")
}

/// One thing wrong with a receiver entry, and the option it is about.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{option}: {issue}")]
pub struct ReceiverProblem {
    /// `url`, `url_env`, `secret_env`, `kind` or `timeout`.
    pub option: &'static str,
    pub issue: ReceiverIssue,
}

/// What is wrong; an unset variable is told apart because it may be set where the agent
/// runs (`check-config` warns, `run` refuses). No variant holds a variable's value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReceiverIssue {
    #[error("environment variable {0} is not set")]
    Unset(String),
    #[error("environment variable {0} is empty")]
    Empty(String),
    #[error("{0}")]
    Invalid(String),
}

/// The integration of `kind` posting to `url` (`log` ignores it: it writes to the log).
/// `send_resolved` is dispatch's to apply (`alert::dispatch`): it decides what a group's
/// notification holds, and Alertmanager receivers always hear of resolutions.
fn construct(
    kind: ReceiverKind,
    url: &str,
    secret: Option<String>,
    receiver: &ReceiverConfig,
    settings: &Settings,
) -> Result<Box<dyn Notifier>, EndpointError> {
    let timeout = receiver.timeout;
    Ok(match kind {
        ReceiverKind::Alertmanager => Box::new(alertmanager::AlertmanagerNotifier::new(
            url,
            secret,
            timeout,
            settings.resend_interval,
        )?),
        ReceiverKind::Webhook => Box::new(webhook::WebhookNotifier::new(url, secret, timeout)?),
        ReceiverKind::Slack => Box::new(slack::SlackNotifier::new(url, timeout)?),
        ReceiverKind::Feishu => Box::new(feishu::FeishuNotifier::new(url, secret, timeout)?),
        ReceiverKind::DingTalk => Box::new(dingtalk::DingTalkNotifier::new(url, secret, timeout)?),
        ReceiverKind::WeCom => Box::new(wecom::WeComNotifier::new(url, timeout)?),
        ReceiverKind::Log => Box::new(log::LogNotifier::new(&receiver.name)),
    })
}

/// base64(HMAC-SHA256(key, message)): the signature both Feishu and DingTalk use, with
/// different keys and messages.
pub(crate) fn hmac_sha256_base64(key: &[u8], message: &[u8]) -> String {
    use base64::Engine as _;
    use hmac::{KeyInit as _, Mac as _};
    // HMAC takes keys of any length, so this cannot fail; the fallback keeps it total.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(message);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}
