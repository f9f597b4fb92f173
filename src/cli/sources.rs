//! Opening the source a command reads: NVML with the host's own readers around it, or the
//! simulator.
//!
//! The choice depends on the whole configuration and the command line (`--simulate`), so
//! it is made here, at the top, and the sources themselves take only their own section
//! (`[collect]`, `[simulation]`).

use crate::config::Config;
use crate::source::Source;
use crate::source::host::HostSource;
use crate::source::nvml::NvmlSource;
use crate::source::simulate::SimulatedSource;

/// The source the configuration and command line ask for. Never falls back to simulated
/// data: without `--simulate`, a host without NVML is an error that says how to proceed.
pub fn open(config: &Config, simulate: bool) -> anyhow::Result<Box<dyn Source>> {
    if simulate {
        return Ok(Box::new(SimulatedSource::new(&config.simulation)));
    }
    let nvml = NvmlSource::from_config(&config.collect)?;
    Ok(Box::new(HostSource::new(Box::new(nvml), &config.collect)))
}
