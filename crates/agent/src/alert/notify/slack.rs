//! Slack incoming webhook: one message per notification, an attachment coloured by
//! severity (green when resolved) holding Block Kit blocks — a header with the status and
//! alert name, then one section per alert with where, summary, description (the numbers
//! and reasons), runbook and advice.
//!
//! Slack's limits (Block Kit reference): at most 50 blocks per message, section text at
//! most 3,000 characters, header text at most 150, top-level `text` at most 40,000. Past
//! 48 alerts the last block says how many more there are. Incoming webhooks answer errors
//! with HTTP statuses (400 `invalid_payload`, 403, 404 `channel_not_found`, 410
//! `channel_is_archived`, 429 with `Retry-After`, 5xx), so the status decides alone.

use std::time::Duration;

use serde_json::{Value, json};

use super::http::{Endpoint, EndpointError};
use super::kind::{Consumes, KindFacts};
use super::text::{self, Facts, Tone};
use super::{Notifier, NotifyError};
use crate::alert::Notification;

const MAX_BLOCKS: usize = 50;
const MAX_SECTION_CHARS: usize = 3000;
const MAX_HEADER_CHARS: usize = 150;
const MAX_TEXT_CHARS: usize = 40_000;

/// No secret: the incoming webhook's URL is its credential; Slack's 429s carry their own
/// `Retry-After`, so no rate limit here; fed groups.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: None,
    default_max_per_minute: 0,
    consumes: Consumes::Groups,
};

#[derive(Debug)]
pub struct SlackNotifier {
    endpoint: Endpoint,
}

impl SlackNotifier {
    /// `url`: the incoming webhook URL (`https://hooks.slack.com/services/…`).
    pub fn new(url: &str, timeout: Duration) -> Result<SlackNotifier, EndpointError> {
        Ok(SlackNotifier {
            endpoint: Endpoint::new(url, timeout)?,
        })
    }
}

impl Notifier for SlackNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        if text::shown(notification).is_empty() {
            // Only pending alerts: nothing a person should be told yet.
            return Ok(());
        }
        let body = payload(notification).to_string();
        self.endpoint.post_json(None, body.as_bytes(), None)
    }
}

/// The message for a notification.
pub fn payload(notification: &Notification) -> Value {
    let alerts = text::shown(notification);
    let title = text::title(notification);
    let header = json!({
        "type": "header",
        "text": {"type": "plain_text", "text": text::truncate_chars(&title, MAX_HEADER_CHARS)},
    });
    let mut blocks = vec![header];
    // Header + sections + (maybe) the "more" block.
    let room = MAX_BLOCKS - 2;
    let shown = alerts.len().min(room);
    for alert in &alerts[..shown] {
        blocks.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": section(&Facts::of(alert, 1200))},
        }));
    }
    let mut footer = Vec::new();
    if shown < alerts.len() {
        footer.push(text::more_marker(alerts.len() - shown));
    }
    if !notification.external_url.is_empty() {
        footer.push(format!(
            "<{}|All alerts>",
            escape(&notification.external_url)
        ));
    }
    if !footer.is_empty() {
        blocks.push(json!({
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": footer.join(" · ")}],
        }));
    }
    json!({
        // What notifications and screen readers show.
        "text": text::truncate_chars(&title, MAX_TEXT_CHARS),
        "attachments": [{"color": colour(text::tone(notification)), "blocks": blocks}],
    })
}

fn colour(tone: Tone) -> &'static str {
    match tone {
        Tone::Critical => "#d63232",
        Tone::Warning => "#e8a317",
        Tone::Info => "#439fe0",
        Tone::Resolved => "#2eb67d",
    }
}

/// One alert in Slack's mrkdwn.
fn section(facts: &Facts) -> String {
    let status = if facts.firing { "" } else { " — resolved" };
    let mut lines = vec![format!(
        "*{}* ({}){status}",
        escape(&facts.name),
        escape(&facts.severity)
    )];
    if !facts.location.is_empty() {
        lines.push(escape(&facts.location));
    }
    let mut field = |label: &str, value: &Option<String>| {
        if let Some(v) = value {
            lines.push(format!("*{label}:* {}", escape(v)));
        }
    };
    field("Summary", &facts.summary);
    field("Description", &facts.description);
    field("Runbook", &facts.runbook);
    field("Advice", &facts.advice);
    lines.push(format!("_{}_", facts.when));
    text::truncate_chars(&lines.join("\n"), MAX_SECTION_CHARS)
}

/// Slack's mrkdwn control characters (`&`, `<`, `>`), escaped as its docs ask.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
