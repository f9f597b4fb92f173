//! Locks that outlive a panic.
//!
//! A mutex is poisoned when a thread panics while holding it. Everything this crate keeps
//! behind a lock (counters, caches, the outbox's map, the secret registry) is changed by
//! single assignments, inserts and removes, so a panic elsewhere cannot leave it half
//! updated: the data is as good after the panic as before. Giving up on it instead would
//! turn one caught panic (a delivery worker, the advice thread) into a dead agent. These
//! helpers take the guard either way; they are the one place that decision is made.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, poisoned or not.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads `lock`, poisoned or not.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes `lock`, poisoned or not.
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
