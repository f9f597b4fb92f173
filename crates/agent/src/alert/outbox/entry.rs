//! What an outbox entry is, the errors of the outbox, and which entries a bound or a newer
//! notification of the same group removes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::super::Notification;
use super::EntryId;

/// A notification waiting for delivery, with its delivery history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// The store key; not part of the stored value.
    #[serde(skip)]
    pub id: EntryId,
    pub notification: Notification,
    pub(crate) enqueued_at: DateTime<Utc>,
    /// Delivery attempts that failed so far.
    pub attempts: u32,
    /// Not to be tried before this.
    pub next_attempt_at: DateTime<Utc>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl OutboxEntry {
    /// Whether every alert of the notification is resolved (evicted first when full).
    pub fn is_resolved(&self) -> bool {
        self.notification.status() == "resolved"
    }
}

/// What [`Outbox::enqueue`] did besides storing the entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Enqueued {
    pub id: EntryId,
    /// Older pending entries of the same receiver and group that this one replaced.
    pub superseded: usize,
    /// Receivers of the entries evicted to keep the bound, one per entry.
    pub evicted: Vec<String>,
    /// False when the entry is held in memory only (for now: it is written once the store
    /// works again).
    pub durable: bool,
}

/// The store could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error(
        "notification outbox {}: the file is locked by another process (is another gpu-sentinel using this state directory?)",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error("notification outbox {}: {source}{}", path.display(), corrupt_hint(source))]
    Store {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("notification outbox {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// redb gave up on the file mid-operation (it panics on some kinds of damage).
    #[error("notification outbox {}: the store failed ({message}); the file is probably damaged", path.display())]
    Panicked { path: PathBuf, message: String },
    #[error("notification outbox {}: entry cannot be encoded: {source}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The store failed before and its backoff has not ended: not tried this time.
    #[error(
        "notification outbox {}: the store is failing; the change is kept in memory and written at the next attempt",
        path.display()
    )]
    Waiting { path: PathBuf },
}

fn corrupt_hint(e: &redb::Error) -> &'static str {
    match e {
        redb::Error::Corrupted(_) => " (the file is damaged)",
        redb::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            " (not a valid outbox store: damaged, or another kind of file)"
        }
        _ => "",
    }
}

impl OutboxError {
    /// The store's file is damaged or not a store at all (as opposed to locked or
    /// unreadable).
    pub fn is_corrupt(&self) -> bool {
        match self {
            OutboxError::Store { source, .. } => match &**source {
                redb::Error::Corrupted(_) => true,
                // redb's answer to a file without its magic number.
                redb::Error::Io(e) => e.kind() == std::io::ErrorKind::InvalidData,
                _ => false,
            },
            OutboxError::Panicked { .. } => true,
            _ => false,
        }
    }
}

/// Every entry but the newest of its (receiver, group).
pub(super) fn stale_on_load(entries: &BTreeMap<EntryId, OutboxEntry>) -> Vec<EntryId> {
    let mut newest: BTreeMap<(&str, &str), EntryId> = BTreeMap::new();
    let mut stale = Vec::new();
    for (id, e) in entries {
        let key = (
            e.notification.receiver.as_str(),
            e.notification.group_key.as_str(),
        );
        if let Some(older) = newest.insert(key, *id) {
            stale.push(older);
        }
    }
    stale
}

pub(super) fn superseded_ids(
    entries: &BTreeMap<EntryId, OutboxEntry>,
    receiver: &str,
    group_key: &str,
) -> Vec<EntryId> {
    entries
        .values()
        .filter(|e| e.notification.receiver == receiver && e.notification.group_key == group_key)
        .map(|e| e.id)
        .collect()
}

/// `excess` of `candidates` (oldest first) to evict: the oldest resolved ones first, then
/// the oldest.
pub(super) fn victims<'a>(
    candidates: impl Iterator<Item = &'a OutboxEntry> + Clone,
    excess: usize,
) -> Vec<EntryId> {
    if excess == 0 {
        return Vec::new();
    }
    let mut out: Vec<EntryId> = candidates
        .clone()
        .filter(|e| e.is_resolved())
        .map(|e| e.id)
        .take(excess)
        .collect();
    if out.len() < excess {
        let more: Vec<EntryId> = candidates
            .filter(|e| !out.contains(&e.id))
            .map(|e| e.id)
            .take(excess - out.len())
            .collect();
        out.extend(more);
    }
    out
}
