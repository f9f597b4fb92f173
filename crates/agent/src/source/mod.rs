//! Sources of snapshots: the real NVML library, the built-in simulator, recordings.
//!
//! A source is polled from the collection thread, never from the async runtime: NVML
//! calls are blocking C calls that can take hundreds of milliseconds on a sick GPU.

pub mod collector;
pub mod host;
pub mod hpc_jobs;
pub mod kmsg;
pub mod kubelet;
pub mod nvml;
pub mod owners;
pub mod pci;
pub mod simulate;
pub mod slurm_accounts;
pub mod teams;

use crate::model::{CollectHealth, Snapshot};

/// Something that can read every GPU once.
pub trait Source: Send {
    /// Reads every GPU once. Blocking; failures of single calls degrade single values and
    /// are reported in [`CollectHealth`], never as an error of the whole collection.
    fn collect(&mut self) -> Collection;

    /// Short human description for logs and the board at `/`, e.g. `nvml (driver 570.86.15)`.
    fn describe(&self) -> String;
}

/// One collection: the data, and how getting it went. Kept apart so that health renders
/// even when data is missing.
#[derive(Debug, Clone, Default)]
pub struct Collection {
    pub snapshot: Snapshot,
    pub health: CollectHealth,
}
