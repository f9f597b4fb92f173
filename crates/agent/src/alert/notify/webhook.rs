//! Generic webhook: Alertmanager's webhook payload, version "4", byte-for-byte in shape,
//! so any receiver written for Alertmanager (alerta, PagerDuty bridges, in-house hooks)
//! works unchanged.
//!
//! Shape (Alertmanager `notify/webhook`, `template.Data`): `receiver`, `status`, `alerts`
//! (each `status`, `labels`, `annotations`, `startsAt`, `endsAt`, `generatorURL`,
//! `fingerprint`), `groupLabels`, `commonLabels`, `commonAnnotations`, `externalURL`,
//! `version`, `groupKey`, `truncatedAlerts`. Times are Go's RFC 3339 with nanoseconds, and
//! a firing alert's `endsAt` is Go's zero time `0001-01-01T00:00:00Z`, as Alertmanager
//! hides an end that has not been reached.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::http::{Endpoint, EndpointError};
use super::kind::{Consumes, KindFacts, SecretUse};
use super::{Notifier, NotifyError, text};
use crate::alert::{AlertState, LabelSet, Notification};

/// Go's zero `time.Time` as `encoding/json` writes it.
pub(crate) const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// A bearer token, when the receiver wants one; no rate limit; fed groups.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: Some(SecretUse::Bearer),
    default_max_per_minute: 0,
    consumes: Consumes::Groups,
};

/// POSTs version-4 payloads to one URL, with an optional bearer token.
#[derive(Debug)]
pub struct WebhookNotifier {
    endpoint: Endpoint,
}

impl WebhookNotifier {
    /// `bearer`: sent as `Authorization: Bearer …` (from the receiver's `secret_env`).
    pub fn new(
        url: &str,
        bearer: Option<String>,
        timeout: Duration,
    ) -> Result<WebhookNotifier, EndpointError> {
        Ok(WebhookNotifier {
            endpoint: Endpoint::new(url, timeout)?.with_bearer(bearer),
        })
    }
}

impl Notifier for WebhookNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        if text::shown(notification).is_empty() {
            // Only pending alerts: nothing a person should be told yet.
            return Ok(());
        }
        // Serialized from the struct, not a `Value`, to keep Alertmanager's field order.
        let body = serde_json::to_vec(&message(notification)).map_err(|e| NotifyError::Drop {
            reason: format!("cannot encode the webhook payload: {e}"),
        })?;
        self.endpoint.post_json(None, &body, None)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Message<'a> {
    receiver: &'a str,
    status: &'static str,
    alerts: Vec<WebhookAlert<'a>>,
    group_labels: &'a LabelSet,
    common_labels: LabelSet,
    common_annotations: LabelSet,
    #[serde(rename = "externalURL")]
    external_url: &'a str,
    version: &'static str,
    group_key: &'a str,
    truncated_alerts: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WebhookAlert<'a> {
    status: &'static str,
    labels: &'a LabelSet,
    annotations: &'a LabelSet,
    starts_at: String,
    ends_at: String,
    #[serde(rename = "generatorURL")]
    generator_url: &'a str,
    fingerprint: String,
}

/// The version-4 payload of a notification (pending alerts left out: they were never
/// notified).
pub fn payload(notification: &Notification) -> serde_json::Value {
    serde_json::to_value(message(notification)).unwrap_or_default()
}

fn message(notification: &Notification) -> Message<'_> {
    let alerts = text::shown(notification)
        .into_iter()
        .map(|a| {
            let resolved = a.state == AlertState::Resolved;
            WebhookAlert {
                status: if resolved { "resolved" } else { "firing" },
                labels: &a.labels,
                annotations: &a.annotations,
                starts_at: go_time(a.starts_at.unwrap_or(a.active_at)),
                ends_at: match (resolved, a.ends_at) {
                    (true, Some(end)) => go_time(end),
                    // Resolved without a recorded end: the notification's time is the
                    // closest truth, and receivers need a real end to show "resolved".
                    (true, None) => go_time(notification.created_at),
                    (false, _) => GO_ZERO_TIME.to_string(),
                },
                generator_url: &notification.external_url,
                fingerprint: format!("{:016x}", a.fingerprint()),
            }
        })
        .collect();
    Message {
        receiver: &notification.receiver,
        status: notification.status(),
        alerts,
        group_labels: &notification.group_labels,
        common_labels: notification.common_labels(),
        common_annotations: notification.common_annotations(),
        external_url: &notification.external_url,
        version: "4",
        group_key: &notification.group_key,
        truncated_alerts: 0,
    }
}

/// A time as Go's `time.Time` marshals to JSON: RFC 3339, UTC as `Z`, nanoseconds with
/// trailing zeros removed.
pub(crate) fn go_time(t: DateTime<Utc>) -> String {
    let full = t.to_rfc3339_opts(SecondsFormat::Nanos, true);
    match full.split_once('.') {
        Some((seconds, fraction)) => {
            let digits = fraction.trim_end_matches('Z').trim_end_matches('0');
            if digits.is_empty() {
                format!("{seconds}Z")
            } else {
                format!("{seconds}.{digits}Z")
            }
        }
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_look_like_go() {
        let t = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .expect("time")
                .with_timezone(&Utc)
        };
        assert_eq!(go_time(t("2024-05-01T10:00:00Z")), "2024-05-01T10:00:00Z");
        assert_eq!(
            go_time(t("2024-05-01T10:00:00.120Z")),
            "2024-05-01T10:00:00.12Z"
        );
        assert_eq!(
            go_time(t("2024-05-01T10:00:00.000000007Z")),
            "2024-05-01T10:00:00.000000007Z"
        );
    }
}
