//! Sources of snapshots: the real NVML library, the built-in simulator, recordings.
//!
//! A source is polled from the collection thread, never from the async runtime: NVML
//! calls are blocking C calls that can take hundreds of milliseconds on a sick GPU.

pub mod host;
pub mod kmsg;
pub mod nvml;
pub mod simulate;

use std::collections::BTreeMap;

use crate::model::Snapshot;

/// Something that can read every GPU once.
pub trait Source: Send {
    /// Reads every GPU once. Blocking; failures of single calls degrade single values and
    /// are reported in [`CollectHealth`], never as an error of the whole collection.
    fn collect(&mut self) -> Collection;

    /// Short human description for logs and the landing page, e.g. `nvml (driver 570.86.15)`.
    fn describe(&self) -> String;
}

/// One collection: the data, and how getting it went. Kept apart so that health renders
/// even when data is missing.
#[derive(Debug, Clone, Default)]
pub struct Collection {
    pub snapshot: Snapshot,
    pub health: CollectHealth,
}

/// How a collection went, per collector family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectHealth {
    /// False when the source itself is unavailable (NVML failed to initialise or vanished).
    pub source_up: bool,
    /// Each collector family (`memory`, `ecc`, `processes`, …) of this tick, in a fixed order.
    pub families: Vec<FamilyHealth>,
    /// Failed calls since start, by NVML function (or source operation) name. Unsupported
    /// calls are not failures: they are remembered per GPU and not asked again.
    pub errors_by_call: BTreeMap<String, u64>,
    /// Wall time of the whole collection, seconds.
    pub seconds: f64,
}

/// One collector family's outcome this tick.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyHealth {
    pub name: &'static str,
    /// Wall time spent in this family across all GPUs, seconds.
    pub seconds: f64,
    /// False when any call of the family failed on any GPU this tick.
    pub success: bool,
}

/// The source the configuration and command line ask for. Never falls back to simulated
/// data: without `--simulate`, a host without NVML is an error that says how to proceed.
pub fn open(config: &crate::config::Config, simulate: bool) -> anyhow::Result<Box<dyn Source>> {
    if simulate {
        return Ok(Box::new(simulate::SimulatedSource::new(&config.simulation)));
    }
    let nvml = nvml::NvmlSource::from_config(&config.collect)?;
    Ok(Box::new(host::HostSource::new(
        Box::new(nvml),
        &config.collect,
    )))
}
