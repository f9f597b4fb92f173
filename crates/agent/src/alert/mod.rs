//! Alerting: findings become alerts with a Prometheus-like lifecycle, alerts become
//! notifications routed and grouped the way Alertmanager does it, and notifications are
//! delivered durably through an outbox to Alertmanager and chat receivers.
//!
//! Split along Alertmanager's lines, each module one job:
//! - [`rules`]: the condition language, the default rule table, tuning from config and
//!   evaluation over findings; pure, time from the findings;
//! - [`book`]: the alert lifecycle (pending → firing → resolved) and inhibition;
//! - [`route`]: the routing tree (its label matchers are configuration values,
//!   [`crate::config::Matcher`]);
//! - [`dispatch`]: aggregation groups and their timers, and what each receiver gets, given
//!   the book and what it inhibits;
//! - [`alerting`]: the agent's alerting stage tying rules, book and dispatch together,
//!   persisted; replay runs it without dispatch;
//! - [`notify`]: one file per integration behind [`notify::Notifier`], each with its
//!   kind's facts, HTTP outcome classification in one place;
//! - [`outbox`]: the crash-safe store notifications wait in until delivered;
//! - [`deliver`]: the delivery loop with retries, backoff and rate limits;
//! - [`outgoing`]: advice for critical notifications (never blocking them), then delivery.

pub mod alerting;
pub mod book;
pub mod deliver;
pub mod dispatch;
pub mod notify;
pub mod outbox;
pub mod outgoing;
pub mod route;
pub mod rules;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Label or annotation names to values, sorted (the order fingerprints and payloads use).
pub type LabelSet = BTreeMap<String, String>;

/// Where an alert is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    /// The condition holds, not yet for the rule's `for` duration.
    Pending,
    Firing,
    /// The condition stopped holding after the alert fired.
    Resolved,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// One alert: a rule's condition holding for one set of labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// Always `alertname`, `severity`, `hostname`; for GPU alerts `gpu` and `uuid`.
    pub labels: LabelSet,
    /// `summary`, `description` (with the numbers and reasons), `runbook`; `advice` when
    /// the LLM advisor has answered.
    pub annotations: LabelSet,
    pub state: AlertState,
    /// When the condition started holding (the pending phase starts here).
    pub active_at: DateTime<Utc>,
    /// When the alert started firing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<DateTime<Utc>>,
    /// When the alert resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<DateTime<Utc>>,
}

impl Alert {
    pub fn name(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }

    pub fn severity(&self) -> &str {
        self.labels.get("severity").map_or("", String::as_str)
    }

    /// Identity of the alert: a hash of its labels, as Alertmanager computes it.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(&self.labels)
    }
}

/// What the advice prompt reads of an alert (advice sits below alerting and does not know
/// this type).
impl crate::advice::AlertFacts for Alert {
    fn labels(&self) -> &LabelSet {
        &self.labels
    }

    fn state(&self) -> &str {
        self.state.as_str()
    }

    fn annotation(&self, name: &str) -> Option<&str> {
        self.annotations.get(name).map(String::as_str)
    }
}

/// FNV-1a over label names and values in sorted order, with separators — Alertmanager's
/// `LabelSet.Fingerprint` shape, so the same labels give the same identity everywhere.
pub fn fingerprint(labels: &LabelSet) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for (name, value) in labels {
        feed(name.as_bytes());
        feed(&[0xff]);
        feed(value.as_bytes());
        feed(&[0xff]);
    }
    hash
}

/// What goes to one receiver at one time: a group of alerts, or (for Alertmanager
/// receivers) the whole current alert list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub receiver: String,
    /// Stable key of the aggregation group (route path and group labels).
    pub group_key: String,
    /// The `group_by` labels' values shared by the group's alerts.
    pub group_labels: LabelSet,
    pub alerts: Vec<Alert>,
    pub created_at: DateTime<Utc>,
    /// Where the alerts can be seen (`http://host:10400/api/v1/alerts`).
    #[serde(default)]
    pub external_url: String,
}

impl Notification {
    /// "firing" when any alert fires, else "resolved" (Alertmanager's group status).
    pub fn status(&self) -> &'static str {
        if self.alerts.iter().any(|a| a.state == AlertState::Firing) {
            "firing"
        } else {
            "resolved"
        }
    }

    /// Labels every alert of the group shares.
    pub fn common_labels(&self) -> LabelSet {
        common(self.alerts.iter().map(|a| &a.labels))
    }

    /// Annotations every alert of the group shares.
    pub fn common_annotations(&self) -> LabelSet {
        common(self.alerts.iter().map(|a| &a.annotations))
    }

    /// The highest severity among the group's firing alerts (critical > warning > info),
    /// or among all of them when none fires: a resolved critical next to a firing warning
    /// is not a critical notification.
    pub fn severity(&self) -> &str {
        let firing: Vec<&Alert> = self
            .alerts
            .iter()
            .filter(|a| a.state == AlertState::Firing)
            .collect();
        let pool: Vec<&Alert> = if firing.is_empty() {
            self.alerts.iter().collect()
        } else {
            firing
        };
        ["critical", "warning", "info"]
            .into_iter()
            .find(|s| pool.iter().any(|a| a.severity() == *s))
            .unwrap_or("")
    }
}

fn common<'a>(mut sets: impl Iterator<Item = &'a LabelSet>) -> LabelSet {
    let Some(first) = sets.next() else {
        return LabelSet::new();
    };
    let mut out = first.clone();
    for set in sets {
        out.retain(|k, v| set.get(k) == Some(v));
    }
    out
}

/// A label set from pairs, for the alerting modules' tests.
#[cfg(test)]
pub(crate) fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests;
