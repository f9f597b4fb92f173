//! dcgm-exporter's fields back into GPU samples, in the model's units: utilization from
//! percent to a ratio, frame buffer from MiB to bytes, energy from mJ to joules (the names
//! and units as `export::dcgm` renders them and dcgm-exporter's default counter set has
//! them; labels `gpu`, `UUID`, `modelName`, `pci_bus_id`, `Hostname`/`hostname`,
//! `DCGM_FI_DRIVER_VERSION`).
//!
//! dcgm-exporter has no `up` series: a GPU exists at a step while any of its fields other
//! than the XID gauge is served, and a GPU that falls off the bus simply stops (the engine
//! calls it lost once it has been missing long enough, as when NVML stops listing it).
//! Not in this dialect: processes, the CUDA version, clock maxima, fan speed, P-state, PCIe
//! link generation and width, per-link NVLink counters (the totals over all links are kept
//! as one link), repeated XIDs of the same code.

use std::collections::BTreeMap;

use super::{Skip, StepBuild, count, finite, label, small, text};
use crate::model::{ClockEvents, Gpm, GpuSample, NvLinkErrors, RemappedRows, RetiredPages};

/// Every field the rebuild reads.
pub const METRICS: &[&str] = &[
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
];

/// Fields another stands in for: the clock-event reasons' older name, the profiling
/// utilization where the device one is collected (and the other way round).
pub(crate) const ABSENT_OR_STOOD_IN: &[(&str, Option<&str>)] = &[
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        Some("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),
    ),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        Some("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        Some("DCGM_FI_DEV_GPU_UTIL"),
    ),
    (
        "DCGM_FI_DEV_GPU_UTIL",
        Some("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    ),
];

const MIB: f64 = (1u64 << 20) as f64;

/// Folds one point of field `name` into the step.
pub(super) fn apply(
    name: &str,
    labels: &BTreeMap<String, String>,
    value: f64,
    step: &mut StepBuild,
) -> Result<(), Skip> {
    let (index, uuid) = (label(labels, "gpu"), label(labels, "UUID"));
    if let Some(hostname) = text(labels, "Hostname").or_else(|| text(labels, "hostname")) {
        step.host.hostname = hostname;
    }
    if let Some(driver) = text(labels, "DCGM_FI_DRIVER_VERSION") {
        step.host.driver_version = Some(driver);
    }
    if name == "DCGM_FI_DEV_XID_ERRORS" {
        // The gauge's value is the last XID; `err_code` says the same where present.
        let xid = match label(labels, "err_code").parse::<u32>() {
            Ok(code) => code,
            Err(_) => small(value).ok_or("XID value is not a number")?,
        };
        let gpu = step.gpu(index, uuid)?.sample.index;
        step.xid(gpu, uuid, xid, value);
        return Ok(());
    }
    let gpu = step.gpu(index, uuid)?;
    gpu.present = true;
    // A MIG GPU instance's engine activity is not its GPU's utilization (dcgm-exporter
    // gives none of the GPU in MIG mode).
    if name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" && text(labels, "GPU_I_ID").is_some() {
        return Ok(());
    }
    let s = &mut gpu.sample;
    if let Some(model) = text(labels, "modelName") {
        s.name = model;
    }
    if let Some(bus) = text(labels, "pci_bus_id") {
        s.pci_bus_id = bus;
    }
    reading(name, value, s);
    Ok(())
}

fn percent(value: f64) -> Option<f64> {
    finite(value).map(|p| p / 100.0)
}

fn mib(value: f64) -> Option<u64> {
    finite(value).and_then(|v| count(v * MIB))
}

fn reading(name: &str, value: f64, s: &mut GpuSample) {
    match name {
        "DCGM_FI_DEV_GPU_UTIL" => s.utilization.gpu = percent(value),
        // The profiling field where the device field is not collected.
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => {
            s.utilization.gpu = s.utilization.gpu.or(finite(value));
        }
        "DCGM_FI_DEV_MEM_COPY_UTIL" => s.utilization.memory_copy = percent(value),
        "DCGM_FI_DEV_ENC_UTIL" => s.utilization.encoder = percent(value),
        "DCGM_FI_DEV_DEC_UTIL" => s.utilization.decoder = percent(value),
        "DCGM_FI_DEV_FB_USED" => s.memory.used_bytes = mib(value),
        "DCGM_FI_DEV_FB_FREE" => s.memory.free_bytes = mib(value),
        "DCGM_FI_DEV_FB_RESERVED" => s.memory.reserved_bytes = mib(value),
        "DCGM_FI_DEV_GPU_TEMP" => s.temperature_celsius = finite(value),
        "DCGM_FI_DEV_MEMORY_TEMP" => s.memory_temperature_celsius = finite(value),
        "DCGM_FI_DEV_POWER_USAGE" => s.power_watts = finite(value),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT" => s.power_limit_watts = finite(value),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => s.energy_joules = finite(value / 1000.0),
        "DCGM_FI_DEV_SM_CLOCK" => s.clocks.sm = small(value),
        "DCGM_FI_DEV_MEM_CLOCK" => s.clocks.memory = small(value),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" | "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" => {
            s.clock_events = count(value).map(ClockEvents);
        }
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" => s.ecc.corrected_volatile = count(value),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" => s.ecc.uncorrected_volatile = count(value),
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL" => s.ecc.corrected_aggregate = count(value),
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL" => s.ecc.uncorrected_aggregate = count(value),
        "DCGM_FI_DEV_RETIRED_SBE" | "DCGM_FI_DEV_RETIRED_DBE" | "DCGM_FI_DEV_RETIRED_PENDING" => {
            let pages = s.retired_pages.get_or_insert(RetiredPages::default());
            let n = count(value).unwrap_or(0);
            match name {
                "DCGM_FI_DEV_RETIRED_SBE" => pages.sbe = n,
                "DCGM_FI_DEV_RETIRED_DBE" => pages.dbe = n,
                _ => pages.pending = value >= 1.0,
            }
        }
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
        | "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
        | "DCGM_FI_DEV_ROW_REMAP_FAILURE"
        | "DCGM_FI_DEV_ROW_REMAP_PENDING" => {
            let rows = s.remapped_rows.get_or_insert(RemappedRows::default());
            let n = count(value).unwrap_or(0);
            match name {
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS" => rows.correctable = n,
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" => rows.uncorrectable = n,
                "DCGM_FI_DEV_ROW_REMAP_FAILURE" => rows.failure = value >= 1.0,
                _ => rows.pending = value >= 1.0,
            }
        }
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" => s.pcie.replay_counter = count(value),
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
        | "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
        | "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
        | "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL" => {
            // The totals over all links, kept as one link: the engine sums links anyway.
            if s.nvlink.is_empty() {
                s.nvlink.push(NvLinkErrors::default());
            }
            let n = count(value).unwrap_or(0);
            let all = &mut s.nvlink[0];
            match name {
                "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" => all.crc_flit = n,
                "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL" => all.crc_data = n,
                "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL" => all.replay = n,
                _ => all.recovery = n,
            }
        }
        "DCGM_FI_PROF_SM_ACTIVE" => s.gpm.get_or_insert(Gpm::default()).sm_active = finite(value),
        "DCGM_FI_PROF_SM_OCCUPANCY" => {
            s.gpm.get_or_insert(Gpm::default()).sm_occupancy = finite(value);
        }
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" => {
            s.gpm.get_or_insert(Gpm::default()).tensor_active = finite(value);
        }
        "DCGM_FI_PROF_DRAM_ACTIVE" => {
            s.gpm.get_or_insert(Gpm::default()).dram_active = finite(value);
        }
        "DCGM_FI_PROF_PCIE_TX_BYTES" => s.pcie.tx_bytes_per_second = finite(value),
        "DCGM_FI_PROF_PCIE_RX_BYTES" => s.pcie.rx_bytes_per_second = finite(value),
        _ => {}
    }
}

/// Frame-buffer total as NVML has it: used + free + reserved (dcgm-exporter serves no
/// total). Left empty unless used and free are both there.
pub(super) fn derive_total(s: &mut GpuSample) {
    let m = &mut s.memory;
    if let (None, Some(used), Some(free)) = (m.total_bytes, m.used_bytes, m.free_bytes) {
        m.total_bytes = used
            .checked_add(free)
            .and_then(|t| t.checked_add(m.reserved_bytes.unwrap_or(0)));
    }
}
