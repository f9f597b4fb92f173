//! gpu-sentinel's own families back into GPU samples: the inverse of the exposition
//! (`export::render`), for every field the engine reads. Units are already the model's
//! (bytes, watts, °C, ratios) except clocks, served in hertz and kept in MHz.
//!
//! A GPU exists at a step while `gpu_info` or `gpu_up` lists it; `gpu_up 0` makes it lost,
//! as the exporter renders a lost GPU (identity and XIDs, nothing else). The engine's own
//! outputs (`gpu_failure_risk_*`, `gpu_idle_seconds`, …) are not read: the replay computes
//! them afresh. Processes come from `gpu_process_*`, without their PID's liveness (the
//! store never had it), so ghost processes cannot be told from live ones.

use std::collections::BTreeMap;

use super::{GpuBuild, Skip, StepBuild, count, finite, label, small, text};
use crate::model::{ClockEvents, Gpm, NvLinkErrors, ProcessSample, RemappedRows, RetiredPages};

/// Every family the rebuild reads.
pub const METRICS: &[&str] = &[
    "gpu_info",
    "gpu_up",
    "gpu_utilization_ratio",
    "gpu_memory_copy_utilization_ratio",
    "gpu_encoder_utilization_ratio",
    "gpu_decoder_utilization_ratio",
    "gpu_memory_total_bytes",
    "gpu_memory_used_bytes",
    "gpu_memory_free_bytes",
    // Served by agents before the series budget; the engine does not read it.
    "gpu_memory_reserved_bytes",
    "gpu_temperature_celsius",
    "gpu_memory_temperature_celsius",
    "gpu_power_watts",
    "gpu_power_limit_watts",
    "gpu_energy_joules_total",
    "gpu_clock_hertz",
    "gpu_clock_max_hertz",
    "gpu_fan_speed_ratio",
    "gpu_performance_state",
    "gpu_clock_event_active",
    "gpu_ecc_errors_total",
    "gpu_retired_pages",
    "gpu_retired_pages_pending",
    "gpu_remapped_rows_total",
    "gpu_remapped_rows_pending",
    "gpu_remapped_rows_failure",
    "gpu_pcie_replays_total",
    "gpu_pcie_link_generation",
    "gpu_pcie_link_width",
    "gpu_pcie_throughput_bytes_per_second",
    "gpu_nvlink_errors_total",
    "gpu_xid_errors_total",
    "gpu_sm_active_ratio",
    "gpu_sm_occupancy_ratio",
    "gpu_tensor_active_ratio",
    "gpu_dram_active_ratio",
    "gpu_process_memory_bytes",
    "gpu_process_utilization_ratio",
];

/// Families whose absence means "none happened": the XID counter appears with the first
/// XID, the process series with the first process.
pub(crate) const ABSENT_OR_STOOD_IN: &[(&str, Option<&str>)] = &[
    ("gpu_xid_errors_total", None),
    ("gpu_process_memory_bytes", None),
    ("gpu_process_utilization_ratio", None),
];

const HERTZ_PER_MHZ: f64 = 1e6;

/// Folds one point of series `name` into the step.
pub(super) fn apply(
    name: &str,
    labels: &BTreeMap<String, String>,
    value: f64,
    step: &mut StepBuild,
) -> Result<(), Skip> {
    let (index, uuid) = (label(labels, "gpu"), label(labels, "uuid"));
    match name {
        "gpu_xid_errors_total" => {
            let xid = label(labels, "xid")
                .parse()
                .map_err(|_| "xid label is not a number")?;
            let gpu = step.gpu(index, uuid)?.sample.index;
            step.xid(gpu, uuid, xid, value);
            Ok(())
        }
        "gpu_process_memory_bytes" | "gpu_process_utilization_ratio" => {
            let pid: u32 = label(labels, "pid")
                .parse()
                .map_err(|_| "pid label is not a number")?;
            let gpu: u32 = index.parse().map_err(|_| "gpu label is not an index")?;
            if uuid.is_empty() {
                return Err("no GPU UUID label");
            }
            let process = step.process(gpu, uuid, pid);
            owner(process, labels);
            if name == "gpu_process_memory_bytes" {
                process.used_memory_bytes = count(value);
            } else {
                process.sm_utilization = finite(value);
            }
            Ok(())
        }
        "gpu_info" => {
            if let Some(hostname) = text(labels, "hostname") {
                step.host.hostname = hostname;
            }
            step.host.driver_version = text(labels, "driver_version");
            step.host.cuda_version = text(labels, "cuda_version");
            let gpu = step.gpu(index, uuid)?;
            gpu.present = true;
            gpu.sample.name = label(labels, "name").to_string();
            gpu.sample.pci_bus_id = label(labels, "pci_bus_id").to_string();
            gpu.sample.serial = text(labels, "serial");
            Ok(())
        }
        _ => {
            let gpu = step.gpu(index, uuid)?;
            reading(name, labels, value, gpu);
            Ok(())
        }
    }
}

/// The owner labels of a `gpu_process_*` series.
fn owner(process: &mut ProcessSample, labels: &BTreeMap<String, String>) {
    process.process = text(labels, "process");
    process.user = text(labels, "user");
    process.container = text(labels, "container");
    process.pod = text(labels, "pod");
    process.namespace = text(labels, "namespace");
    process.hpc_job = text(labels, "hpc_job");
}

/// One per-GPU reading. Unknown label values (a `clock` or `error` this version does not
/// know) are ignored, as a newer exporter's additions should be.
fn reading(name: &str, labels: &BTreeMap<String, String>, value: f64, gpu: &mut GpuBuild) {
    let s = &mut gpu.sample;
    match name {
        "gpu_up" => {
            gpu.present = true;
            gpu.up = Some(value >= 1.0);
        }
        "gpu_utilization_ratio" => s.utilization.gpu = finite(value),
        "gpu_memory_copy_utilization_ratio" => s.utilization.memory_copy = finite(value),
        "gpu_encoder_utilization_ratio" => s.utilization.encoder = finite(value),
        "gpu_decoder_utilization_ratio" => s.utilization.decoder = finite(value),
        "gpu_memory_total_bytes" => s.memory.total_bytes = count(value),
        "gpu_memory_used_bytes" => s.memory.used_bytes = count(value),
        "gpu_memory_free_bytes" => s.memory.free_bytes = count(value),
        "gpu_memory_reserved_bytes" => s.memory.reserved_bytes = count(value),
        "gpu_temperature_celsius" => s.temperature_celsius = finite(value),
        "gpu_memory_temperature_celsius" => s.memory_temperature_celsius = finite(value),
        "gpu_power_watts" => s.power_watts = finite(value),
        "gpu_power_limit_watts" => s.power_limit_watts = finite(value),
        "gpu_energy_joules_total" => s.energy_joules = finite(value),
        "gpu_clock_hertz" | "gpu_clock_max_hertz" => {
            let clocks = if name == "gpu_clock_hertz" {
                &mut s.clocks
            } else {
                &mut s.clocks_max
            };
            let mhz = small((value / HERTZ_PER_MHZ).round());
            match label(labels, "clock") {
                "sm" => clocks.sm = mhz,
                "memory" => clocks.memory = mhz,
                "graphics" => clocks.graphics = mhz,
                "video" => clocks.video = mhz,
                _ => {}
            }
        }
        "gpu_fan_speed_ratio" => s.fan_speed_ratio = finite(value),
        "gpu_performance_state" => s.performance_state = small(value),
        "gpu_clock_event_active" => {
            let reason = label(labels, "reason");
            if let Some((_, bit)) = ClockEvents::REASONS.iter().find(|(r, _)| *r == reason) {
                let events = s.clock_events.get_or_insert(ClockEvents(0));
                if value >= 1.0 {
                    events.0 |= bit;
                }
            }
        }
        "gpu_ecc_errors_total" => {
            let n = count(value);
            match (label(labels, "error"), label(labels, "scope")) {
                ("corrected", "volatile") => s.ecc.corrected_volatile = n,
                ("uncorrected", "volatile") => s.ecc.uncorrected_volatile = n,
                ("corrected", "aggregate") => s.ecc.corrected_aggregate = n,
                ("uncorrected", "aggregate") => s.ecc.uncorrected_aggregate = n,
                _ => {}
            }
        }
        "gpu_retired_pages" | "gpu_retired_pages_pending" => {
            let pages = s.retired_pages.get_or_insert(RetiredPages::default());
            let n = count(value).unwrap_or(0);
            match (name, label(labels, "cause")) {
                ("gpu_retired_pages_pending", _) => pages.pending = value >= 1.0,
                (_, "sbe") => pages.sbe = n,
                (_, "dbe") => pages.dbe = n,
                _ => {}
            }
        }
        "gpu_remapped_rows_total" | "gpu_remapped_rows_pending" | "gpu_remapped_rows_failure" => {
            let rows = s.remapped_rows.get_or_insert(RemappedRows::default());
            let n = count(value).unwrap_or(0);
            match (name, label(labels, "error")) {
                ("gpu_remapped_rows_pending", _) => rows.pending = value >= 1.0,
                ("gpu_remapped_rows_failure", _) => rows.failure = value >= 1.0,
                (_, "correctable") => rows.correctable = n,
                (_, "uncorrectable") => rows.uncorrectable = n,
                _ => {}
            }
        }
        "gpu_pcie_replays_total" => s.pcie.replay_counter = count(value),
        "gpu_pcie_link_generation" => s.pcie.link_generation = small(value),
        "gpu_pcie_link_width" => s.pcie.link_width = small(value),
        "gpu_pcie_throughput_bytes_per_second" => match label(labels, "direction") {
            "tx" => s.pcie.tx_bytes_per_second = finite(value),
            "rx" => s.pcie.rx_bytes_per_second = finite(value),
            _ => {}
        },
        "gpu_nvlink_errors_total" => {
            // Without a link label (the default exposition) the series are the GPU's sum
            // over its links, read as one link, as dcgm-exporter's are.
            let link = match label(labels, "link") {
                "" => 0,
                named => match named.parse::<u32>() {
                    Ok(link) => link,
                    Err(_) => return,
                },
            };
            let at = match s.nvlink.iter().position(|l| l.link == link) {
                Some(at) => at,
                None => {
                    s.nvlink.push(NvLinkErrors {
                        link,
                        ..NvLinkErrors::default()
                    });
                    s.nvlink.sort_by_key(|l| l.link);
                    s.nvlink.iter().position(|l| l.link == link).unwrap_or(0)
                }
            };
            let n = count(value).unwrap_or(0);
            let errors = &mut s.nvlink[at];
            match label(labels, "error") {
                "replay" => errors.replay = n,
                "recovery" => errors.recovery = n,
                "crc_flit" => errors.crc_flit = n,
                "crc_data" => errors.crc_data = n,
                _ => {}
            }
        }
        "gpu_sm_active_ratio" => s.gpm.get_or_insert(Gpm::default()).sm_active = finite(value),
        "gpu_sm_occupancy_ratio" => {
            s.gpm.get_or_insert(Gpm::default()).sm_occupancy = finite(value);
        }
        "gpu_tensor_active_ratio" => {
            s.gpm.get_or_insert(Gpm::default()).tensor_active = finite(value);
        }
        "gpu_dram_active_ratio" => s.gpm.get_or_insert(Gpm::default()).dram_active = finite(value),
        _ => {}
    }
}
