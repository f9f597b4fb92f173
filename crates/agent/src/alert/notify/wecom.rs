//! WeCom (企业微信) group robot: a markdown message per notification — the title (status
//! and alert name), then per alert its severity in colour, where, summary, description
//! (numbers and reasons), runbook and advice.
//!
//! Limits (group robot guide): markdown `content` at most 4,096 bytes of UTF-8, cut here
//! with "… (N more alerts)"; 20 messages a minute per robot, which the delivery loop's
//! per-receiver rate limit respects. WeCom answers HTTP 200 with an `errcode`:
//! - retry: -1 (system busy; WeCom's global error codes say retry later) and 45009 ("api
//!   freq out of limit", the 20-a-minute limit: retried after a minute);
//! - drop: 93000 (invalid webhook URL or key), 40008 (invalid message type), 40058
//!   (invalid parameter, such as content over the limit), 44004 (empty content), and any
//!   other non-zero code.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::http::{BodyCheck, Endpoint, EndpointError, Reply, errcode_verdict};
use super::kind::{Consumes, KindFacts};
use super::text::{self, Facts};
use super::{Notifier, NotifyError};
use crate::alert::Notification;

/// Largest markdown content WeCom takes, in bytes of UTF-8.
pub(crate) const MAX_CONTENT_BYTES: usize = 4096;

/// WeCom's rate window: 20 messages per robot per minute.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// No secret: the `key` in the URL is the credential; 20 messages a minute per robot;
/// fed groups.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: None,
    default_max_per_minute: 20,
    consumes: Consumes::Groups,
};

#[derive(Debug)]
pub struct WeComNotifier {
    endpoint: Endpoint,
}

impl WeComNotifier {
    /// `url`: the robot's webhook (`https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…`).
    pub fn new(url: &str, timeout: Duration) -> Result<WeComNotifier, EndpointError> {
        Ok(WeComNotifier {
            endpoint: Endpoint::new(url, timeout)?,
        })
    }
}

impl Notifier for WeComNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        if text::shown(notification).is_empty() {
            // Only pending alerts: nothing a person should be told yet.
            return Ok(());
        }
        let content = text::fit(
            text::shown(notification).len(),
            MAX_CONTENT_BYTES,
            |k| markdown(notification, k),
            String::len,
        );
        // Not even the title and one line fit (an absurd title): cut, never send more
        // than WeCom takes.
        let content = text::truncate_bytes(&content, MAX_CONTENT_BYTES);
        let body = json!({"msgtype": "markdown", "markdown": {"content": content}}).to_string();
        self.endpoint
            .post_json(None, body.as_bytes(), Some(check as BodyCheck))
    }
}

/// The markdown content showing the first `shown` alerts. A 4 KB message holds few
/// alerts: each one's long fields are kept short.
pub fn markdown(notification: &Notification, shown: usize) -> String {
    text::markdown_message(notification, shown, "##", 1000, alert_markdown)
}

fn alert_markdown(facts: &Facts) -> String {
    // WeCom's markdown knows three font colours: warning (red-orange), info (green),
    // comment (grey).
    let badge = if !facts.firing {
        "<font color=\"info\">resolved</font>".to_string()
    } else if facts.severity == "critical" || facts.severity == "warning" {
        format!("<font color=\"warning\">{}</font>", facts.severity)
    } else {
        format!("<font color=\"comment\">{}</font>", facts.severity)
    };
    let mut lines = vec![format!("**{}** {badge}", facts.name)];
    lines.extend(facts.markdown_fields());
    lines.push(format!("<font color=\"comment\">{}</font>", facts.when));
    lines.join("\n")
}

/// WeCom's in-body verdict (see the module docs for the codes).
fn check(reply: &Reply, _now: DateTime<Utc>) -> Option<Result<(), NotifyError>> {
    errcode_verdict(reply, "WeCom", 45009, RATE_WINDOW)
}
