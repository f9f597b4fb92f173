//! What the outbox holds, read without changing it: the delivery stage's questions (what
//! is due, for whom, since when) and the counts the metrics show. All from memory; the
//! store is never read here.

use chrono::{DateTime, Utc};

use super::{Outbox, OutboxEntry};

impl Outbox {
    /// Up to `limit` entries of `receiver` due at `now`, in the order to try them: earliest
    /// due first, then oldest first.
    pub fn due(&self, receiver: &str, now: DateTime<Utc>, limit: usize) -> Vec<OutboxEntry> {
        let state = self.lock();
        let mut due: Vec<&OutboxEntry> = state
            .entries
            .values()
            .filter(|e| e.notification.receiver == receiver && e.next_attempt_at <= now)
            .collect();
        due.sort_by_key(|e| (e.next_attempt_at, e.id));
        due.into_iter().take(limit).cloned().collect()
    }

    /// Entries of `receiver` enqueued before `cutoff`.
    pub(crate) fn enqueued_before(
        &self,
        receiver: &str,
        cutoff: DateTime<Utc>,
    ) -> Vec<OutboxEntry> {
        self.lock()
            .entries
            .values()
            .filter(|e| e.notification.receiver == receiver && e.enqueued_at < cutoff)
            .cloned()
            .collect()
    }

    /// When the next entry of `receiver` is due (None: nothing pending for it).
    pub fn next_due(&self, receiver: &str) -> Option<DateTime<Utc>> {
        self.lock()
            .entries
            .values()
            .filter(|e| e.notification.receiver == receiver)
            .map(|e| e.next_attempt_at)
            .min()
    }

    /// Every pending entry, oldest first.
    pub fn entries(&self) -> Vec<OutboxEntry> {
        self.lock().entries.values().cloned().collect()
    }

    /// Receivers with pending entries, each once.
    pub fn receivers(&self) -> Vec<String> {
        let state = self.lock();
        let mut out: Vec<String> = state
            .entries
            .values()
            .map(|e| e.notification.receiver.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Entries waiting.
    pub fn pending(&self) -> usize {
        self.lock().entries.len()
    }

    /// Entries waiting for one receiver.
    pub fn pending_for(&self, receiver: &str) -> usize {
        self.lock()
            .entries
            .values()
            .filter(|e| e.notification.receiver == receiver)
            .count()
    }
}
