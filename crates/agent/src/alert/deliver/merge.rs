//! What one send carries: a single notification, or — for the last message a receiver's
//! rate limit allows in a minute — everything then due, merged into one summary.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::alert::outbox::{EntryId, OutboxEntry};
use crate::alert::{Alert, LabelSet, Notification};

/// A notification to send now, and the outbox entries it carries.
pub(super) struct Batch {
    pub notification: Notification,
    pub ids: Vec<EntryId>,
}

/// One entry, sent as it is.
pub(super) fn single(entry: &OutboxEntry) -> Batch {
    Batch {
        notification: entry.notification.clone(),
        ids: vec![entry.id],
    }
}

/// Every entry of `due`, sent as one summary.
pub(super) fn summary(receiver: &str, due: &[OutboxEntry], now: DateTime<Utc>) -> Batch {
    Batch {
        notification: merge(receiver, due, now),
        ids: due.iter().map(|e| e.id).collect(),
    }
}

/// Everything due for a rate-limited receiver as one notification: all alerts of the
/// entries (an alert in several keeps its latest state), the group labels they share.
pub fn merge(receiver: &str, entries: &[OutboxEntry], now: DateTime<Utc>) -> Notification {
    let mut ordered: Vec<&OutboxEntry> = entries.iter().collect();
    ordered.sort_by_key(|e| e.id);
    let mut alerts: BTreeMap<u64, (usize, Alert)> = BTreeMap::new();
    let mut position = 0;
    for entry in &ordered {
        for alert in &entry.notification.alerts {
            // First appearance fixes the place, the latest entry the state.
            alerts
                .entry(alert.fingerprint())
                .and_modify(|slot| slot.1 = alert.clone())
                .or_insert_with(|| (position, alert.clone()));
            position += 1;
        }
    }
    let mut alerts: Vec<(usize, Alert)> = alerts.into_values().collect();
    alerts.sort_by_key(|(pos, _)| *pos);
    let mut group_labels: Option<LabelSet> = None;
    for entry in &ordered {
        let labels = &entry.notification.group_labels;
        group_labels = Some(match group_labels {
            None => labels.clone(),
            Some(mut common) => {
                common.retain(|k, v| labels.get(k) == Some(v));
                common
            }
        });
    }
    Notification {
        receiver: receiver.to_string(),
        group_key: format!("{receiver}/summary"),
        group_labels: group_labels.unwrap_or_default(),
        alerts: alerts.into_iter().map(|(_, a)| a).collect(),
        created_at: now,
        external_url: ordered
            .last()
            .map(|e| e.notification.external_url.clone())
            .unwrap_or_default(),
    }
}
