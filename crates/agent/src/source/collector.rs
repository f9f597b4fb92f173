//! The host's collectors behind one trait, and the one loop that runs them.
//!
//! Like node_exporter's registry, every collector is wrapped once: [`Collectors::run`]
//! times each, records its `gpu_sentinel_collector_success` and
//! `gpu_sentinel_collector_duration_seconds` (one [`FamilyHealth`]), says the first failure
//! of an outage in the log with its reason and the recovery when it ends. A collector only
//! reads and reports what went wrong; it neither times itself nor keeps a "said already"
//! flag of its own.
//!
//! Collectors run in the order they were added, each seeing what the earlier ones wrote
//! into the snapshot (the owners from `/proc` before the pods joined to them, the jobs
//! before their accounts); the list in [`super::host`] is that order.

use std::time::Instant;

use crate::model::{FamilyHealth, Snapshot};

/// One thing the host reads each collection (`/proc`, the kubelet, the kernel log, …).
pub trait Collector: Send {
    /// Its name in `gpu_sentinel_collector_success{collector=…}`.
    fn name(&self) -> &'static str;

    /// Adds what it reads to `snapshot`. An error fails the collector this tick and says
    /// why (logged once per outage by the loop, so it should name what and where);
    /// [`Collected::Absent`] leaves the collector out of this tick's health, as
    /// node_exporter leaves out hardware a host does not have.
    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected>;
}

/// How a collection that did not fail went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    /// Read; reported as a success.
    Done,
    /// Nothing to read on this host now (no Kubernetes node, no Slurm job); not reported.
    Absent,
}

/// The collectors of a host, run in order, each with its current outage.
#[derive(Default)]
pub(crate) struct Collectors {
    entries: Vec<Entry>,
}

struct Entry {
    collector: Box<dyn Collector>,
    /// The reason of the current outage and how many collections it has failed, `None`
    /// while it succeeds.
    failing: Option<(String, u64)>,
}

impl Collectors {
    /// Adds `collector` after those already added.
    pub fn push(&mut self, collector: Box<dyn Collector>) {
        self.entries.push(Entry {
            collector,
            failing: None,
        });
    }

    #[cfg(test)]
    /// The collectors' names, in the order they run.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.collector.name()).collect()
    }

    /// Runs every collector once over `snapshot`, appending each one's health to
    /// `families`.
    pub fn run(&mut self, snapshot: &mut Snapshot, families: &mut Vec<FamilyHealth>) {
        for entry in &mut self.entries {
            let name = entry.collector.name();
            let began = Instant::now();
            let outcome = entry.collector.collect(snapshot);
            let seconds = began.elapsed().as_secs_f64();
            let success = match outcome {
                Ok(Collected::Absent) => continue,
                Ok(Collected::Done) => {
                    if let Some((_, failed)) = entry.failing.take() {
                        tracing::info!(
                            collector = name,
                            "collector {name} works again, after {failed} failed collection{}",
                            if failed == 1 { "" } else { "s" }
                        );
                    }
                    true
                }
                Err(e) => {
                    entry.note_failure(name, format!("{e:#}"));
                    false
                }
            };
            families.push(FamilyHealth {
                name,
                seconds,
                success,
            });
        }
    }
}

impl Entry {
    /// Warns at the first failure of an outage; a different reason during the same outage
    /// (reset, then gone) is only a debug line, so a flapping cause cannot flood the log.
    fn note_failure(&mut self, name: &'static str, problem: String) {
        let failed = match &self.failing {
            None => {
                tracing::warn!(
                    collector = name,
                    "{problem} (gpu_sentinel_collector_success{{collector=\"{name}\"}} is 0; \
                     said once, and again when it works)"
                );
                0
            }
            Some((before, failed)) => {
                if *before != problem {
                    tracing::debug!(collector = name, "collector {name} still fails: {problem}");
                }
                *failed
            }
        };
        self.failing = Some((problem, failed + 1));
    }
}

#[cfg(test)]
mod tests;
