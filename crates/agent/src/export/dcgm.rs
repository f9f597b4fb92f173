//! dcgm-exporter compatibility (`[export] dcgm_compat = true`): the `DCGM_FI_*` names,
//! units and labels of dcgm-exporter, rendered in addition to the native families, so its
//! Grafana dashboard (grafana.com 12239) and alert rules written against it keep working.
//!
//! Units are dcgm-exporter's, not ours: clocks in MHz, temperatures in °C, power in W,
//! energy in mJ, frame buffer in MiB (integer, rounded down, as DCGM reports it),
//! utilization in integer percent; the profiling (`DCGM_FI_PROF_*`) fields are ratios 0–1
//! and PCIe throughput bytes per second, as in dcgm-exporter's default counter set.
//!
//! Labels follow dcgm-exporter's GPU template: `gpu`, `UUID`, `pci_bus_id`, `device`
//! (`nvidia<index>`), `modelName`, the hostname label, and `DCGM_FI_DRIVER_VERSION` (the
//! counter set's one `label`-type field), then `pod`, `namespace`, `container` (as its
//! kubelet pod mapper adds them) and `hpc_job` (its HPC job mapping) when a scheduler gave
//! the GPU to someone; `DCGM_FI_DEV_XID_ERRORS` adds `err_code`. The
//! hostname label is `Hostname` in every dcgm-exporter release up to 4.4.2-4.7.x and
//! `hostname` from 4.6.0-4.8.3 (NVIDIA/dcgm-exporter#655); [`HostnameLabel`] picks one,
//! `Hostname` by default because that is what deployed rules and dashboards were written
//! against.
//!
//! Where our model has no source for a dcgm field, it is not rendered (see
//! `docs/metrics.md` and the module tests for the list).

use super::families::flag;
use super::metric_def::{MetricDef, MetricKind};
use crate::model::{GpuSample, NvLinkErrors};

/// Which spelling of dcgm-exporter's hostname label to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostnameLabel {
    /// `Hostname`, as dcgm-exporter releases up to 4.4.2-4.7.x emit it.
    #[default]
    Capitalised,
    /// `hostname`, as dcgm-exporter 4.6.0-4.8.3 and later emit it.
    Lowercase,
}

const MIB: u64 = 1 << 20;

/// How a field's value comes out of a GPU sample.
pub(super) type Reading = fn(&GpuSample) -> Option<f64>;

/// One dcgm-exporter field: its name, type and help, labels beyond the common ones, and
/// where its value comes from (`None` for fields that need more than one GPU's sample).
pub(super) struct Field {
    pub(super) name: &'static str,
    kind: MetricKind,
    help: &'static str,
    pub(super) reading: Option<Reading>,
}

const fn field(
    name: &'static str,
    kind: MetricKind,
    help: &'static str,
    reading: Reading,
) -> Field {
    Field {
        name,
        kind,
        help,
        reading: Some(reading),
    }
}

use MetricKind::{Counter, Gauge};

pub(super) const XID_ERRORS: &str = "DCGM_FI_DEV_XID_ERRORS";

fn mhz(value: Option<u32>) -> Option<f64> {
    value.map(f64::from)
}

fn percent(ratio: Option<f64>) -> Option<f64> {
    ratio.map(|r| (r * 100.0).round())
}

fn mib(bytes: Option<u64>) -> Option<f64> {
    bytes.map(|b| (b / MIB) as f64)
}

fn count(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// Sum of one NVLink error counter over the GPU's links; none where it has no NVLink.
fn nvlink_total(sample: &GpuSample, counter: fn(&NvLinkErrors) -> u64) -> Option<f64> {
    (!sample.nvlink.is_empty()).then(|| sample.nvlink.iter().map(counter).sum::<u64>() as f64)
}

/// Every field rendered, in exposition order (dcgm-exporter's default counter order, with
/// the optional fields we can give next to their kin).
pub(super) const FIELDS: &[Field] = &[
    field(
        "DCGM_FI_DEV_SM_CLOCK",
        Gauge,
        "SM clock frequency, in MHz.",
        |s| mhz(s.clocks.sm),
    ),
    field(
        "DCGM_FI_DEV_MEM_CLOCK",
        Gauge,
        "Memory clock frequency, in MHz.",
        |s| mhz(s.clocks.memory),
    ),
    field(
        "DCGM_FI_DEV_MEMORY_TEMP",
        Gauge,
        "Memory (HBM) temperature, in degrees C.",
        |s| s.memory_temperature_celsius,
    ),
    field(
        "DCGM_FI_DEV_GPU_TEMP",
        Gauge,
        "GPU temperature, in degrees C.",
        |s| s.temperature_celsius,
    ),
    field("DCGM_FI_DEV_POWER_USAGE", Gauge, "Power draw, in W.", |s| {
        s.power_watts
    }),
    field(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        Gauge,
        "Power management limit, in W.",
        |s| s.power_limit_watts,
    ),
    field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        Counter,
        "Energy consumed since the driver was loaded, in mJ.",
        |s| s.energy_joules.map(|j| (j * 1000.0).round()),
    ),
    field(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        Counter,
        "PCIe replays (retries) since the driver was loaded.",
        |s| count(s.pcie.replay_counter),
    ),
    field(
        "DCGM_FI_DEV_GPU_UTIL",
        Gauge,
        "GPU utilization, in %.",
        |s| percent(s.utilization.gpu),
    ),
    field(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        Gauge,
        "Memory copy utilization, in %.",
        |s| percent(s.utilization.memory_copy),
    ),
    field(
        "DCGM_FI_DEV_ENC_UTIL",
        Gauge,
        "Encoder utilization, in %.",
        |s| percent(s.utilization.encoder),
    ),
    field(
        "DCGM_FI_DEV_DEC_UTIL",
        Gauge,
        "Decoder utilization, in %.",
        |s| percent(s.utilization.decoder),
    ),
    Field {
        name: XID_ERRORS,
        kind: Gauge,
        help: "Number of the last XID error seen on the GPU, 0 when none since start.",
        reading: None,
    },
    field(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        Gauge,
        "Active clock-event (throttle) reasons as NVML's bitmask.",
        |s| s.clock_events.map(|e| e.0 as f64),
    ),
    field(
        "DCGM_FI_DEV_FB_FREE",
        Gauge,
        "Frame-buffer memory free, in MiB.",
        |s| mib(s.memory.free_bytes),
    ),
    field(
        "DCGM_FI_DEV_FB_USED",
        Gauge,
        "Frame-buffer memory used, in MiB.",
        |s| mib(s.memory.used_bytes),
    ),
    field(
        "DCGM_FI_DEV_FB_RESERVED",
        Gauge,
        "Frame-buffer memory reserved by the driver, in MiB.",
        |s| mib(s.memory.reserved_bytes),
    ),
    field(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        Counter,
        "Single-bit (corrected) ECC errors since the driver was loaded.",
        |s| count(s.ecc.corrected_volatile),
    ),
    field(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        Counter,
        "Double-bit (uncorrected) ECC errors since the driver was loaded.",
        |s| count(s.ecc.uncorrected_volatile),
    ),
    field(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        Counter,
        "Single-bit (corrected) ECC errors over the GPU's lifetime.",
        |s| count(s.ecc.corrected_aggregate),
    ),
    field(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        Counter,
        "Double-bit (uncorrected) ECC errors over the GPU's lifetime.",
        |s| count(s.ecc.uncorrected_aggregate),
    ),
    field(
        "DCGM_FI_DEV_RETIRED_SBE",
        Counter,
        "Pages retired for single-bit errors.",
        |s| s.retired_pages.map(|p| p.sbe as f64),
    ),
    field(
        "DCGM_FI_DEV_RETIRED_DBE",
        Counter,
        "Pages retired for double-bit errors.",
        |s| s.retired_pages.map(|p| p.dbe as f64),
    ),
    field(
        "DCGM_FI_DEV_RETIRED_PENDING",
        Counter,
        "Pages pending retirement (NVML reports whether any are: 0 or 1).",
        |s| s.retired_pages.map(|p| flag(p.pending)),
    ),
    field(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        Counter,
        "NVLink flow-control CRC errors, all links.",
        |s| nvlink_total(s, |l| l.crc_flit),
    ),
    field(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        Counter,
        "NVLink data CRC errors, all links.",
        |s| nvlink_total(s, |l| l.crc_data),
    ),
    field(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        Counter,
        "NVLink replays (retries), all links.",
        |s| nvlink_total(s, |l| l.replay),
    ),
    field(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        Counter,
        "NVLink recoveries, all links.",
        |s| nvlink_total(s, |l| l.recovery),
    ),
    field(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Counter,
        "Rows remapped for uncorrectable errors.",
        |s| s.remapped_rows.map(|r| r.uncorrectable as f64),
    ),
    field(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        Counter,
        "Rows remapped for correctable errors.",
        |s| s.remapped_rows.map(|r| r.correctable as f64),
    ),
    field(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        Gauge,
        "1 when a row remap failed, else 0.",
        |s| s.remapped_rows.map(|r| flag(r.failure)),
    ),
    field(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        Gauge,
        "1 when a row remap waits for a GPU reset, else 0.",
        |s| s.remapped_rows.map(|r| flag(r.pending)),
    ),
    field(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        Gauge,
        "Ratio of time the graphics engine is active (from NVML GPU utilization; on a GPU in MIG mode, per GPU instance from GPM graphics activity).",
        |s| s.utilization.gpu,
    ),
    field(
        "DCGM_FI_PROF_SM_ACTIVE",
        Gauge,
        "Ratio of cycles an SM has at least one warp assigned.",
        |s| s.gpm.and_then(|g| g.sm_active),
    ),
    field(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        Gauge,
        "Ratio of resident warps to the SM maximum.",
        |s| s.gpm.and_then(|g| g.sm_occupancy),
    ),
    field(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        Gauge,
        "Ratio of cycles a tensor pipe is active.",
        |s| s.gpm.and_then(|g| g.tensor_active),
    ),
    field(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        Gauge,
        "Ratio of cycles the memory interface is sending or receiving.",
        |s| s.gpm.and_then(|g| g.dram_active),
    ),
    field(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        Gauge,
        "PCIe transmit rate, headers and payload, in bytes per second.",
        |s| s.pcie.tx_bytes_per_second,
    ),
    field(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        Gauge,
        "PCIe receive rate, headers and payload, in bytes per second.",
        |s| s.pcie.rx_bytes_per_second,
    ),
];

/// Fields of dcgm-exporter's default counter set (and of its commented-out defaults) that
/// are not rendered, with the reason. Listed in the metrics reference.
pub(crate) const NOT_COVERED: &[(&str, &str)] = &[
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "NVLink throughput counters are not collected yet (NVML field \
         NVML_FI_DEV_NVLINK_THROUGHPUT_*); error counters per link are.",
    ),
    (
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "Licensing state of a vGPU inside a vGPU guest VM; not collected.",
    ),
    (
        "DCGM_FI_DEV_*_VIOLATION",
        "Throttle durations (commented out in the defaults): NVML's violation-status \
         timers are not collected; `gpu_clock_event_active` and \
         `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` show the reasons instead.",
    ),
    (
        "DCGM_FI_PROF_PIPE_FP64/FP32/FP16_ACTIVE",
        "Commented out in the defaults; the GPM sample does not carry the FP pipe ratios yet.",
    ),
    (
        "DCGM_EXP_*",
        "Computed by dcgm-exporter itself (clock-event and XID counts over a window, DCGM \
         health, P2P status); `gpu_xid_errors_total` and `gpu_clock_event_active` cover the \
         first two natively.",
    ),
    (
        "pod_uid, vgpu and DRA labels",
        "The `pod`, `namespace`, `container` and `hpc_job` labels are given (from the kubelet \
         and the Slurm mapping files).",
    ),
    (
        "whole-board fields repeated per MIG GPU instance",
        "dcgm-exporter repeats a MIG GPU's temperatures, power, clocks and error counters on \
         every GPU instance's series, with the same value; here they are one series of the \
         GPU, so sums over a node count each watt and error once. The fields MIG divides \
         (frame buffer, SM, tensor and DRAM activity) are per GPU instance, with \
         `GPU_I_PROFILE`, `GPU_I_ID` and the holding pod's labels.",
    ),
    (
        "err_msg label of DCGM_FI_DEV_XID_ERRORS",
        "dcgm-exporter's XID description text; `err_code` is given, and the class is on \
         `gpu_xid_errors_total`.",
    ),
];

/// The labels every dcgm series carries, per hostname spelling, and the same plus
/// `err_code` for `DCGM_FI_DEV_XID_ERRORS`. `GPU_I_PROFILE` and `GPU_I_ID` are empty (so
/// absent) but on the series of a MIG GPU instance, where dcgm-exporter's template puts them.
const LABELS_CAPITALISED: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "pod",
    "namespace",
    "container",
    "hpc_job",
];
const LABELS_LOWERCASE: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "hostname",
    "DCGM_FI_DRIVER_VERSION",
    "pod",
    "namespace",
    "container",
    "hpc_job",
];
const XID_LABELS_CAPITALISED: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "pod",
    "namespace",
    "container",
    "hpc_job",
    "err_code",
];
const XID_LABELS_LOWERCASE: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "hostname",
    "DCGM_FI_DRIVER_VERSION",
    "pod",
    "namespace",
    "container",
    "hpc_job",
    "err_code",
];

impl Field {
    pub(super) fn def(&self, hostname_label: HostnameLabel) -> MetricDef {
        let xid = self.name == XID_ERRORS;
        let labels = match (hostname_label, xid) {
            (HostnameLabel::Capitalised, false) => LABELS_CAPITALISED,
            (HostnameLabel::Lowercase, false) => LABELS_LOWERCASE,
            (HostnameLabel::Capitalised, true) => XID_LABELS_CAPITALISED,
            (HostnameLabel::Lowercase, true) => XID_LABELS_LOWERCASE,
        };
        MetricDef {
            name: self.name,
            kind: self.kind,
            labels,
            help: self.help,
        }
    }
}

/// The dcgm fields for the metrics reference, labels beyond the common ones only.
pub(crate) fn reference_defs() -> Vec<MetricDef> {
    FIELDS
        .iter()
        .map(|f| MetricDef {
            name: f.name,
            kind: f.kind,
            labels: if f.name == XID_ERRORS {
                &["pod", "namespace", "container", "hpc_job", "err_code"]
            } else {
                &["pod", "namespace", "container", "hpc_job"]
            },
            help: f.help,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_dcgm_shaped() {
        let mut seen = std::collections::BTreeSet::new();
        for f in FIELDS {
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert!(f.name.starts_with("DCGM_FI_"), "{}", f.name);
            assert_eq!(f.reading.is_none(), f.name == XID_ERRORS, "{}", f.name);
        }
    }

    #[test]
    fn units_are_dcgm_units() {
        let sample = GpuSample {
            up: true,
            energy_joules: Some(12.3456),
            memory: crate::model::Memory {
                used_bytes: Some(3 * MIB + MIB / 2),
                ..Default::default()
            },
            utilization: crate::model::Utilization {
                gpu: Some(0.427),
                ..Default::default()
            },
            ..Default::default()
        };
        let read = |name: &str| {
            FIELDS
                .iter()
                .find(|f| f.name == name)
                .and_then(|f| f.reading)
                .and_then(|r| r(&sample))
        };
        assert_eq!(read("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), Some(12346.0));
        assert_eq!(read("DCGM_FI_DEV_FB_USED"), Some(3.0));
        assert_eq!(read("DCGM_FI_DEV_GPU_UTIL"), Some(43.0));
        assert_eq!(read("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), Some(0.427));
        assert_eq!(read("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"), None);
        assert_eq!(read("DCGM_FI_DEV_GPU_TEMP"), None);
    }
}
