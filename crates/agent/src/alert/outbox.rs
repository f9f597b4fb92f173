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
//! (`outbox.redb.corrupt-<unix seconds>`, kept for inspection) and a fresh store created; a
//! file locked by another process leaves the outbox in memory for good (that file is the
//! other process's). A damaged file is reported once, by that clear error: redb's own panic
//! on it is caught without being printed (see `store`).
//!
//! **When the store fails.** Anything else — a full disk, a file that cannot be opened yet,
//! an I/O error — never loses a notification already accepted: it stays in memory (within
//! the bound), and the changes the file lacks are remembered — entries to write, ids to
//! delete. The database is closed (after an I/O error redb refuses every further
//! transaction until it is reopened) and opened again on the next attempt, with a backoff
//! from 1 s doubling to 10 s ([`Outbox::retry_store`], which the delivery stage calls), and
//! at once for a new notification. One transaction then writes everything missing: the
//! newest entry of each group is put and the older ones it superseded are deleted together,
//! so the file never holds an older state of a group without the newer one. The failure is
//! logged when it starts and when it ends, not at every attempt; every failed attempt is
//! counted ([`Outbox::store_errors`]). [`Outbox::is_durable`] is false while the file lags
//! behind memory. A store that could not be opened at all when the outbox was made gets its
//! entries read once it opens: those of groups notified meanwhile are older than what
//! memory holds and are deleted; the rest are numbered after the entries in memory.
//!
//! **No secrets on disk.** An entry's `last_error` is stored scrubbed by
//! [`crate::redact::scrub`]: a delivery error may quote a webhook URL or a reply echoing
//! its token.

mod disk;
mod entry;
mod read;
mod store;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use chrono::{DateTime, Utc};

use super::Notification;
use disk::{Disk, RETRY_LONGEST, backoff, set_aside};
pub use entry::{Enqueued, OutboxEntry, OutboxError};
use entry::{stale_on_load, superseded_ids, victims};
use store::{Opener, Store, guarded};

/// Id of an outbox entry; increasing in enqueue order (within a group, a higher id is
/// always the newer notification).
pub(crate) type EntryId = u64;

/// File name of the store inside the state directory.
pub const FILE_NAME: &str = "outbox.redb";

/// The outbox. Shared between the dispatcher (which enqueues) and the delivery workers
/// (which take due entries and report outcomes); every method takes `&self`.
pub struct Outbox {
    /// The store's file; None when the outbox is in memory only by design.
    path: Option<PathBuf>,
    max_entries: usize,
    state: Mutex<State>,
    /// Attempts to open or write the store that failed.
    store_errors: AtomicU64,
}

struct State {
    entries: BTreeMap<EntryId, OutboxEntry>,
    next_id: EntryId,
    /// None when the outbox is in memory only by design.
    disk: Option<Disk>,
    /// Receivers of entries evicted while a late-opened store's entries were taken in,
    /// not yet handed to the caller for counting.
    evicted: Vec<String>,
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
        Outbox::open_with(path, max_entries, Opener::file())
    }

    fn open_with(path: &Path, max_entries: usize, opener: Opener) -> Result<Outbox, OutboxError> {
        guarded(path, || {
            let io = |source| OutboxError::Io {
                path: path.to_path_buf(),
                source,
            };
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(io)?;
            }
            let store = Store::create(path, &opener)?;
            let mut entries = store.load()?;
            // Entries written while the store was failing may have been superseded in
            // memory only: of each receiver's group, the newest entry is the one that counts.
            let stale = stale_on_load(&entries);
            if !stale.is_empty() {
                store.write(&[], &stale)?;
                for id in &stale {
                    entries.remove(id);
                }
            }
            let next_id = entries.keys().next_back().map_or(1, |id| id + 1);
            Ok(Outbox {
                path: Some(path.to_path_buf()),
                max_entries: max_entries.max(1),
                state: Mutex::new(State {
                    entries,
                    next_id,
                    disk: Some(Disk::new(path, opener, Some(store))),
                    evicted: Vec::new(),
                }),
                store_errors: AtomicU64::new(0),
            })
        })
    }

    /// An outbox that keeps entries in memory only (nothing survives a restart).
    pub fn in_memory(max_entries: usize) -> Outbox {
        Outbox {
            path: None,
            max_entries: max_entries.max(1),
            state: Mutex::new(State {
                entries: BTreeMap::new(),
                next_id: 1,
                disk: None,
                evicted: Vec::new(),
            }),
            store_errors: AtomicU64::new(0),
        }
    }

    /// [`Outbox::open`], and when that fails: a corrupt file is moved aside and a fresh
    /// store created; a file locked by another process leaves the outbox in memory; any
    /// other failure (or a second one) is logged and the store is tried again later, the
    /// outbox keeping notifications in memory meanwhile. Never fails: alerting without
    /// durability beats not alerting.
    pub fn open_or_fallback(path: &Path, max_entries: usize) -> Outbox {
        Outbox::open_or_fallback_with(path, max_entries, Opener::file())
    }

    fn open_or_fallback_with(path: &Path, max_entries: usize, opener: Opener) -> Outbox {
        let err = match Outbox::open_with(path, max_entries, opener.clone()) {
            Ok(outbox) => return outbox,
            Err(e) => e,
        };
        if matches!(err, OutboxError::InUse { .. }) {
            // The file is another process's: taking it over later would be worse.
            tracing::error!(
                "{err}; notifications are kept in memory only: they are delivered, but not \
                 across a restart"
            );
            return Outbox::in_memory(max_entries);
        }
        if err.is_corrupt() {
            match set_aside(path) {
                Ok(aside) => match Outbox::open_with(path, max_entries, opener.clone()) {
                    Ok(outbox) => {
                        tracing::error!(
                            "{err}; moved it to {} and started an empty outbox: \
                             notifications pending in it are not delivered",
                            aside.display()
                        );
                        return outbox;
                    }
                    Err(again) => {
                        tracing::error!("{err}; moved it to {}, then: {again}", aside.display())
                    }
                },
                Err(e) => tracing::error!("{err}; moving it aside failed: {e}"),
            }
        } else {
            tracing::error!("{err}");
        }
        tracing::error!(
            "notification outbox {}: notifications are kept in memory and delivered, and \
             written there once it opens (tried again every {} at most)",
            path.display(),
            humantime::format_duration(RETRY_LONGEST)
        );
        let mut disk = Disk::new(path, opener, None);
        disk.failures = 1;
        disk.retry_at = Instant::now().checked_add(backoff(1));
        Outbox {
            path: Some(path.to_path_buf()),
            max_entries: max_entries.max(1),
            state: Mutex::new(State {
                entries: BTreeMap::new(),
                next_id: 1,
                disk: Some(disk),
                evicted: Vec::new(),
            }),
            store_errors: AtomicU64::new(1),
        }
    }

    /// Whether everything the outbox holds is in its store, i.e. survives a restart. False
    /// for an outbox in memory by design, and while a failing store lags behind memory.
    pub fn is_durable(&self) -> bool {
        self.lock().disk.as_ref().is_some_and(Disk::in_sync)
    }

    /// The store's file (None for an outbox in memory by design).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub(crate) fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Attempts to open or write the store that failed, since the outbox was made.
    pub(crate) fn store_errors(&self) -> u64 {
        self.store_errors.load(Ordering::Relaxed)
    }

    /// Stores a notification, due at once; durable when this returns `Ok` (for an outbox
    /// with a store). Older pending entries of the same receiver and group are superseded,
    /// and the bound is kept, in the same transaction. On `Err` (the store cannot be opened
    /// or written) nothing changed.
    pub fn enqueue(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
    ) -> Result<Enqueued, OutboxError> {
        self.insert(notification, now, now, false)
    }

    /// Like [`Outbox::enqueue`], but not due before `due_at` (durable at once, sent later
    /// unless a newer notification of its group supersedes it first), and a store that
    /// fails does not refuse the
    /// notification: it is kept in memory (`durable: false`), delivered, and written with
    /// everything else missing once the store works again. What the agent uses: a full
    /// disk must not stop alerts.
    pub fn accept(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
        due_at: DateTime<Utc>,
    ) -> Enqueued {
        // Kept on failure: the only error is the store's, and that is not returned.
        self.insert(notification, now, due_at, true)
            .unwrap_or_default()
    }

    fn insert(
        &self,
        notification: &Notification,
        now: DateTime<Utc>,
        due_at: DateTime<Utc>,
        keep_on_failure: bool,
    ) -> Result<Enqueued, OutboxError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let id = state.next_id;
        let entry = OutboxEntry {
            id,
            notification: notification.clone(),
            enqueued_at: now,
            attempts: 0,
            next_attempt_at: due_at.max(now),
            last_error: None,
        };
        let (receiver, group_key) = (&notification.receiver, &notification.group_key);
        let superseded = superseded_ids(&state.entries, receiver, group_key);
        let excess = (state.entries.len() - superseded.len() + 1).saturating_sub(self.max_entries);
        let evicted_ids = victims(
            state
                .entries
                .values()
                .filter(|e| !superseded.contains(&e.id)),
            excess,
        );
        // Applied to memory first, then written with whatever the store still lacks;
        // undone when that fails and the caller wants nothing changed then.
        let backlog = state.disk.as_ref().map(Disk::backlog);
        let removed: Vec<OutboxEntry> = superseded
            .iter()
            .chain(&evicted_ids)
            .filter_map(|id| state.entries.remove(id))
            .collect();
        state.entries.insert(id, entry);
        state.next_id += 1;
        if let Some(disk) = &mut state.disk {
            for e in &removed {
                disk.gone(e.id);
            }
            disk.changed(id);
            disk.notified(receiver, group_key);
        }
        let written = match self.sync(state, true) {
            Err(e) if !keep_on_failure => {
                state.entries.remove(&id);
                for e in removed {
                    state.entries.insert(e.id, e);
                }
                if let (Some(disk), Some(backlog)) = (&mut state.disk, backlog) {
                    disk.restore(backlog);
                }
                return Err(e);
            }
            written => written,
        };
        let mut evicted: Vec<String> = removed
            .iter()
            .filter(|e| evicted_ids.contains(&e.id))
            .map(|e| e.notification.receiver.clone())
            .collect();
        evicted.append(&mut state.evicted);
        Ok(Enqueued {
            id,
            superseded: superseded.len(),
            evicted,
            durable: written.is_ok() && state.disk.is_some(),
        })
    }

    /// Brings the store in line with memory: nothing to do when it is; otherwise one
    /// attempt, unless the backoff after a failure has not ended (and `force` is off).
    /// A failure closes the store (redb refuses every transaction after an I/O error until
    /// it is reopened), is counted, and is logged when it is the first of a run of them.
    fn sync(&self, state: &mut State, force: bool) -> Result<(), OutboxError> {
        let State {
            entries,
            next_id,
            disk,
            evicted,
        } = state;
        let Some(disk) = disk.as_mut() else {
            return Ok(());
        };
        if disk.in_sync() {
            return Ok(());
        }
        let now = Instant::now();
        if !force && disk.retry_at.is_some_and(|at| now < at) {
            return Err(OutboxError::Waiting {
                path: disk.path.clone(),
            });
        }
        let was_failing = disk.failures > 0;
        match disk.catch_up(entries, next_id, self.max_entries) {
            Ok(more) => {
                if was_failing {
                    tracing::info!(
                        "notification outbox {}: written again after {} failed attempt(s); \
                         the {} notification(s) it holds are on disk",
                        disk.path.display(),
                        disk.failures,
                        entries.len()
                    );
                }
                disk.failures = 0;
                disk.retry_at = None;
                evicted.extend(more);
                Ok(())
            }
            Err(e) => {
                self.store_errors.fetch_add(1, Ordering::Relaxed);
                disk.store = None;
                disk.failures = disk.failures.saturating_add(1);
                disk.retry_at = now.checked_add(backoff(disk.failures));
                if was_failing {
                    tracing::debug!("{e} (attempt {})", disk.failures);
                } else {
                    tracing::error!(
                        "{e}; the {} notification(s) it should hold are kept in memory and \
                         delivered, and written once it works again (tried every {} at most)",
                        entries.len(),
                        humantime::format_duration(RETRY_LONGEST)
                    );
                }
                Err(e)
            }
        }
    }

    /// One attempt to bring a failing store in line with memory, when its backoff has
    /// ended (the delivery stage calls this every few hundred milliseconds; it does nothing
    /// while the store works). Returns the receivers of entries evicted on the way (a store
    /// opened late may bring more entries than the bound leaves room for), for counting.
    pub(crate) fn retry_store(&self) -> Vec<String> {
        let mut guard = self.lock();
        // Counted and logged inside.
        let _ = self.sync(&mut guard, false);
        std::mem::take(&mut guard.evicted)
    }

    /// Writes what the store lacks now, not waiting for the backoff (at shutdown, the last
    /// chance to keep what memory holds).
    pub fn flush(&self) -> Result<(), OutboxError> {
        let mut guard = self.lock();
        self.sync(&mut guard, true)
    }

    /// The receiver has the entry: remove it. Returns whether it was still there (a
    /// superseded or evicted entry is not). The entry leaves memory even when the store
    /// write fails (`Err`); its removal is written with the store's next success, and until
    /// then it may be delivered again after a restart (at least once).
    pub fn delivered(&self, id: EntryId) -> Result<bool, OutboxError> {
        self.remove(id)
    }

    /// The entry is given up (the receiver rejected it, or it expired): remove it.
    pub fn dropped(&self, id: EntryId) -> Result<bool, OutboxError> {
        self.remove(id)
    }

    fn remove(&self, id: EntryId) -> Result<bool, OutboxError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let was = state.entries.remove(&id).is_some();
        if was {
            if let Some(disk) = &mut state.disk {
                disk.gone(id);
            }
            self.sync(state, false)?;
        }
        Ok(was)
    }

    /// An attempt failed and will be retried at `next_attempt_at`. Missing ids (superseded
    /// meanwhile) are ignored, never re-created. The change is kept in memory when the
    /// store cannot take it (`Err`), and written later.
    pub fn failed(
        &self,
        id: EntryId,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> Result<bool, OutboxError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(entry) = state.entries.get_mut(&id) else {
            return Ok(false);
        };
        entry.attempts = entry.attempts.saturating_add(1);
        entry.next_attempt_at = next_attempt_at;
        // Stored scrubbed: an error may quote a URL or a reply that carries a token.
        entry.last_error = Some(crate::redact::scrub(error));
        if let Some(disk) = &mut state.disk {
            disk.changed(id);
        }
        self.sync(state, false)?;
        Ok(true)
    }

    /// Entries of `receiver` not due before `latest` become due at `latest`; returns how
    /// many. A retry time from before the wait a service may ask for was bounded (a
    /// `Retry-After` in 2099), or from a clock that was wrong, must not hold an entry for
    /// years.
    pub(crate) fn bring_forward(
        &self,
        receiver: &str,
        latest: DateTime<Utc>,
    ) -> Result<usize, OutboxError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut changed = Vec::new();
        for entry in state.entries.values_mut() {
            if entry.notification.receiver == receiver && entry.next_attempt_at > latest {
                entry.next_attempt_at = latest;
                changed.push(entry.id);
            }
        }
        if let Some(disk) = &mut state.disk {
            for id in &changed {
                disk.changed(*id);
            }
        }
        if !changed.is_empty() {
            self.sync(state, false)?;
        }
        Ok(changed.len())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }
}
