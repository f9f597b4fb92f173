//! Log receiver: one line per alert through `tracing` (stderr), for demos and for hosts
//! whose log shipper is the alert channel. Firing alerts log at WARN, resolved ones at
//! INFO. Never fails.

use super::kind::{Consumes, KindFacts};
use super::text::{self, Facts};
use super::{Notifier, NotifyError};
use crate::alert::Notification;

/// No secret and no URL (it writes to the agent's log); never limited; fed groups.
pub(crate) const FACTS: KindFacts = KindFacts {
    secret: None,
    default_max_per_minute: 0,
    consumes: Consumes::Groups,
};

#[derive(Debug)]
pub(crate) struct LogNotifier {
    receiver: String,
}

impl LogNotifier {
    pub fn new(receiver: &str) -> LogNotifier {
        LogNotifier {
            receiver: receiver.to_string(),
        }
    }
}

impl Notifier for LogNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        for alert in text::shown(notification) {
            let facts = Facts::of(alert, 2000);
            let line = line(&facts);
            if facts.firing {
                tracing::warn!(receiver = %self.receiver, "{line}");
            } else {
                tracing::info!(receiver = %self.receiver, "{line}");
            }
        }
        Ok(())
    }
}

/// `[FIRING] GpuLost (critical) GPU 3 (GPU-…) on host-a: summary — description | runbook:
/// … | advice: … | since …`, on one line whatever the annotations hold.
pub fn line(facts: &Facts) -> String {
    let status = if facts.firing { "FIRING" } else { "RESOLVED" };
    let mut line = format!("[{status}] {} ({})", facts.name, facts.severity);
    if !facts.location.is_empty() {
        line.push_str(&format!(" {}", facts.location));
    }
    if let Some(summary) = &facts.summary {
        line.push_str(&format!(": {summary}"));
    }
    if let Some(description) = &facts.description {
        line.push_str(&format!(" — {description}"));
    }
    if let Some(runbook) = &facts.runbook {
        line.push_str(&format!(" | runbook: {runbook}"));
    }
    if let Some(advice) = &facts.advice {
        line.push_str(&format!(" | advice: {advice}"));
    }
    line.push_str(&format!(" | {}", facts.when));
    // One line per alert, even when annotations span several.
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}
