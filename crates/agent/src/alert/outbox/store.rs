//! The outbox's store: one redb file of JSON entries, every change one fsynced
//! transaction, and every call guarded so that redb's panics on a damaged file become
//! [`OutboxError::Panicked`] — quietly: the clear error is what gets logged, not the panic.
//!
//! redb checks its pages with assertions, so some kinds of damage panic inside it. The
//! panic is caught ([`guarded`]), and a panic hook installed once, chained before whatever
//! hook was there, keeps it from being printed: it stays quiet only for a panic on a thread
//! that is inside a guarded store call at that moment, and hands every other panic to the
//! previous hook unchanged.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use redb::{Database, ReadableTable, TableDefinition};

use super::{EntryId, OutboxEntry, OutboxError};

/// Entries by id, JSON-encoded. The version is in the name: a future format gets a new table.
const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("notifications_v1");

/// How the store's database is opened: the file at the path, or (in tests) a backend that
/// can be made to fail like a full disk. Kept so the store can be opened again: after an
/// I/O error redb refuses every further transaction until the database is closed and
/// reopened.
#[derive(Clone)]
pub(super) struct Opener(Arc<OpenFn>);

type OpenFn = dyn Fn(&Path) -> Result<Database, redb::DatabaseError> + Send + Sync;

impl Opener {
    /// The redb file at the path, created when missing.
    pub fn file() -> Opener {
        Opener(Arc::new(|path: &Path| Database::create(path)))
    }

    #[cfg(test)]
    pub fn custom(
        open: impl Fn(&Path) -> Result<Database, redb::DatabaseError> + Send + Sync + 'static,
    ) -> Opener {
        Opener(Arc::new(open))
    }
}

pub(super) struct Store {
    pub path: PathBuf,
    db: Database,
}

impl Store {
    /// Opens (or creates) the store's file.
    pub fn create(path: &Path, opener: &Opener) -> Result<Store, OutboxError> {
        let db = (opener.0)(path).map_err(|e| store_error(path, e))?;
        Ok(Store {
            path: path.to_path_buf(),
            db,
        })
    }

    /// Reads every entry; undecodable ones (a damaged value, an unknown format) are removed
    /// with a warning rather than blocking the outbox forever.
    pub fn load(&self) -> Result<BTreeMap<EntryId, OutboxEntry>, OutboxError> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        {
            let txn = self.db.begin_write().map_err(|e| self.error(e))?;
            {
                // Opening the table for writing creates it on first use.
                let table = txn.open_table(ENTRIES).map_err(|e| self.error(e))?;
                for item in table.iter().map_err(|e| self.error(e))? {
                    let (key, value) = item.map_err(|e| self.error(e))?;
                    let id = key.value();
                    match serde_json::from_slice::<OutboxEntry>(value.value()) {
                        Ok(mut entry) => {
                            entry.id = id;
                            out.insert(id, entry);
                        }
                        Err(e) => {
                            tracing::warn!(
                                "notification outbox {}: entry {id} cannot be read ({e}); removed",
                                self.path.display()
                            );
                            bad.push(id);
                        }
                    }
                }
            }
            if !bad.is_empty() {
                let mut table = txn.open_table(ENTRIES).map_err(|e| self.error(e))?;
                for id in &bad {
                    table.remove(id).map_err(|e| self.error(e))?;
                }
            }
            txn.commit().map_err(|e| self.error(e))?;
        }
        Ok(out)
    }

    /// One transaction: delete `remove`, then upsert `put` (an id in both ends up put);
    /// durable when it returns.
    pub fn write(&self, put: &[&OutboxEntry], remove: &[EntryId]) -> Result<(), OutboxError> {
        guarded(&self.path, || self.write_unguarded(put, remove))
    }

    fn write_unguarded(&self, put: &[&OutboxEntry], remove: &[EntryId]) -> Result<(), OutboxError> {
        let encoded = put
            .iter()
            .map(|e| serde_json::to_vec(e).map(|bytes| (e.id, bytes)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| OutboxError::Encode {
                path: self.path.clone(),
                source,
            })?;
        let txn = self.db.begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(ENTRIES).map_err(|e| self.error(e))?;
            for id in remove {
                table.remove(id).map_err(|e| self.error(e))?;
            }
            for (id, bytes) in &encoded {
                table
                    .insert(id, bytes.as_slice())
                    .map_err(|e| self.error(e))?;
            }
        }
        txn.commit().map_err(|e| self.error(e))
    }

    fn error(&self, e: impl Into<redb::Error>) -> OutboxError {
        store_error(&self.path, e)
    }
}

thread_local! {
    /// Guarded store calls running on this thread (they nest: open loads and writes).
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// Where the quiet hook puts the message of a panic it kept from being printed.
    static CAUGHT: Cell<Option<String>> = const { Cell::new(None) };
}

static QUIET_HOOK: Once = Once::new();

/// Runs a store operation, turning a panic inside redb (which it raises on some kinds of
/// file damage) into an error, so a damaged file degrades durability instead of killing
/// the dispatcher or a delivery worker — and is reported once, clearly, by the caller.
pub(super) fn guarded<T>(
    path: &Path,
    op: impl FnOnce() -> Result<T, OutboxError>,
) -> Result<T, OutboxError> {
    install_quiet_hook();
    GUARDED.with(|g| g.set(g.get().saturating_add(1)));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(op));
    GUARDED.with(|g| g.set(g.get().saturating_sub(1)));
    result.unwrap_or_else(|payload| {
        let message = CAUGHT.with(Cell::take).unwrap_or_else(|| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".to_string())
        });
        Err(OutboxError::Panicked {
            path: path.to_path_buf(),
            message,
        })
    })
}

/// Chains a hook before the current one that stays quiet for panics inside [`guarded`]
/// (keeping their message, with its location, for the error) and passes on every other.
fn install_quiet_hook() {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) > 0 {
                let message = info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".to_string());
                // The crate's own path (redb-2.6.4/src/…), not the build machine's.
                let place = info
                    .location()
                    .map(|l| {
                        let file = l.file();
                        let file = file.find("redb-").map_or(file, |i| &file[i..]);
                        format!(" at {file}:{}", l.line())
                    })
                    .unwrap_or_default();
                // One line: redb's assertion messages span several.
                let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
                CAUGHT.with(|c| c.set(Some(format!("{message}{place}"))));
            } else {
                previous(info);
            }
        }));
    });
}

pub(super) fn store_error(path: &Path, e: impl Into<redb::Error>) -> OutboxError {
    match e.into() {
        redb::Error::DatabaseAlreadyOpen => OutboxError::InUse {
            path: path.to_path_buf(),
        },
        source => OutboxError::Store {
            path: path.to_path_buf(),
            source: Box::new(source),
        },
    }
}
