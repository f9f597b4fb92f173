//! Alertmanager receiver: pushes alerts to `POST /api/v2/alerts` the way Prometheus does,
//! so Alertmanager routes, groups, silences and inhibits them with everything else.
//!
//! Alertmanager does not remember who sent an alert: a firing alert stays firing until its
//! `endsAt` passes, and a sender that goes quiet must not leave alerts firing forever. So
//! Prometheus re-sends every firing alert each minute with `endsAt` four intervals ahead
//! (missing three sends in a row resolves it), and re-sends resolved ones, with their real
//! `endsAt`, for 15 minutes. The notification for an Alertmanager receiver therefore
//! carries the whole current alert list, and this integration fills in `endsAt`:
//!
//! - a firing alert with `ends_at = None` (the usual case) gets *send time* + 4 × the
//!   resend interval — computed when sent, not when queued, so a notification that waited
//!   in the outbox through an outage still arrives with a future `endsAt`;
//! - a firing alert with `ends_at = Some(t)` is sent with `endsAt = t`, for a dispatcher
//!   that wants to decide itself;
//! - a resolved alert is sent with its real `ends_at` (the notification's time if unset).
//!
//! Pending alerts are never sent. Large lists go in batches, as Prometheus does.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::http::{Endpoint, EndpointError};
use super::kind::{Consumes, KindFacts, SecretUse};
use super::{Notifier, NotifyError};
use crate::alert::{AlertState, LabelSet, Notification};

/// Alerts per request; Prometheus' default `max_batch_size` for Alertmanager is 256.
const BATCH: usize = 256;

/// The API path alerts are posted to.
const ALERTS_PATH: &str = "/api/v2/alerts";

/// A bearer token for an Alertmanager behind an authenticating proxy; no rate limit of
/// its own; fed the whole alert list, which it groups, silences and inhibits itself.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: Some(SecretUse::Bearer),
    default_max_per_minute: 0,
    consumes: Consumes::AlertList,
};

#[derive(Debug)]
pub struct AlertmanagerNotifier {
    endpoint: Endpoint,
    resend_interval: Duration,
}

impl AlertmanagerNotifier {
    /// `url`: Alertmanager's base URL (`http://alertmanager:9093`, a path prefix allowed)
    /// or the full `…/api/v2/alerts` URL. `bearer`: sent as `Authorization: Bearer …`
    /// (for an Alertmanager behind an authenticating proxy). `resend_interval`: how often
    /// the dispatcher re-sends firing alerts (`[alerting] resend_interval`).
    pub fn new(
        url: &str,
        bearer: Option<String>,
        timeout: Duration,
        resend_interval: Duration,
    ) -> Result<AlertmanagerNotifier, EndpointError> {
        Ok(AlertmanagerNotifier {
            endpoint: Endpoint::new(&alerts_url(url), timeout)?.with_bearer(bearer),
            resend_interval,
        })
    }
}

/// `base` with `/api/v2/alerts` appended unless already there (before any query).
fn alerts_url(base: &str) -> String {
    let (path, query) = match base.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (base, None),
    };
    let path = path.trim_end_matches('/');
    let full = if path.ends_with(ALERTS_PATH) {
        path.to_string()
    } else {
        format!("{path}{ALERTS_PATH}")
    };
    match query {
        Some(q) => format!("{full}?{q}"),
        None => full,
    }
}

impl Notifier for AlertmanagerNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        let alerts = postable(notification, Utc::now(), self.resend_interval);
        for batch in alerts.chunks(BATCH) {
            let body = serde_json::to_vec(batch).map_err(|e| NotifyError::Drop {
                reason: format!("cannot encode alerts for Alertmanager: {e}"),
            })?;
            // One batch failing fails the notification; re-sending the batches that got
            // through is harmless (Alertmanager merges alerts by their labels).
            self.endpoint.post_json(None, &body, None)?;
        }
        Ok(())
    }
}

/// One alert as `POST /api/v2/alerts` takes it (`postableAlert`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostableAlert {
    pub labels: LabelSet,
    pub annotations: LabelSet,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// Left out when empty: Alertmanager validates it as a URI.
    #[serde(rename = "generatorURL", skip_serializing_if = "String::is_empty")]
    pub generator_url: String,
}

/// The alerts of a notification as Alertmanager takes them, sent at `now`.
pub fn postable(
    notification: &Notification,
    now: DateTime<Utc>,
    resend_interval: Duration,
) -> Vec<PostableAlert> {
    // Checked: a resend_interval of centuries is configuration, not a reason to panic;
    // RFC 3339 (what Alertmanager parses) ends with the year 9999.
    let last = DateTime::from_timestamp(253_402_300_799, 0).unwrap_or(now);
    let ends = resend_interval
        .checked_mul(4)
        .and_then(|ahead| chrono::Duration::from_std(ahead).ok())
        .and_then(|ahead| now.checked_add_signed(ahead))
        .map_or(last, |at| at.min(last));
    notification
        .alerts
        .iter()
        .filter(|a| a.state != AlertState::Pending)
        .map(|a| {
            let starts_at = a.starts_at.unwrap_or(a.active_at);
            let ends_at = match (a.state, a.ends_at) {
                (AlertState::Resolved, end) => end.unwrap_or(notification.created_at),
                (_, Some(end)) => end,
                (_, None) => ends,
            };
            PostableAlert {
                labels: a.labels.clone(),
                annotations: a.annotations.clone(),
                starts_at,
                // Alertmanager rejects an end before the start ("start time must be
                // before end time"); a clock step must not lose the alert.
                ends_at: ends_at.max(starts_at),
                generator_url: notification.external_url.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alerts_path_is_added_once() {
        assert_eq!(alerts_url("http://am:9093"), "http://am:9093/api/v2/alerts");
        assert_eq!(
            alerts_url("http://am:9093/prefix/"),
            "http://am:9093/prefix/api/v2/alerts"
        );
        assert_eq!(
            alerts_url("http://am:9093/api/v2/alerts"),
            "http://am:9093/api/v2/alerts"
        );
        assert_eq!(
            alerts_url("http://am:9093/?x=1"),
            "http://am:9093/api/v2/alerts?x=1"
        );
    }
}
