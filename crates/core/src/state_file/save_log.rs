//! Failed saves of one state file, told without flooding the log.
//!
//! A state directory that fills up or turns read-only fails every save, and some files
//! are saved every collection. The first failure is a warning; further failures with the
//! same error are only counted (`gpu_sentinel_state_save_errors_total{file}`); a different
//! error is a new warning, and the first success after failures says so at info level.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The save outcomes of one state file: what was last told, and how many failed.
#[derive(Debug)]
pub struct SaveLog {
    /// What the file holds, for messages: "engine state", "alert state".
    what: &'static str,
    path: PathBuf,
    /// The error of the current run of failures; None while saves succeed.
    failing: Option<String>,
    /// Failures in the current run, for the message that ends it.
    run: u64,
    /// Failures since start; shared so another thread can render it.
    failures: Arc<AtomicU64>,
}

impl SaveLog {
    pub fn new(what: &'static str, path: PathBuf) -> SaveLog {
        SaveLog::counting_into(what, path, Arc::new(AtomicU64::new(0)))
    }

    /// A log that adds its failures to `failures` (a counter another log of the same file
    /// kept before, so the count never goes back).
    pub fn counting_into(what: &'static str, path: PathBuf, failures: Arc<AtomicU64>) -> SaveLog {
        SaveLog {
            what,
            path,
            failing: None,
            run: 0,
            failures,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Notes one save's outcome, logging only the first failure of a kind and recovery.
    pub fn record(&mut self, outcome: &std::io::Result<()>) {
        match outcome {
            Ok(()) => {
                if self.failing.take().is_some() {
                    tracing::info!(
                        "{} saved to {} again, after {} failed attempt(s)",
                        self.what,
                        self.path.display(),
                        self.run
                    );
                }
                self.run = 0;
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.run += 1;
                let error = e.to_string();
                if self.failing.as_deref() != Some(error.as_str()) {
                    tracing::warn!(
                        "cannot save {} to {}: {error} (until it changes, further failures \
                         are counted in gpu_sentinel_state_save_errors_total, not logged)",
                        self.what,
                        self.path.display()
                    );
                    self.failing = Some(error);
                }
            }
        }
    }

    /// Failed saves since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    /// The failure count, for a thread that renders it while this log lives elsewhere.
    pub(crate) fn failure_counter(&self) -> Arc<AtomicU64> {
        self.failures.clone()
    }
}
