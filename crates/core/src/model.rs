//! The data every part of gpu-sentinel agrees on: one [`Snapshot`] per collection tick.
//!
//! A source (NVML, the simulator, a recording) produces snapshots; the exposition renders
//! them; the engine (and `record`/`replay`) consume them. Values are stored in base units
//! (bytes, watts, joules, degrees Celsius, ratios 0–1) except clocks, kept in MHz as NVML
//! reports them. `None` means "this GPU did not give the value this tick" — unsupported,
//! failed, or not present in a recording — and renders as an absent series, never as 0.
//! [`sanitize`] clears values no GPU can report before anything reads them.

pub mod checks;
pub mod health;
pub mod mig;
pub mod pci;
pub mod sanitize;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use checks::{Fabric, FabricState, KernelLog};
pub use health::{CollectHealth, FamilyHealth};
pub use mig::{MigInstance, MigPlacement};
pub use pci::normalize_pci_bus_id;
pub use sanitize::{Checked, RejectedValues};

/// Everything one collection saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    /// When the collection ran. For the simulator this is simulated time, so accelerated
    /// runs and replays see the same clock the engine reasons about.
    pub at: DateTime<Utc>,
    /// Host-wide identity shared by every GPU.
    #[serde(default)]
    pub host: HostInfo,
    /// One entry per GPU known to the source, in index order, including lost ones (`up = false`).
    pub gpus: Vec<GpuSample>,
    /// Compute processes holding GPU memory, across all GPUs.
    #[serde(default)]
    pub processes: Vec<ProcessSample>,
    /// XID errors observed since the previous snapshot.
    #[serde(default)]
    pub events: Vec<XidEvent>,
    /// Who a scheduler gave each GPU to (the kubelet's pods, Slurm jobs), processes or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<Allocation>,
    /// The schedulers whose allocations of this host's GPUs are all in `allocations` this
    /// collection: `kubernetes` when the kubelet listed its pods, `slurm` when the job
    /// mapping sources were read. A GPU running processes that none of them gave out is
    /// used outside the scheduler.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduled_by: Vec<String>,
}

/// Identity of the host and driver stack, and what the host itself says of its GPUs
/// beyond NVML (read by the health verdicts' node components).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HostInfo {
    pub hostname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA driver API version, e.g. "12.8".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// PCI addresses of the NVIDIA display and 3D controllers the PCI bus lists (sysfs),
    /// whether NVML lists them or not; `None` where the bus was not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_gpus: Option<Vec<String>>,
    /// Whether the kernel log the XIDs are read from can be read; `None` where none is
    /// followed (turned off, or a source without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_log: Option<KernelLog>,
}

/// One GPU's readings at one tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuSample {
    /// NVML index. Stable only while the driver stays loaded; `uuid` is the real identity.
    pub index: u32,
    pub uuid: String,
    pub name: String,
    #[serde(default)]
    pub pci_bus_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// False when the GPU is lost (`GPU_IS_LOST`) or vanished from NVML; its data is then empty.
    pub up: bool,
    /// UUIDs (`MIG-…`) of the MIG devices carved out of this GPU, for mapping a scheduler's
    /// MIG allocations to their parent GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<String>,
    /// The MIG devices of a GPU in MIG mode, each with its profile, memory and activity,
    /// in NVML's order (absent from recordings made before they were read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_instances: Vec<MigInstance>,

    #[serde(default)]
    pub utilization: Utilization,
    #[serde(default)]
    pub memory: Memory,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<f64>,
    /// HBM temperature (NVML field 82, `NVML_FI_DEV_MEMORY_TEMP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_temperature_celsius: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_watts: Option<f64>,
    /// Energy since the driver was loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_joules: Option<f64>,
    /// Current clocks (MHz).
    #[serde(default)]
    pub clocks: Clocks,
    /// Maximum clocks (MHz).
    #[serde(default)]
    pub clocks_max: Clocks,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_speed_ratio: Option<f64>,
    /// P-state number: 0 is full performance, 15 the lowest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub performance_state: Option<u32>,
    /// Active clock-event (throttle) reasons, NVML's `nvmlClocksEventReasons` bitmask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_events: Option<ClockEvents>,
    #[serde(default)]
    pub ecc: Ecc,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<RetiredPages>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<RemappedRows>,
    #[serde(default)]
    pub pcie: Pcie,
    /// Error counters per active NVLink; empty where the GPU has no NVLink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink: Vec<NvLinkErrors>,
    /// NVLinks NVML lists as not active: a link that was active and is listed here is down.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink_inactive: Vec<u32>,
    /// The GPU's NVLink fabric registration (NVSwitch systems, Hopper and newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<Fabric>,
    /// GPU Performance Monitoring ratios (Hopper and newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpm: Option<Gpm>,
    /// Persistence mode: off, the driver tears the GPU down whenever no client holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_mode: Option<bool>,
    /// The driver version of the firmware the GPU runs (the GSP firmware, which ships
    /// with the driver): GPUs of one host that disagree run different drivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_version: Option<String>,
    /// NVML calls for this GPU that failed this tick (not counting "not supported").
    #[serde(default)]
    pub failed_calls: u32,
    /// Wall time spent reading this GPU this tick, seconds. A slowing driver is a health signal.
    #[serde(default)]
    pub collect_seconds: f64,
}

/// Engine utilizations as ratios 0–1 over NVML's sample period.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Utilization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<f64>,
    /// Memory copy engine (`nvmlUtilization_t.memory`), not memory occupancy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_copy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoder: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder: Option<f64>,
}

/// Frame-buffer memory in bytes. `reserved` is held by the driver and firmware.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Memory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
}

/// Clock frequencies in MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Clocks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphics: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<u32>,
}

impl Clocks {
    /// `(label, MHz)` pairs in the order the exposition renders them.
    pub fn labelled(&self) -> [(&'static str, Option<u32>); 4] {
        [
            ("sm", self.sm),
            ("memory", self.memory),
            ("graphics", self.graphics),
            ("video", self.video),
        ]
    }
}

/// NVML clock-event ("throttle") reasons as a bitmask, values from `nvml.h`
/// (`nvmlClocksEventReason*`, formerly `nvmlClocksThrottleReason*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct ClockEvents(pub u64);

impl ClockEvents {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;

    /// Every reason with its metric label, in bit order.
    pub const REASONS: [(&'static str, u64); 9] = [
        ("gpu_idle", Self::GPU_IDLE),
        (
            "applications_clocks_setting",
            Self::APPLICATIONS_CLOCKS_SETTING,
        ),
        ("sw_power_cap", Self::SW_POWER_CAP),
        ("hw_slowdown", Self::HW_SLOWDOWN),
        ("sync_boost", Self::SYNC_BOOST),
        ("sw_thermal_slowdown", Self::SW_THERMAL_SLOWDOWN),
        ("hw_thermal_slowdown", Self::HW_THERMAL_SLOWDOWN),
        ("hw_power_brake_slowdown", Self::HW_POWER_BRAKE_SLOWDOWN),
        ("display_clock_setting", Self::DISPLAY_CLOCK_SETTING),
    ];

    /// Whether any of `bits` is set.
    pub fn intersects(self, bits: u64) -> bool {
        self.0 & bits != 0
    }

    /// Thermal slowdown of either kind (software or hardware).
    pub fn thermal(self) -> bool {
        self.intersects(Self::SW_THERMAL_SLOWDOWN | Self::HW_THERMAL_SLOWDOWN)
    }
}

/// ECC error counts. "Volatile" resets when the driver reloads; "aggregate" persists in the infoROM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Ecc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected_volatile: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrected_volatile: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected_aggregate: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrected_aggregate: Option<u64>,
}

impl Ecc {
    /// `(error, scope, count)` triples in the order the exposition renders them.
    pub fn labelled(&self) -> [(&'static str, &'static str, Option<u64>); 4] {
        [
            ("corrected", "volatile", self.corrected_volatile),
            ("uncorrected", "volatile", self.uncorrected_volatile),
            ("corrected", "aggregate", self.corrected_aggregate),
            ("uncorrected", "aggregate", self.uncorrected_aggregate),
        ]
    }
}

/// Pages retired by dynamic page retirement (pre-Ampere mechanism).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RetiredPages {
    /// Retired for multiple single-bit errors.
    pub sbe: u64,
    /// Retired for a double-bit error.
    pub dbe: u64,
    /// A retirement waits for the next driver reload.
    pub pending: bool,
}

/// Row remapping (Ampere and newer), NVML fields 142–145.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    /// A remap waits for a GPU reset.
    pub pending: bool,
    /// A remap failed: NVIDIA's RMA signal.
    pub failure: bool,
}

/// PCIe link state and counters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Pcie {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_counter: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_generation: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_width: Option<u32>,
    /// The generation the link can train to (device and slot): a link running below it
    /// under load has trained down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_generation_max: Option<u32>,
    /// The width (lanes) the link can train to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_width_max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes_per_second: Option<f64>,
}

/// NVLink error counters of one link (`nvmlDeviceGetNvLinkErrorCounter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NvLinkErrors {
    pub link: u32,
    pub replay: u64,
    pub recovery: u64,
    pub crc_flit: u64,
    pub crc_data: u64,
}

impl NvLinkErrors {
    /// Every error the link counted, saturating: the counters come from outside (a
    /// replayed recording may hold anything).
    pub fn total(&self) -> u64 {
        self.replay
            .saturating_add(self.recovery)
            .saturating_add(self.crc_flit)
            .saturating_add(self.crc_data)
    }

    /// `(error, count)` pairs in the order the exposition renders them.
    pub fn labelled(&self) -> [(&'static str, u64); 4] {
        [
            ("replay", self.replay),
            ("recovery", self.recovery),
            ("crc_flit", self.crc_flit),
            ("crc_data", self.crc_data),
        ]
    }
}

/// GPM ratios (0–1) between this tick's sample and the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Gpm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_occupancy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active: Option<f64>,
    /// Graphics-engine activity (`NVML_GPM_METRIC_GRAPHICS_UTIL`), read per MIG GPU
    /// instance, where NVML gives no utilization (dcgm-exporter's
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE` of the instance); absent for a whole GPU, whose
    /// utilization stands for it, and in recordings made before it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphics_active: Option<f64>,
}

/// A process holding memory on a GPU, with its owner where the host can tell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ProcessSample {
    pub gpu: u32,
    pub uuid: String,
    /// Host PID (in Kubernetes the agent needs `hostPID` to resolve it).
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_memory_bytes: Option<u64>,
    /// Share of SM time this process used since the previous tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_utilization: Option<f64>,
    /// Short command name (`/proc/PID/comm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Command line, truncated, arguments hidden unless `[collect] show_arguments`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Slurm job id, from the process's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpc_job: Option<String>,
    /// The Slurm account of that job, from the controller (`scontrol`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_account: Option<String>,
    /// The `[[teams]]` entry that claims the owner (`unassigned` when none does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// What the host says of the PID: the raw material of ghost detection.
    #[serde(default)]
    pub liveness: Liveness,
    /// Seconds since the process started, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_seconds: Option<f64>,
    /// The MIG GPU instance and compute instance the process runs in, on a GPU in MIG mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
}

/// A GPU given to a holder by a scheduler: a Kubernetes pod's container (from the kubelet's
/// PodResources API) or a Slurm job (from mapping files). Several holders may share a GPU
/// (time-slicing replicas, MIG devices).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct Allocation {
    pub gpu: u32,
    pub uuid: String,
    /// The device the scheduler handed out when it is not the bare GPU: a MIG device UUID,
    /// a time-slicing replica (`GPU-…::1`), an index form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpc_job: Option<String>,
    /// The Slurm account of `hpc_job`, from the controller (`scontrol`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The MIG instance allocated, where `device` names one NVML lists: its GPU instance,
    /// and its compute instance where the device id says (GKE's `nvidia0/gi1` does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
}

impl Allocation {
    /// Whether this allocation is of `gpu`: by UUID, or by index where none was given.
    pub fn is_on(&self, gpu: &GpuSample) -> bool {
        if self.uuid.is_empty() {
            self.gpu == gpu.index
        } else {
            self.uuid == gpu.uuid
        }
    }
}

/// State of a GPU process's PID on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Not looked up (a recording without the information, or the lookup is disabled).
    #[default]
    Unknown,
    Running,
    /// Exited but not reaped by its parent.
    Zombie,
    /// Re-parented to init and not a service of it.
    Orphaned,
    /// The PID no longer exists on the host, yet NVML still lists it.
    Gone,
}

/// Where an XID report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum XidSource {
    #[default]
    Nvml,
    Kmsg,
    Simulator,
}

/// One XID error. `gpu`/`uuid` are filled when the PCI bus id could be matched to a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// As the source wrote it (NVML `00000000:3B:00.0`, the kernel log `0000:3b:00`);
    /// compare through [`normalize_pci_bus_id`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    pub xid: u32,
    pub source: XidSource,
    /// The kernel log text after the XID number, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ProcessSample {
    /// Whether this process runs on `gpu`: by UUID, or by index where the source gave none.
    pub fn is_on(&self, gpu: &GpuSample) -> bool {
        if self.uuid.is_empty() {
            self.gpu == gpu.index
        } else {
            self.uuid == gpu.uuid
        }
    }
}

impl XidEvent {
    /// Whether this XID is `gpu`'s: by UUID; without one, by PCI bus id (compared in one
    /// normalised form, as NVML, the kernel log and the simulator each write it
    /// differently), else by index.
    pub fn is_on(&self, gpu: &GpuSample) -> bool {
        if let Some(uuid) = &self.uuid {
            return *uuid == gpu.uuid;
        }
        let normal = normalize_pci_bus_id;
        match self.pci_bus_id.as_deref().and_then(normal) {
            Some(bus) => normal(&gpu.pci_bus_id).is_some_and(|g| g == bus),
            None => self.gpu == Some(gpu.index),
        }
    }
}

impl Snapshot {
    /// The GPU an XID belongs to ([`XidEvent::is_on`]).
    pub fn gpu_of(&self, event: &XidEvent) -> Option<&GpuSample> {
        self.gpus.iter().find(|g| event.is_on(g))
    }

    /// The sample of the GPU with this UUID.
    pub fn gpu_by_uuid(&self, uuid: &str) -> Option<&GpuSample> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }

    /// The sample of the GPU with this NVML index.
    pub fn gpu_by_index(&self, index: u32) -> Option<&GpuSample> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips_through_json_without_empty_fields() {
        let snap = Snapshot {
            at: DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
                .unwrap()
                .with_timezone(&Utc),
            host: HostInfo {
                hostname: "node-1".into(),
                ..Default::default()
            },
            gpus: vec![GpuSample {
                index: 0,
                uuid: "GPU-1".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                up: true,
                temperature_celsius: Some(41.0),
                ..Default::default()
            }],
            ..Default::default()
        };
        let json = serde_json::to_string(&snap).unwrap();
        assert!(!json.contains("null"), "absent values are omitted: {json}");
        let back: Snapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
    }

    #[test]
    fn thermal_slowdown_is_either_thermal_bit() {
        assert!(ClockEvents(ClockEvents::HW_THERMAL_SLOWDOWN).thermal());
        assert!(ClockEvents(ClockEvents::SW_THERMAL_SLOWDOWN).thermal());
        assert!(!ClockEvents(ClockEvents::SW_POWER_CAP).thermal());
    }
}
