//! Notifiers: one small file per integration behind one trait.
//!
//! Each integration turns a [`Notification`] into its service's payload and sends it; its
//! error says whether trying again can help. Retrying, backoff, rate limits and counting
//! live outside the integrations (`alert::deliver`), and no integration imports another.
//! What they share lives here and in helper modules: [`http`] (the client, the one place
//! HTTP outcomes are classified, its secrets registered with [`crate::redact`]),
//! [`retry_after`] (the wait a service asks for) and [`text`] (what a human-readable
//! message says, and cutting it to a service's size limit).
//!
//! [`build`] turns a `[[alerting.receivers]]` entry into a notifier, resolving `url_env`
//! and `secret_env` from the environment.
//!
//! What integrations expect of a [`Notification`]: pending alerts are never shown or sent
//! (a notification with nothing else is a no-op); firing and resolved alerts are told
//! apart by `state`, and a resolved alert's `ends_at` is when it resolved. An Alertmanager
//! receiver gets the whole current alert list on every resend, firing alerts with
//! `ends_at: None` (stamped send time + 4 × resend interval when sent; see
//! [`alertmanager`]). With `send_resolved = false`, [`build`] leaves resolved alerts out
//! (never for Alertmanager, whose alerts end only that way).

pub mod alertmanager;
pub mod dingtalk;
pub mod feishu;
pub mod http;
pub mod log;
pub mod retry_after;
pub mod slack;
pub mod text;
pub mod webhook;
pub mod wecom;

use std::time::Duration;

use super::Notification;
use crate::config::ReceiverConfig;

pub use http::{BodyCheck, Reply, classify, redacted_url, retry_after};

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
) -> Result<Box<dyn Notifier>, String> {
    build_with(receiver, env, &Settings::default())
}

/// Builds the notifier of a receiver: resolves `url` / `url_env` and `secret_env` through
/// `env` (`|name| std::env::var(name).ok()` in the agent), checks the URL, and applies
/// `send_resolved`. Errors name the receiver and the missing variable, never a secret.
///
/// `secret_env` means: the signing secret for `feishu` and `dingtalk`, a bearer token for
/// `webhook` and `alertmanager`; `slack`, `wecom` and `log` take none (their URL is their
/// credential), and setting one is an error rather than silently ignored.
pub fn build_with(
    receiver: &ReceiverConfig,
    env: &dyn Fn(&str) -> Option<String>,
    settings: &Settings,
) -> Result<Box<dyn Notifier>, String> {
    let name = &receiver.name;
    let kind = receiver.kind.as_str();
    let from_env = |var: &str, what: &str| -> Result<String, String> {
        match env(var) {
            Some(value) if !value.trim().is_empty() => Ok(value.trim().to_string()),
            Some(_) => Err(format!(
                "receiver {name:?}: environment variable {var} ({what}) is empty"
            )),
            None => Err(format!(
                "receiver {name:?}: environment variable {var} ({what}) is not set"
            )),
        }
    };
    let secret = receiver
        .secret_env
        .as_deref()
        .map(|var| from_env(var, "secret_env"))
        .transpose()?;
    if secret.is_some() && matches!(kind, "slack" | "wecom" | "log") {
        return Err(format!(
            "receiver {name:?}: kind {kind} takes no secret_env (its URL carries the token)"
        ));
    }
    let timeout = receiver.timeout;
    let notifier: Box<dyn Notifier> = if kind == "log" {
        Box::new(log::LogNotifier::new(name))
    } else {
        let url = match (&receiver.url, &receiver.url_env) {
            (Some(_), Some(_)) => {
                return Err(format!("receiver {name:?}: set url or url_env, not both"));
            }
            (Some(url), None) => url.trim().to_string(),
            (None, Some(var)) => from_env(var, "url_env")?,
            (None, None) => return Err(format!("receiver {name:?} needs url or url_env")),
        };
        let built: Result<Box<dyn Notifier>, String> =
            match kind {
                "alertmanager" => alertmanager::AlertmanagerNotifier::new(
                    &url,
                    secret,
                    timeout,
                    settings.resend_interval,
                )
                .map(|n| Box::new(n) as Box<dyn Notifier>),
                "webhook" => webhook::WebhookNotifier::new(&url, secret, timeout)
                    .map(|n| Box::new(n) as Box<dyn Notifier>),
                "slack" => slack::SlackNotifier::new(&url, timeout)
                    .map(|n| Box::new(n) as Box<dyn Notifier>),
                "feishu" => feishu::FeishuNotifier::new(&url, secret, timeout)
                    .map(|n| Box::new(n) as Box<dyn Notifier>),
                "dingtalk" => dingtalk::DingTalkNotifier::new(&url, secret, timeout)
                    .map(|n| Box::new(n) as Box<dyn Notifier>),
                "wecom" => wecom::WeComNotifier::new(&url, timeout)
                    .map(|n| Box::new(n) as Box<dyn Notifier>),
                other => Err(format!(
                    "kind {other:?} is not one of {}",
                    crate::config::RECEIVER_KINDS.join(", ")
                )),
            };
        built.map_err(|e| format!("receiver {name:?}: {e}"))?
    };
    // `send_resolved` is the dispatcher's to apply (`alert::route`): it decides what a
    // group's notification holds, and Alertmanager receivers always hear of resolutions.
    Ok(notifier)
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
