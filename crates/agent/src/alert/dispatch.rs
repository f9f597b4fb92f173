//! Dispatch, Alertmanager's: alerts a route sends to a receiver that share the route's
//! `group_by` labels form an aggregation group, notified after `group_wait`, again after
//! `group_interval` when the group changed, and every `repeat_interval` while it keeps
//! firing unchanged. Alertmanager receivers are fed differently: the whole current alert
//! list, pushed when it changes and every resend interval (see [`Dispatcher::tick`]).
//!
//! What is muted is the book's to say ([`super::book::AlertBook::inhibited`]); dispatch
//! is handed the result and leaves those alerts out of group notifications. Its state is
//! persisted with the book, so a restart does not repeat what went out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::book::AlertBook;
use super::notify::kind::Consumes;
use super::route::Route;
use super::{Alert, AlertState, LabelSet, Notification};

/// How a receiver is fed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReceiverInfo {
    /// Groups, or (Alertmanager) the whole alert list, re-sent: its kind's
    /// [`crate::alert::notify::kind::KindFacts::consumes`].
    pub consumes: Consumes,
    pub send_resolved: bool,
}

/// What one aggregation group remembers between ticks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GroupState {
    receiver: String,
    group_labels: LabelSet,
    created: DateTime<Utc>,
    last_flush: Option<DateTime<Utc>>,
    /// The alerts that were firing when the group last notified.
    last_sent: BTreeMap<u64, AlertState>,
}

/// Grouping and Alertmanager-push state: persisted with the alerts, so a restart does
/// not repeat notifications that went out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DispatchState {
    groups: BTreeMap<String, GroupState>,
    /// Per Alertmanager receiver: when its list was last pushed, and what it held.
    #[serde(default)]
    pushed: BTreeMap<String, Pushed>,
}

/// The last list pushed to one Alertmanager receiver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Pushed {
    at: Option<DateTime<Utc>>,
    alerts: BTreeMap<u64, AlertState>,
}

/// Turns the alert book into notifications, tick by tick.
#[derive(Debug, Clone)]
pub(crate) struct Dispatcher {
    /// The routing tree, compiled once and shared with the advice digest.
    pub route: Arc<Route>,
    pub receivers: BTreeMap<String, ReceiverInfo>,
    /// Alertmanager receivers are re-sent firing alerts this often.
    pub resend_interval: Duration,
    pub external_url: String,
}

impl Dispatcher {
    /// Notifications due at `now`, updating `state`. `muted`: the fingerprints the book
    /// inhibits ([`AlertBook::inhibited`]); they stay in the book (and on
    /// `/api/v1/alerts`) and are only not notified.
    pub fn tick(
        &self,
        state: &mut DispatchState,
        book: &AlertBook,
        muted: &BTreeSet<u64>,
        now: DateTime<Utc>,
    ) -> Vec<Notification> {
        let mut out = self.push_to_alertmanagers(state, book, now);
        let mut current: BTreeMap<String, (&Route, LabelSet, Vec<&Alert>)> = BTreeMap::new();
        for (fingerprint, alert) in &book.alerts {
            if alert.state == AlertState::Pending || muted.contains(fingerprint) {
                continue;
            }
            for route in self.route.matches(&alert.labels) {
                let Some(info) = self.receivers.get(&route.receiver) else {
                    continue;
                };
                if info.consumes == Consumes::AlertList {
                    continue;
                }
                let group_labels: LabelSet = route
                    .group_by
                    .iter()
                    .filter_map(|l| alert.labels.get(l).map(|v| (l.clone(), v.clone())))
                    .collect();
                let key = format!(
                    "{}:{}:{}",
                    route.id,
                    route.receiver,
                    label_text(&group_labels)
                );
                current
                    .entry(key)
                    .or_insert_with(|| (route, group_labels, Vec::new()))
                    .2
                    .push(alert);
            }
        }
        // Groups whose alerts all went away keep their state until their resolution is sent.
        let keys: BTreeSet<String> = current.keys().chain(state.groups.keys()).cloned().collect();
        for key in keys {
            let entry = current.remove(&key);
            let Some((route, group_labels, alerts)) = entry else {
                state.groups.remove(&key);
                continue;
            };
            let send_resolved = self
                .receivers
                .get(&route.receiver)
                .is_some_and(|r| r.send_resolved);
            let group = state
                .groups
                .entry(key.clone())
                .or_insert_with(|| GroupState {
                    receiver: route.receiver.clone(),
                    group_labels: group_labels.clone(),
                    created: now,
                    last_flush: None,
                    last_sent: BTreeMap::new(),
                });
            // Resolved alerts go out once (if the receiver wants them), then leave the group.
            let members: Vec<&Alert> = alerts
                .into_iter()
                .filter(|a| {
                    a.state == AlertState::Firing
                        || (send_resolved
                            && group.last_sent.get(&a.fingerprint()) == Some(&AlertState::Firing))
                })
                .collect();
            if members.is_empty() {
                state.groups.remove(&key);
                continue;
            }
            let now_set: BTreeMap<u64, AlertState> =
                members.iter().map(|a| (a.fingerprint(), a.state)).collect();
            // A new firing alert, or a resolution the receiver wants, is a change; an alert
            // leaving a group that does not send resolutions is not (Alertmanager's rule).
            let changed = now_set
                .iter()
                .any(|(fp, s)| group.last_sent.get(fp) != Some(s));
            let firing = members.iter().any(|a| a.state == AlertState::Firing);
            let after = |from: DateTime<Utc>, wait: Duration| now >= from + delta(wait);
            let due = match group.last_flush {
                None => after(group.created, route.group_wait),
                Some(last) if changed => after(last, route.group_interval),
                Some(last) => firing && after(last, route.repeat_interval),
            };
            if !due {
                continue;
            }
            group.last_flush = Some(now);
            // A resolution goes out once: afterwards only firing alerts are remembered.
            group.last_sent = now_set
                .into_iter()
                .filter(|(_, s)| *s == AlertState::Firing)
                .collect();
            out.push(Notification {
                receiver: route.receiver.clone(),
                group_key: key,
                group_labels,
                alerts: members.into_iter().cloned().collect(),
                created_at: now,
                external_url: self.external_url.clone(),
            });
        }
        out
    }

    /// For each Alertmanager receiver, the alerts the routing tree sends it (pending ones
    /// aside), pushed when the list changed or the resend interval passed. Inhibition is
    /// Alertmanager's own business there. Firing alerts leave `ends_at` unset: the
    /// Alertmanager notifier sets it four intervals past the moment it actually sends, as
    /// Prometheus does, so a list that waited in the outbox through an outage does not
    /// arrive already expired.
    fn push_to_alertmanagers(
        &self,
        state: &mut DispatchState,
        book: &AlertBook,
        now: DateTime<Utc>,
    ) -> Vec<Notification> {
        let mut out = Vec::new();
        for (receiver, info) in &self.receivers {
            if info.consumes != Consumes::AlertList {
                continue;
            }
            let listed: Vec<(&u64, &Alert)> = book
                .alerts
                .iter()
                .filter(|(_, a)| a.state != AlertState::Pending)
                .filter(|(_, a)| {
                    self.route
                        .matches(&a.labels)
                        .iter()
                        .any(|r| &r.receiver == receiver)
                })
                .collect();
            let set: BTreeMap<u64, AlertState> =
                listed.iter().map(|(fp, a)| (**fp, a.state)).collect();
            let last = state.pushed.entry(receiver.clone()).or_default();
            let resend_due = last
                .at
                .is_none_or(|at| now >= at + delta(self.resend_interval));
            if listed.is_empty() {
                last.alerts.clear();
                continue;
            }
            if set == last.alerts && !resend_due {
                continue;
            }
            last.at = Some(now);
            last.alerts = set;
            out.push(Notification {
                receiver: receiver.clone(),
                group_key: format!("alertmanager:{receiver}"),
                group_labels: LabelSet::new(),
                alerts: listed.into_iter().map(|(_, a)| a.clone()).collect(),
                created_at: now,
                external_url: self.external_url.clone(),
            });
        }
        out
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// `{a="1", b="2"}`: a group's labels as Alertmanager prints them in group keys.
fn label_text(labels: &LabelSet) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(", "))
}

#[cfg(test)]
mod tests;
