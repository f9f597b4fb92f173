//! The alert rules over a replay: the agent's own alerting stage
//! ([`Alerting::without_receivers`]: the same rules and lifecycle, nothing notified), with
//! every firing episode listed in the report.

use anyhow::Context as _;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::report::{ReplayRules, ReportAlert, rfc3339};
use crate::alert::AlertState;
use crate::alert::alerting::Alerting;
use crate::engine::Findings;

/// Alerting over a recording. Collection health is not in recordings, so
/// `GpuCollectionFailing` never fires in replay.
pub struct ReplayAlerting {
    alerting: Alerting,
    /// Firing alerts by fingerprint, with their entry in the report.
    open: BTreeMap<u64, usize>,
}

impl ReplayAlerting {
    /// The rules of a configuration (tuning, disabled and added rules included).
    pub fn from_config(config: &crate::config::Config) -> anyhow::Result<ReplayAlerting> {
        let hostname = if config.export.hostname.is_empty() {
            "replay".to_string()
        } else {
            config.export.hostname.clone()
        };
        let alerting =
            Alerting::without_receivers(config, hostname).context("[[alerting.rules]]")?;
        Ok(ReplayAlerting {
            alerting,
            open: BTreeMap::new(),
        })
    }
}

impl ReplayRules for ReplayAlerting {
    fn step(&mut self, findings: &Findings, alerts: &mut Vec<ReportAlert>) {
        // Without receivers nothing is due; the book is what the report reads.
        self.alerting.step(findings, None);
        let book = self.alerting.book();
        for (fingerprint, alert) in &book.alerts {
            match alert.state {
                AlertState::Firing if !self.open.contains_key(fingerprint) => {
                    let label = |name: &str| alert.labels.get(name).cloned().unwrap_or_default();
                    self.open.insert(*fingerprint, alerts.len());
                    alerts.push(ReportAlert {
                        alertname: label("alertname"),
                        uuid: label("uuid"),
                        gpu: label("gpu"),
                        severity: label("severity"),
                        starts_at: rfc3339(alert.starts_at.unwrap_or(findings.at)),
                        ends_at: None,
                    });
                }
                AlertState::Resolved => {
                    if let Some(i) = self.open.remove(fingerprint) {
                        alerts[i].ends_at = Some(rfc3339(alert.ends_at.unwrap_or(findings.at)));
                    }
                }
                _ => {}
            }
        }
        // Episodes whose alert left the book without a resolved step (not possible with
        // the lifecycle as it is, but cheap to guard) are closed now.
        let gone: Vec<u64> = self
            .open
            .keys()
            .filter(|fp| !book.alerts.contains_key(fp))
            .copied()
            .collect();
        for fp in gone {
            if let Some(i) = self.open.remove(&fp) {
                alerts[i].ends_at = Some(rfc3339(findings.at));
            }
        }
    }

    fn finish(&mut self, _end: DateTime<Utc>, _alerts: &mut Vec<ReportAlert>) {}
}
