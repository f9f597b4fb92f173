//! Feishu / Lark custom bot: an interactive card per notification — a header coloured by
//! severity (green when resolved) with the status and alert name, then one markdown block
//! per alert with where, summary, description (numbers and reasons), runbook and advice.
//!
//! Signing (optional, the bot's "signature verification"): `timestamp` is the send time in
//! seconds, `sign` = base64(HMAC-SHA256(key = timestamp + "\n" + secret, message = empty)),
//! both as strings in the JSON body. Feishu rejects timestamps more than an hour off, so a
//! body is signed when sent, never when queued.
//!
//! Limits (custom bot guide): a request body of at most 20 KB; 100 requests a minute and 5
//! a second per bot. Feishu answers most errors with a `code` in the body, under HTTP 200
//! or 400, so the body decides:
//! - retry: 11232 (custom bot rate limit: "frequency limited"; the guide warns of it at
//!   busy times such as on the hour) and 99991400 ("request trigger frequency limit", the
//!   Open Platform's rate limit, with the wait in `x-ogw-ratelimit-reset` seconds — see
//!   the Open Platform's "Rate limits" page);
//! - drop, as retrying the same request cannot help: 9499 (bad request: malformed or over
//!   20 KB), 19001 (invalid webhook token), 19021 (signature mismatch or timestamp more
//!   than an hour off), 19022 (IP not allowed), 19024 (keywords not found), and any other
//!   non-zero code.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::http::{BodyCheck, Endpoint, EndpointError, Reply, body_code, retry_after};
use super::kind::{Consumes, KindFacts, SecretUse};
use super::text::{self, Facts, Tone};
use super::{Notifier, NotifyError, hmac_sha256_base64};
use crate::alert::Notification;

/// Largest request body Feishu accepts ("20 KB"; counted as 20,000 bytes to be safe).
pub(crate) const MAX_BODY_BYTES: usize = 20_000;

/// Codes meaning "too many requests, try later".
const RETRY_CODES: [i64; 2] = [11232, 99991400];

/// The signing secret, when the bot has signature verification on; Feishu's limits (100 a
/// minute, 5 a second) are far above what groups send, so none here; fed groups.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: Some(SecretUse::Signing),
    default_max_per_minute: 0,
    consumes: Consumes::Groups,
};

pub struct FeishuNotifier {
    endpoint: Endpoint,
    secret: Option<String>,
}

impl std::fmt::Debug for FeishuNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuNotifier")
            .field("endpoint", &self.endpoint)
            .field("signed", &self.secret.is_some())
            .finish()
    }
}

impl FeishuNotifier {
    /// `url`: the bot's webhook (`https://open.feishu.cn/open-apis/bot/v2/hook/…`, or
    /// Lark's `open.larksuite.com`). `secret`: the signing secret, when the bot has
    /// signature verification on.
    pub fn new(
        url: &str,
        secret: Option<String>,
        timeout: Duration,
    ) -> Result<FeishuNotifier, EndpointError> {
        let mut endpoint = Endpoint::new(url, timeout)?;
        if let Some(secret) = &secret {
            endpoint.redact_also(secret);
        }
        Ok(FeishuNotifier { endpoint, secret })
    }
}

impl Notifier for FeishuNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        if text::shown(notification).is_empty() {
            // Only pending alerts: nothing a person should be told yet.
            return Ok(());
        }
        let now = Utc::now();
        let body = text::fit(
            text::shown(notification).len(),
            MAX_BODY_BYTES,
            |k| body(notification, k, self.secret.as_deref(), now),
            String::len,
        );
        self.endpoint
            .post_json(None, body.as_bytes(), Some(check as BodyCheck))
    }
}

/// `sign` for a timestamp (seconds) and secret.
pub fn sign(timestamp: i64, secret: &str) -> String {
    hmac_sha256_base64(format!("{timestamp}\n{secret}").as_bytes(), b"")
}

/// The request body showing the first `shown` alerts, signed when `secret` is set.
fn body(
    notification: &Notification,
    shown: usize,
    secret: Option<&str>,
    now: DateTime<Utc>,
) -> String {
    let mut message = card(notification, shown);
    if let Some(secret) = secret {
        let timestamp = now.timestamp();
        message["timestamp"] = json!(timestamp.to_string());
        message["sign"] = json!(sign(timestamp, secret));
    }
    message.to_string()
}

/// The card message showing the first `shown` alerts (unsigned).
pub fn card(notification: &Notification, shown: usize) -> Value {
    let alerts = text::shown(notification);
    let shown = shown.min(alerts.len());
    let mut elements = Vec::new();
    for (i, alert) in alerts[..shown].iter().enumerate() {
        if i > 0 {
            elements.push(json!({"tag": "hr"}));
        }
        elements.push(json!({
            "tag": "div",
            "text": {"tag": "lark_md", "content": markdown(&Facts::of(alert, 4000))},
        }));
    }
    let mut footer = Vec::new();
    if shown < alerts.len() {
        footer.push(text::more_marker(alerts.len() - shown));
    }
    if !notification.external_url.is_empty() {
        footer.push(format!("[All alerts]({})", notification.external_url));
    }
    if !footer.is_empty() {
        elements.push(json!({
            "tag": "note",
            "elements": [{"tag": "lark_md", "content": footer.join(" · ")}],
        }));
    }
    json!({
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": true},
            "header": {
                "title": {"tag": "plain_text", "content": text::title(notification)},
                "template": template(text::tone(notification)),
            },
            "elements": elements,
        },
    })
}

/// Card header colours (Feishu's `template` names).
fn template(tone: Tone) -> &'static str {
    match tone {
        Tone::Critical => "red",
        Tone::Warning => "orange",
        Tone::Info => "blue",
        Tone::Resolved => "green",
    }
}

fn markdown(facts: &Facts) -> String {
    let status = if facts.firing { "" } else { " — resolved" };
    let mut lines = vec![format!("**{}** ({}){status}", facts.name, facts.severity)];
    lines.extend(facts.markdown_fields());
    lines.push(facts.when.clone());
    lines.join("\n")
}

/// Feishu's in-body verdict (see the module docs for the codes).
fn check(reply: &Reply, now: DateTime<Utc>) -> Option<Result<(), NotifyError>> {
    // Current replies carry `code`; older ones only `StatusCode`.
    let (code, message) = body_code(reply, "code", "msg")
        .or_else(|| body_code(reply, "StatusCode", "StatusMessage"))?;
    if code == 0 && reply.status < 300 {
        return Some(Ok(()));
    }
    if code == 0 {
        return None;
    }
    let reason = format!("Feishu code {code}: {message}");
    if RETRY_CODES.contains(&code) || reply.status == 429 {
        let after = retry_after(reply.header("retry-after"), now).or_else(|| {
            reply
                .header("x-ogw-ratelimit-reset")
                .and_then(|v| v.trim().parse().ok())
                .map(Duration::from_secs)
        });
        return Some(Err(NotifyError::Retry { reason, after }));
    }
    Some(Err(NotifyError::Drop { reason }))
}
