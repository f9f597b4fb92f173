//! The notification outbox: where notifications wait, durably, until a receiver has them.
//!
//! Every notification is written here before anyone tries to deliver it and removed only
//! after the receiver accepted it (or it was dropped for good), so delivery is *at least
//! once* across agent restarts, crashes and receiver outages. A notification accepted by a
//! receiver just before a crash, whose removal had not committed yet, is delivered again on
//! the next start: receivers see duplicates rather than gaps.
//!
//! **Store.** One [redb](https://www.redb.org) file in the state directory (`outbox.redb`):
//! an embedded, pure-Rust, ACID key-value store whose commits are fsynced copy-on-write
//! B-tree updates, so a `kill -9` or power cut at any point leaves either the old or the new
//! state, never a torn one. Keys are entry ids (increasing), values are JSON entries in a
//! table whose name carries the format version. The store is write-through: everything is
//! also held in memory (the outbox is bounded), so reads never touch the disk.
//!
//! **Supersession.** A notification carries its group's *whole* current state (the
//! Alertmanager model), so a newer notification for the same `(receiver, group_key)` makes
//! older pending ones pointless — delivering them late would even show a resolved alert as
//! firing. [`Outbox::enqueue`] therefore removes them in the same transaction.
//!
//! **Bound.** At most `max_entries` entries. When a new one would pass the bound, the oldest
//! entries whose notification is *resolved* go first, then the oldest overall; the new entry
//! is never the one evicted. Evictions are reported to the caller, which counts them.
//!
//! **When the store cannot be used.** [`Outbox::open`] fails with an error naming the path.
//! [`Outbox::open_or_fallback`] is what the agent uses: a corrupt file is moved aside
//! (`outbox.redb.corrupt-<unix seconds>`, kept for inspection) and a fresh store created; if
//! that fails too, or the file is locked by another process, it logs the error and keeps the
//! outbox in memory only. Alerts still go out; they are just not kept across a restart —
//! not alerting at all would be the worse failure. [`Outbox::is_durable`] says which. A
//! damaged file is reported once, by that clear error: redb's own panic on it is caught
//! without being printed (see `store`).
//!
//! **No secrets on disk.** An entry's `last_error` is stored scrubbed by
//! [`crate::redact::scrub`]: a delivery error may quote a webhook URL or a reply echoing
//! its token.

mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Notification;
use store::{Store, guarded};

/// Id of an outbox entry; increasing in enqueue order.
pub type EntryId = u64;

/// File name of the store inside the state directory.
pub const FILE_NAME: &str = "outbox.redb";

/// A notification waiting for delivery, with its delivery history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// The store key; not part of the stored value.
    #[serde(skip)]
    pub id: EntryId,
    pub notification: Notification,
    pub enqueued_at: DateTime<Utc>,
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
    /// False when the entry is held in memory only.
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

/// The outbox. Shared between the dispatcher (which enqueues) and the delivery workers
/// (which take due entries and report outcomes); every method takes `&self`.
pub struct Outbox {
    /// None when the outbox is in memory only.
    store: Option<Store>,
    max_entries: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<EntryId, OutboxEntry>,
    next_id: EntryId,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("path", &self.path())
            .field("max_entries", &self.max_entries)
            .field("pending", &self.pending())
            .finish()
    }
}

impl Outbox {
    /// Opens (or creates) the store at `path` and loads its entries. At most `max_entries`
    /// are kept (at least 1). Entries that no longer decode are removed with a warning.
    pub fn open(path: &Path, max_entries: usize) -> Result<Outbox, OutboxError> {
        guarded(path, || Outbox::open_unguarded(path, max_entries))
    }

    fn open_unguarded(path: &Path, max_entries: usize) -> Result<Outbox, OutboxError> {
        let io = |source| OutboxError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let store = Store::create(path)?;
        let mut entries = store.load()?;
        // Entries written while the store was failing may have been superseded in memory
        // only: of each receiver's group, the newest entry is the one that counts.
        let stale = stale_on_load(&entries);
        if !stale.is_empty() {
            store.write(&[], &stale)?;
            for id in &stale {
                entries.remove(id);
            }
        }
        let next_id = entries.keys().next_back().map_or(1, |id| id + 1);
        Ok(Outbox {
            store: Some(store),
            max_entries: max_entries.max(1),
            state: Mutex::new(State { entries, next_id }),
        })
    }

    /// An outbox that keeps entries in memory only (nothing survives a restart).
    pub fn in_memory(max_entries: usize) -> Outbox {
        Outbox {
            store: None,
            max_entries: max_entries.max(1),
            state: Mutex::new(State {
                entries: BTreeMap::new(),
                next_id: 1,
            }),
        }
    }

    /// [`Outbox::open`], and when that fails: a corrupt file is moved aside and a fresh
    /// store created; anything else (or a second failure) is logged and the outbox runs in
    /// memory. Never fails: alerting without durability beats not alerting.
    pub fn open_or_fallback(path: &Path, max_entries: usize) -> Outbox {
        let err = match Outbox::open(path, max_entries) {
            Ok(outbox) => return outbox,
            Err(e) => e,
        };
        if err.is_corrupt() {
            let stamp = Utc::now().timestamp();
            let aside = PathBuf::from(format!("{}.corrupt-{stamp}", path.display()));
            match std::fs::rename(path, &aside) {
                Ok(()) => match Outbox::open(path, max_entries) {
                    Ok(outbox) => {
                        tracing::error!(
                            "{err}; moved it to {} and started an empty outbox: \
                             notifications pending in it are not delivered",
                            aside.display()
                        );
                        return outbox;
                    }
                    Err(again) => tracing::error!("{err}; moved it aside, then: {again}"),
                },
                Err(e) => tracing::error!("{err}; moving it aside failed: {e}"),
            }
        } else {
            tracing::error!("{err}");
        }
        tracing::error!(
            "notifications are kept in memory only: they are delivered, but not across a restart"
        );
        Outbox::in_memory(max_entries)
    }

    /// Whether entries survive a restart.
    pub fn is_durable(&self) -> bool {
        self.store.is_some()
    }

    /// The store's file, when durable.
    pub fn path(&self) -> Option<&Path> {
        self.store.as_ref().map(|s| s.path.as_path())
    }

    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Stores a notification, due at once; durable when this returns `Ok` (for a durable
    /// outbox). Older pending entries of the same receiver and group are superseded, and
    /// the bound is kept, in the same transaction. On `Err` nothing changed.
    pub fn enqueue(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
    ) -> Result<Enqueued, OutboxError> {
        self.insert(notification, now, now, true)
    }

    /// Like [`Outbox::enqueue`], but not due before `due_at`: durable at once, sent later
    /// unless a newer notification of its group supersedes it first.
    pub fn enqueue_due_at(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
        due_at: DateTime<Utc>,
    ) -> Result<Enqueued, OutboxError> {
        self.insert(notification, now, due_at, true)
    }

    /// Like [`Outbox::enqueue`] but in memory only: for when the store failed and the
    /// notification must still go out.
    pub fn enqueue_in_memory(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
        due_at: DateTime<Utc>,
    ) -> Enqueued {
        // Without the store nothing can fail.
        self.insert(notification, now, due_at, false)
            .unwrap_or_default()
    }

    fn insert(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
        due_at: DateTime<Utc>,
        durable: bool,
    ) -> Result<Enqueued, OutboxError> {
        let mut state = self.lock();
        let id = state.next_id;
        let entry = OutboxEntry {
            id,
            notification: notification.clone(),
            enqueued_at: now,
            attempts: 0,
            next_attempt_at: due_at.max(now),
            last_error: None,
        };
        let superseded = superseded_ids(&state, &notification.receiver, &notification.group_key);
        let evicted = self.victims(&state, &superseded);
        let removed: Vec<EntryId> = superseded.iter().chain(&evicted).copied().collect();
        let store = self.store.as_ref().filter(|_| durable);
        if let Some(store) = store {
            store.write(&[&entry], &removed)?;
        }
        state.next_id += 1;
        let superseded_count = superseded.len();
        for id in &superseded {
            state.entries.remove(id);
        }
        let evicted = evicted
            .iter()
            .filter_map(|id| state.entries.remove(id))
            .map(|e| e.notification.receiver)
            .collect();
        state.entries.insert(id, entry);
        Ok(Enqueued {
            id,
            superseded: superseded_count,
            evicted,
            durable: store.is_some(),
        })
    }

    /// Entries to evict so that one more fits, given those about to be superseded:
    /// the oldest resolved ones first, then the oldest.
    fn victims(&self, state: &State, superseded: &[EntryId]) -> Vec<EntryId> {
        let remaining = state.entries.len() - superseded.len();
        let excess = (remaining + 1).saturating_sub(self.max_entries);
        if excess == 0 {
            return Vec::new();
        }
        let candidates = || {
            state
                .entries
                .values()
                .filter(|e| !superseded.contains(&e.id))
        };
        let mut out: Vec<EntryId> = candidates()
            .filter(|e| e.is_resolved())
            .map(|e| e.id)
            .take(excess)
            .collect();
        if out.len() < excess {
            let more: Vec<EntryId> = candidates()
                .filter(|e| !out.contains(&e.id))
                .map(|e| e.id)
                .take(excess - out.len())
                .collect();
            out.extend(more);
        }
        out
    }

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
    pub fn enqueued_before(&self, receiver: &str, cutoff: DateTime<Utc>) -> Vec<OutboxEntry> {
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

    /// The receiver has the entry: remove it. Returns whether it was still there (a
    /// superseded or evicted entry is not). The entry leaves memory even when the store
    /// write fails; then it may be delivered again after a restart (at least once).
    pub fn delivered(&self, id: EntryId) -> Result<bool, OutboxError> {
        self.remove(id)
    }

    /// The entry is given up (the receiver rejected it, or it expired): remove it.
    pub fn dropped(&self, id: EntryId) -> Result<bool, OutboxError> {
        self.remove(id)
    }

    fn remove(&self, id: EntryId) -> Result<bool, OutboxError> {
        let mut state = self.lock();
        let was = state.entries.remove(&id).is_some();
        if was {
            if let Some(store) = &self.store {
                store.write(&[], &[id])?;
            }
        }
        Ok(was)
    }

    /// An attempt failed and will be retried at `next_attempt_at`. Missing ids (superseded
    /// meanwhile) are ignored, never re-created.
    pub fn failed(
        &self,
        id: EntryId,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> Result<bool, OutboxError> {
        let mut state = self.lock();
        let Some(entry) = state.entries.get_mut(&id) else {
            return Ok(false);
        };
        entry.attempts = entry.attempts.saturating_add(1);
        entry.next_attempt_at = next_attempt_at;
        // Stored scrubbed: an error may quote a URL or a reply that carries a token.
        entry.last_error = Some(crate::redact::scrub(error));
        if let Some(store) = &self.store {
            store.write(&[entry], &[])?;
        }
        Ok(true)
    }

    /// Entries of `receiver` not due before `latest` become due at `latest`; returns how
    /// many. A retry time from before the wait a service may ask for was bounded (a
    /// `Retry-After` in 2099), or from a clock that was wrong, must not hold an entry for
    /// years.
    pub fn bring_forward(
        &self,
        receiver: &str,
        latest: DateTime<Utc>,
    ) -> Result<usize, OutboxError> {
        let mut state = self.lock();
        let mut changed = Vec::new();
        for entry in state.entries.values_mut() {
            if entry.notification.receiver == receiver && entry.next_attempt_at > latest {
                entry.next_attempt_at = latest;
                changed.push(entry.id);
            }
        }
        if let Some(store) = &self.store {
            let entries: Vec<&OutboxEntry> = changed
                .iter()
                .filter_map(|id| state.entries.get(id))
                .collect();
            if !entries.is_empty() {
                store.write(&entries, &[])?;
            }
        }
        Ok(changed.len())
    }

    /// Removes the pending entries of one receiver and group; returns how many.
    pub fn supersede(&self, receiver: &str, group_key: &str) -> Result<usize, OutboxError> {
        let mut state = self.lock();
        let ids = superseded_ids(&state, receiver, group_key);
        if let Some(store) = &self.store {
            store.write(&[], &ids)?;
        }
        for id in &ids {
            state.entries.remove(id);
        }
        Ok(ids.len())
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

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }
}

/// Every entry but the newest of its (receiver, group).
fn stale_on_load(entries: &BTreeMap<EntryId, OutboxEntry>) -> Vec<EntryId> {
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

fn superseded_ids(state: &State, receiver: &str, group_key: &str) -> Vec<EntryId> {
    state
        .entries
        .values()
        .filter(|e| e.notification.receiver == receiver && e.notification.group_key == group_key)
        .map(|e| e.id)
        .collect()
}
