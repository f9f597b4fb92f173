//! DingTalk custom robot: a markdown message per notification — the title (status and
//! alert name) as heading and preview, then per alert its severity, where, summary,
//! description (numbers and reasons), runbook and advice.
//!
//! Signing (optional, the robot's "加签" security setting): `timestamp` is the send time
//! in milliseconds, `sign` = urlencode(base64(HMAC-SHA256(key = secret, message =
//! timestamp + "\n" + secret))), both added to the webhook URL's query. DingTalk rejects
//! timestamps more than an hour off, so the URL is signed when sent, never when queued.
//!
//! Limits: a robot may send 20 messages a minute (past that DingTalk throttles it for 10
//! minutes; the custom robot guide), which the delivery loop's per-receiver rate limit
//! respects; markdown text up to about 20,000 bytes, cut here with "… (N more alerts)".
//! DingTalk answers HTTP 200 with an `errcode`:
//! - retry: -1 (system busy; DingTalk's global error codes say retry later) and 130101
//!   ("send too fast, exceed 20 times per minute"; retried after the 10-minute throttle);
//! - drop: 300001 (access token does not exist), 310000 (security settings not met: sign
//!   mismatch, keyword missing, IP not whitelisted), and any other non-zero code.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::http::{BodyCheck, Endpoint, EndpointError, Reply, errcode_verdict};
use super::kind::{Consumes, KindFacts, SecretUse};
use super::text::{self, Facts, Tone};
use super::{Notifier, NotifyError, hmac_sha256_base64};
use crate::alert::Notification;

/// Largest markdown text sent.
pub(crate) const MAX_TEXT_BYTES: usize = 20_000;

/// How long DingTalk throttles a robot that sent more than 20 messages in a minute.
const THROTTLE: Duration = Duration::from_secs(10 * 60);

/// The signing secret ("加签"), when the robot has it on; 20 messages a minute (past it
/// DingTalk throttles the robot for ten minutes); fed groups.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: Some(SecretUse::Signing),
    default_max_per_minute: 20,
    consumes: Consumes::Groups,
};

pub struct DingTalkNotifier {
    endpoint: Endpoint,
    secret: Option<String>,
}

impl std::fmt::Debug for DingTalkNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DingTalkNotifier")
            .field("endpoint", &self.endpoint)
            .field("signed", &self.secret.is_some())
            .finish()
    }
}

impl DingTalkNotifier {
    /// `url`: the robot's webhook (`https://oapi.dingtalk.com/robot/send?access_token=…`).
    /// `secret`: the signing secret (`SEC…`), when the robot signs.
    pub fn new(
        url: &str,
        secret: Option<String>,
        timeout: Duration,
    ) -> Result<DingTalkNotifier, EndpointError> {
        let mut endpoint = Endpoint::new(url, timeout)?;
        if let Some(secret) = &secret {
            endpoint.redact_also(secret);
        }
        Ok(DingTalkNotifier { endpoint, secret })
    }
}

impl Notifier for DingTalkNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        if text::shown(notification).is_empty() {
            // Only pending alerts: nothing a person should be told yet.
            return Ok(());
        }
        let markdown = text::fit(
            text::shown(notification).len(),
            MAX_TEXT_BYTES,
            |k| markdown(notification, k),
            String::len,
        );
        let body = json!({
            "msgtype": "markdown",
            "markdown": {"title": text::title(notification), "text": markdown},
        })
        .to_string();
        let url = self
            .secret
            .as_deref()
            .map(|secret| signed_url(self.endpoint.url(), Utc::now(), secret));
        self.endpoint
            .post_json(url.as_deref(), body.as_bytes(), Some(check as BodyCheck))
    }
}

/// `sign` for a timestamp (milliseconds) and secret, before URL-encoding.
pub fn sign(timestamp_ms: i64, secret: &str) -> String {
    hmac_sha256_base64(
        secret.as_bytes(),
        format!("{timestamp_ms}\n{secret}").as_bytes(),
    )
}

fn signed_url(url: &str, now: DateTime<Utc>, secret: &str) -> String {
    let timestamp = now.timestamp_millis();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{separator}timestamp={timestamp}&sign={}",
        crate::redact::percent_encode(&sign(timestamp, secret))
    )
}

/// The markdown text showing the first `shown` alerts.
pub fn markdown(notification: &Notification, shown: usize) -> String {
    text::markdown_message(notification, shown, "###", 4000, alert_markdown)
}

fn alert_markdown(facts: &Facts) -> String {
    let mark = match (facts.firing, facts.severity.as_str()) {
        (false, _) => Tone::Resolved,
        (true, "critical") => Tone::Critical,
        (true, "warning") => Tone::Warning,
        _ => Tone::Info,
    };
    let status = if facts.firing { "" } else { " — resolved" };
    let mut lines = vec![format!(
        "#### {} {} ({}){status}",
        emoji(mark),
        facts.name,
        facts.severity
    )];
    lines.extend(facts.markdown_fields());
    lines.push(format!("*{}*", facts.when));
    lines.join("\n\n")
}

/// DingTalk's markdown has no colours: a coloured mark stands in.
fn emoji(tone: Tone) -> &'static str {
    match tone {
        Tone::Critical => "🔴",
        Tone::Warning => "🟠",
        Tone::Info => "🔵",
        Tone::Resolved => "✅",
    }
}

/// DingTalk's in-body verdict (see the module docs for the codes).
fn check(reply: &Reply, _now: DateTime<Utc>) -> Option<Result<(), NotifyError>> {
    errcode_verdict(reply, "DingTalk", 130101, THROTTLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_url_encoded() {
        assert_eq!(crate::redact::percent_encode("a+b/c=="), "a%2Bb%2Fc%3D%3D");
        let now = DateTime::from_timestamp_millis(1_700_000_000_123).expect("time");
        let url = signed_url("https://x/robot/send?access_token=t", now, "SECret");
        assert!(
            url.starts_with("https://x/robot/send?access_token=t&timestamp=1700000000123&sign=")
        );
        let url = signed_url("https://x/robot/send", now, "SECret");
        assert!(url.starts_with("https://x/robot/send?timestamp="));
    }
}
