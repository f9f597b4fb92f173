//! The alert book: every alert's lifecycle, Prometheus's — pending while the condition
//! holds for less than its rule's `for`, firing after, resolved when it stops holding
//! (kept for the resolved retention, so receivers hear of it), and what is inhibited.
//!
//! Rules ([`super::rules`]) say what holds now; the book remembers what held before, so a
//! condition that keeps holding stays one alert, and is what survives a restart. Time comes
//! from the findings, never the clock, so replay keeps the same book the agent would.
//! Inhibition (which firing alerts are not to be notified) is computed here from the book
//! and handed to dispatch ([`super::dispatch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::rules::Candidate;
use super::{Alert, AlertState, fingerprint};

/// Every alert's state, keyed by fingerprint: what survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertBook {
    pub alerts: BTreeMap<u64, Alert>,
}

impl AlertBook {
    /// Advances every alert's lifecycle to `now` given the candidates that hold; resolved
    /// alerts are kept for `retention` (Alertmanager receivers are re-sent them).
    pub fn update(&mut self, now: DateTime<Utc>, candidates: Vec<Candidate>, retention: Duration) {
        let mut holding = BTreeMap::new();
        for c in candidates {
            let fp = fingerprint(&c.labels);
            let due = |active_at: DateTime<Utc>| {
                now - active_at >= TimeDelta::from_std(c.for_).unwrap_or(TimeDelta::MAX)
            };
            let alert = match self.alerts.remove(&fp) {
                Some(mut a) if a.state != AlertState::Resolved => {
                    a.annotations = c.annotations;
                    if a.state == AlertState::Pending && due(a.active_at) {
                        a.state = AlertState::Firing;
                        a.starts_at = Some(now);
                    }
                    a
                }
                // New, or back after resolving: a new alert.
                _ => {
                    let firing = c.for_.is_zero();
                    Alert {
                        labels: c.labels,
                        annotations: c.annotations,
                        state: if firing {
                            AlertState::Firing
                        } else {
                            AlertState::Pending
                        },
                        active_at: now,
                        starts_at: firing.then_some(now),
                        ends_at: None,
                    }
                }
            };
            holding.insert(fp, alert);
        }
        let keep_resolved = TimeDelta::from_std(retention).unwrap_or(TimeDelta::MAX);
        for (fp, mut a) in std::mem::take(&mut self.alerts) {
            match a.state {
                // Never fired: it just goes away.
                AlertState::Pending => {}
                AlertState::Firing => {
                    a.state = AlertState::Resolved;
                    a.ends_at = Some(now);
                    holding.insert(fp, a);
                }
                AlertState::Resolved => {
                    if a.ends_at.is_some_and(|e| now - e < keep_resolved) {
                        holding.insert(fp, a);
                    }
                }
            }
        }
        self.alerts = holding;
    }

    /// Fingerprints of the alerts that are muted, as Alertmanager's inhibit rules would: every
    /// other alert of a GPU while its `GpuLost` fires (the one that matters is that it is
    /// gone), and `GpuAllocatedIdle` while a `GpuGhostProcess` of the same GPU fires (the
    /// ghost explains the idle allocation) — of the same MIG instance (`mig_uuid`) where
    /// both name one, so a ghost in one instance leaves another's idle allocation heard.
    /// Muted alerts keep their lifecycle; they are only not notified, so a GPU that comes
    /// back does not re-fire what was already known.
    pub(crate) fn inhibited(&self) -> BTreeSet<u64> {
        let firing_on = |name: &str| -> Vec<(&str, Option<&str>)> {
            self.alerts
                .values()
                .filter(|a| a.state == AlertState::Firing && a.name() == name)
                .filter_map(|a| {
                    let uuid = a.labels.get("uuid")?;
                    Some((uuid.as_str(), a.labels.get("mig_uuid").map(String::as_str)))
                })
                .collect()
        };
        let lost = firing_on("GpuLost");
        let ghosts = firing_on("GpuGhostProcess");
        self.alerts
            .iter()
            .filter(|(_, a)| {
                let Some(uuid) = a.labels.get("uuid").map(String::as_str) else {
                    return false;
                };
                let mig = a.labels.get("mig_uuid").map(String::as_str);
                let explained = |&(gpu, ghost_mig): &(&str, Option<&str>)| {
                    gpu == uuid && (ghost_mig.is_none() || mig.is_none() || ghost_mig == mig)
                };
                (a.name() != "GpuLost" && lost.iter().any(|(gpu, _)| *gpu == uuid))
                    || (a.name() == "GpuAllocatedIdle" && ghosts.iter().any(explained))
            })
            .map(|(fp, _)| *fp)
            .collect()
    }

    #[cfg(test)]
    /// Alerts in a state, ordered by fingerprint.
    pub(crate) fn in_state(&self, state: AlertState) -> impl Iterator<Item = &Alert> {
        self.alerts.values().filter(move |a| a.state == state)
    }
}

#[cfg(test)]
mod tests;
