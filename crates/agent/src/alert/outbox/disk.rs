//! The outbox's file, and what memory holds that the file lacks: a failing store (a full
//! disk, an I/O error) is closed, retried with a backoff, and caught up in one transaction
//! once it works (see the outbox's module documentation).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::EntryId;
use super::entry::{OutboxEntry, OutboxError, stale_on_load, victims};
use super::store::{Opener, Store, guarded};

/// First wait before a failed store is tried again; doubled after each further failure.
pub(super) const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between attempts: once the disk has room again, what memory holds is on it
/// within this (sooner when a notification comes).
pub(super) const RETRY_LONGEST: Duration = Duration::from_secs(10);

/// The store, and what memory holds that its file lacks.
pub(super) struct Disk {
    pub(super) path: PathBuf,
    pub(super) opener: Opener,
    /// None until it first opened, and after a failure closed it.
    pub(super) store: Option<Store>,
    /// Whether the file's entries have been read (false while it never opened).
    pub(super) loaded: bool,
    /// Entries new or changed in memory and not yet written.
    pub(super) unwritten: BTreeSet<EntryId>,
    /// Entries gone from memory that the file may still hold.
    pub(super) unremoved: BTreeSet<EntryId>,
    /// Groups `(receiver, group_key)` notified before the file's entries were read: the
    /// file's entries of these are older than memory's and must not come back.
    pub(super) notified_unloaded: BTreeSet<(String, String)>,
    /// Failed attempts in a row (the backoff's exponent); 0 while the store works.
    pub(super) failures: u32,
    /// No attempt before this unless forced.
    pub(super) retry_at: Option<Instant>,
}

/// What [`Disk`] has to catch up on, saved so a failed enqueue can be undone.
pub(super) type Backlog = (
    BTreeSet<EntryId>,
    BTreeSet<EntryId>,
    BTreeSet<(String, String)>,
);

impl Disk {
    pub(super) fn new(path: &Path, opener: Opener, store: Option<Store>) -> Disk {
        Disk {
            path: path.to_path_buf(),
            opener,
            loaded: store.is_some(),
            store,
            unwritten: BTreeSet::new(),
            unremoved: BTreeSet::new(),
            notified_unloaded: BTreeSet::new(),
            failures: 0,
            retry_at: None,
        }
    }

    /// The file holds exactly what memory holds (the store may be closed after a failure:
    /// it is opened again when there is something to write).
    pub(super) fn in_sync(&self) -> bool {
        self.loaded && self.unwritten.is_empty() && self.unremoved.is_empty()
    }

    pub(super) fn changed(&mut self, id: EntryId) {
        self.unwritten.insert(id);
    }

    pub(super) fn gone(&mut self, id: EntryId) {
        self.unwritten.remove(&id);
        self.unremoved.insert(id);
    }

    /// A notification of the group came; before the file is read that makes its entries
    /// of the group stale.
    pub(super) fn notified(&mut self, receiver: &str, group_key: &str) {
        if !self.loaded {
            self.notified_unloaded
                .insert((receiver.to_string(), group_key.to_string()));
        }
    }

    pub(super) fn backlog(&self) -> Backlog {
        (
            self.unwritten.clone(),
            self.unremoved.clone(),
            self.notified_unloaded.clone(),
        )
    }

    pub(super) fn restore(&mut self, (unwritten, unremoved, notified): Backlog) {
        self.unwritten = unwritten;
        self.unremoved = unremoved;
        self.notified_unloaded = notified;
    }

    /// Writes what the file lacks, in one transaction, opening the store first when it is
    /// closed. A file found damaged is moved aside and a fresh one gets everything.
    pub(super) fn catch_up(
        &mut self,
        entries: &mut BTreeMap<EntryId, OutboxEntry>,
        next_id: &mut EntryId,
        max_entries: usize,
    ) -> Result<Vec<String>, OutboxError> {
        let path = self.path.clone();
        match guarded(&path, || self.try_catch_up(entries, next_id, max_entries)) {
            Err(e) if e.is_corrupt() => {
                // Closed before the file is moved.
                self.store = None;
                let aside = set_aside(&path).map_err(|source| OutboxError::Io {
                    path: path.clone(),
                    source,
                })?;
                tracing::error!(
                    "{e}; moved it to {} and started an empty store: the {} notification(s) \
                     in memory are written to it, those only in the damaged file are not \
                     delivered",
                    aside.display(),
                    entries.len()
                );
                self.loaded = true;
                self.unwritten = entries.keys().copied().collect();
                self.unremoved.clear();
                self.notified_unloaded.clear();
                guarded(&path, || self.try_catch_up(entries, next_id, max_entries))
            }
            other => other,
        }
    }

    pub(super) fn try_catch_up(
        &mut self,
        entries: &mut BTreeMap<EntryId, OutboxEntry>,
        next_id: &mut EntryId,
        max_entries: usize,
    ) -> Result<Vec<String>, OutboxError> {
        // On an error below the store is dropped, i.e. closed: redb wants a reopen then.
        let store = match self.store.take() {
            Some(store) => store,
            None => Store::create(&self.path, &self.opener)?,
        };
        let evicted = if self.loaded {
            let put: Vec<&OutboxEntry> = self
                .unwritten
                .iter()
                .filter_map(|id| entries.get(id))
                .collect();
            let remove: Vec<EntryId> = self.unremoved.iter().copied().collect();
            store.write(&put, &remove)?;
            Vec::new()
        } else {
            self.adopt(&store, entries, next_id, max_entries)?
        };
        self.loaded = true;
        self.unwritten.clear();
        self.unremoved.clear();
        self.notified_unloaded.clear();
        self.store = Some(store);
        Ok(evicted)
    }

    /// Takes in the entries of a store that opened only after notifications were accepted:
    /// those of groups notified meanwhile are older than memory's and deleted; the others
    /// get ids after memory's (nobody holds their old ones yet), keeping their order, as
    /// far as the bound allows. Returns the receivers of the entries evicted for it.
    pub(super) fn adopt(
        &self,
        store: &Store,
        entries: &mut BTreeMap<EntryId, OutboxEntry>,
        next_id: &mut EntryId,
        max_entries: usize,
    ) -> Result<Vec<String>, OutboxError> {
        let mut found = store.load()?;
        let old_keys: Vec<EntryId> = found.keys().copied().collect();
        for id in stale_on_load(&found) {
            found.remove(&id);
        }
        let mut id = *next_id;
        let mut adopted = BTreeMap::new();
        for mut entry in found.into_values() {
            let group = (
                entry.notification.receiver.clone(),
                entry.notification.group_key.clone(),
            );
            if self.notified_unloaded.contains(&group) {
                continue;
            }
            entry.id = id;
            adopted.insert(id, entry);
            id += 1;
        }
        let excess = adopted
            .len()
            .saturating_sub(max_entries.saturating_sub(entries.len()));
        let evicted: Vec<String> = victims(adopted.values(), excess)
            .iter()
            .filter_map(|id| adopted.remove(id))
            .map(|e| e.notification.receiver)
            .collect();
        {
            // Every old key goes first: a re-numbered entry or one from memory may take it.
            let put: Vec<&OutboxEntry> = entries.values().chain(adopted.values()).collect();
            store.write(&put, &old_keys)?;
        }
        if !evicted.is_empty() {
            tracing::warn!(
                "notification outbox {}: {} older notification(s) found in it did not fit \
                 next to those accepted meanwhile and were evicted",
                self.path.display(),
                evicted.len()
            );
        }
        *next_id = id;
        entries.extend(adopted);
        Ok(evicted)
    }
}

/// Renames a damaged store file to `<name>.corrupt-<unix seconds>`, kept for inspection.
pub(super) fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = Utc::now().timestamp();
    let aside = PathBuf::from(format!("{}.corrupt-{stamp}", path.display()));
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

/// The wait after `failures` failed attempts in a row: 1 s doubling, at most 10 s.
pub(super) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1u32 << exp).min(RETRY_LONGEST)
}
