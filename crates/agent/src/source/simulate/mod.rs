//! The built-in fleet simulator: a seeded, deterministic set of GPUs with realistic workloads
//! and fault families that unfold over simulated time.
//!
//! It is used two ways: in-process as a [`Source`] (`--simulate`), and behind the fake NVML
//! library (`tests/fake-nvml`), which answers NVML's C calls from a [`Fleet`] so that the
//! production NVML path is tested without a GPU. Cost per GPU per step is a few hundred
//! nanoseconds and independent of the step length, so 1,024 GPUs at `--sim-speed 600` stay
//! cheap.

mod fault;
mod fault_memory;
mod gpu;
pub mod mig;
pub mod mig_profiles;
pub mod noise;
pub(crate) mod quirks;
pub mod shape;
pub mod sku;
mod workload;

use std::time::Instant;

use chrono::{DateTime, TimeDelta, Utc};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::{Deserialize, Serialize};

pub use fault::{FaultKind, LinkMode, SHAPED_BASE, ShapedBase, poisson};
pub(crate) use gpu::SimGpu;
pub(crate) use noise::NoiseModel;
pub(crate) use quirks::Quirks;
pub use shape::{Curve, Shape};
pub(crate) use sku::Sku;
pub use workload::WorkloadKind;

use super::{Collection, Source};
use crate::config::SimulationConfig;
use crate::model::{
    CollectHealth, FamilyHealth, GpuSample, HostInfo, ProcessSample, Snapshot, XidEvent, XidSource,
};

/// The driver version the simulated host reports, and its GPUs' firmware.
pub(crate) const DRIVER_VERSION: &str = "570.124.06";

/// What one simulated GPU runs and how it fails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPlan {
    pub workload: WorkloadKind,
    pub fault: Option<FaultKind>,
    /// Simulated hours to the fault's failure point, and the timescale of the idle and
    /// ghost workloads (they turn idle / lose their process early in it).
    pub horizon_hours: f64,
    /// The GPU sits in a hot aisle: 8 °C warmer inlet air, healthy nonetheless.
    pub hot_aisle: bool,
    /// The GPU shows the harmless noise of a real fleet (isolated ECC errors, replay bursts,
    /// application XIDs, collection jitter; see [`SimGpu::with_background_noise`]). Off in
    /// the `[simulation]` fleet, whose snapshots stay fixed.
    pub background_noise: bool,
    /// Work only 08:00–20:00 UTC on weekdays (see [`SimGpu::with_office_hours`]).
    pub office_hours: bool,
}

impl GpuPlan {
    pub fn healthy(workload: WorkloadKind) -> GpuPlan {
        GpuPlan {
            workload,
            fault: None,
            horizon_hours: 24.0,
            hot_aisle: false,
            background_noise: false,
            office_hours: false,
        }
    }

    /// A training GPU whose `fault` reaches its failure point `hours` in.
    pub fn failing(fault: FaultKind, hours: f64) -> GpuPlan {
        GpuPlan {
            fault: Some(fault),
            horizon_hours: hours,
            ..GpuPlan::healthy(WorkloadKind::Training)
        }
    }
}

/// A GPU of the scenario library (crates/agent/src/scenario/): its plan, its model, the drawn shape of
/// its fault's precursors, and the confounders it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    pub plan: GpuPlan,
    pub sku: Sku,
    /// None: the family's fixed shape.
    pub shape: Option<Shape>,
    pub(crate) link_mode: LinkMode,
    pub(crate) quirks: Quirks,
    /// How the GPU's error counts arrive around their rates.
    pub noise: NoiseModel,
}

/// A simulated fleet of GPUs on one host.
#[derive(Debug, Clone)]
pub struct Fleet {
    gpus: Vec<SimGpu>,
    start: DateTime<Utc>,
    /// Simulated seconds since `start`.
    elapsed: f64,
    pending_events: Vec<XidEvent>,
    pending_failures: Vec<Failure>,
    host: HostInfo,
}

/// A simulated GPU reaching its fault's failure point: the ground truth that labels a
/// recording for training and detection-quality measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub uuid: String,
    pub at: DateTime<Utc>,
    /// Fault family, as written in `[simulation] faults`.
    pub family: String,
}

impl FaultKind {
    /// The family name used in configuration and labels.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::MemoryWear => "memory_wear",
            FaultKind::PcieLink => "pcie_link",
            FaultKind::Thermal => "thermal",
            FaultKind::FellOffBus => "fell_off_bus",
            FaultKind::NvLink => "nvlink",
            FaultKind::GspFirmware => "gsp_firmware",
            FaultKind::PowerDelivery => "power_delivery",
            FaultKind::RowRemap => "row_remap",
            FaultKind::PageRetirement => "page_retirement",
        }
    }

    /// The family of a `[simulation] faults` name.
    pub(crate) fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::EVERY.into_iter().find(|k| k.name() == name)
    }
}

/// Healthy workloads cycle in this order over GPUs without a fault.
const HEALTHY_CYCLE: [WorkloadKind; 5] = [
    WorkloadKind::Training,
    WorkloadKind::Inference,
    WorkloadKind::Training,
    WorkloadKind::Unused,
    WorkloadKind::Inference,
];

impl Fleet {
    /// The fleet `[simulation]` describes, starting at `start`: its first `mig_gpus` GPUs
    /// in MIG mode (see [`mig`]).
    pub fn new(config: &SimulationConfig, start: DateTime<Utc>) -> Fleet {
        let mig = (config.mig_gpus as usize, config.fault_hours * 3600.0);
        Fleet::planned(
            config.seed,
            &config.model,
            start,
            &Fleet::plans(config),
            mig,
        )
    }

    /// Plans for `[simulation]`: GPU 0 healthy, the listed faults on GPUs 1, 2, …, the rest
    /// healthy with a mix of training, inference and unused GPUs.
    pub fn plans(config: &SimulationConfig) -> Vec<GpuPlan> {
        let mut healthy = HEALTHY_CYCLE.iter().cycle();
        (0..config.gpus as usize)
            .map(|i| {
                let named = i.checked_sub(1).and_then(|k| config.faults.get(k));
                let fault = named.and_then(|name| FaultKind::from_name(name));
                let mut plan = match (named.map(String::as_str), fault) {
                    (_, Some(kind)) => GpuPlan::failing(kind, 0.0),
                    (Some("allocated_idle"), _) => GpuPlan::healthy(WorkloadKind::AllocatedIdle),
                    (Some("ghost_process"), _) => GpuPlan::healthy(WorkloadKind::Ghost),
                    _ => GpuPlan::healthy(*healthy.next().unwrap_or(&WorkloadKind::Training)),
                };
                plan.horizon_hours = config.fault_hours;
                plan
            })
            .collect()
    }

    /// A fleet from explicit plans (the detection-quality tests build their own).
    pub fn from_plans(seed: u64, model: &str, start: DateTime<Utc>, plans: &[GpuPlan]) -> Fleet {
        Fleet::planned(seed, model, start, plans, (0, 0.0))
    }

    /// A fleet from plans whose first `mig.0` GPUs are in MIG mode, their workloads on the
    /// time scale `mig.1` (seconds).
    fn planned(
        seed: u64,
        model: &str,
        start: DateTime<Utc>,
        plans: &[GpuPlan],
        (mig_gpus, horizon): (usize, f64),
    ) -> Fleet {
        let table = mig_profiles::table_for(model);
        Fleet::build(seed, start, plans, |i, plan, workload, rng, gpu_seed| {
            let fault = plan
                .fault
                .map(|kind| fault::Fault::new(kind, plan.horizon_hours * 3600.0));
            let gpu = SimGpu::new(i as u32, model, workload, fault, plan.hot_aisle, rng);
            match table.filter(|_| i < mig_gpus) {
                // A stream of its own: the GPUs not in MIG mode draw what they always drew.
                Some(table) => gpu.with_mig(mig::SimMig::new(
                    table,
                    i,
                    i + 1 == mig_gpus,
                    horizon,
                    SmallRng::seed_from_u64(gpu_seed ^ 0x6D69_675F_6D6F_6465),
                )),
                None => gpu,
            }
        })
    }

    /// A fleet of scenario GPUs: each its own model, precursor shape and confounders.
    pub(crate) fn from_specs(seed: u64, start: DateTime<Utc>, specs: &[GpuSpec]) -> Fleet {
        let plans: Vec<GpuPlan> = specs.iter().map(|s| s.plan).collect();
        Fleet::build(seed, start, &plans, |i, plan, workload, rng, gpu_seed| {
            let spec = &specs[i];
            let horizon = plan.horizon_hours * 3600.0;
            let fault = plan.fault.map(|kind| match spec.shape {
                Some(shape) => fault::Fault::shaped(kind, horizon, shape, spec.link_mode),
                None => fault::Fault::new(kind, horizon),
            });
            // The confounders draw from a stream of their own, so adding one leaves the
            // GPU's other draws as they were.
            let quirk_rng = SmallRng::seed_from_u64(gpu_seed ^ 0x7175_6972_6B73_0001);
            let counts = noise::Counts::new(spec.noise, gpu_seed ^ 0x636F_756E_7473_0001);
            SimGpu::for_sku(
                i as u32,
                spec.sku.spec(),
                workload,
                fault,
                plan.hot_aisle,
                rng,
                spec.quirks.clone(),
                quirk_rng,
            )
            .with_noise(counts)
        })
    }

    /// Builds each GPU with `make(index, plan, workload, rng, gpu seed)` from a stream of
    /// its own, then warms it up.
    fn build(
        seed: u64,
        start: DateTime<Utc>,
        plans: &[GpuPlan],
        make: impl Fn(usize, &GpuPlan, workload::Workload, SmallRng, u64) -> SimGpu,
    ) -> Fleet {
        let gpus = plans
            .iter()
            .enumerate()
            .map(|(i, plan)| {
                // Each GPU draws from its own stream, so one GPU's draws never shift another's.
                let gpu_seed = seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut rng = SmallRng::seed_from_u64(gpu_seed);
                let horizon = plan.horizon_hours * 3600.0;
                let turn_at = match plan.workload {
                    WorkloadKind::AllocatedIdle => 0.05 * horizon,
                    _ => 0.1 * horizon,
                };
                let workload = workload::Workload::new(plan.workload, turn_at, &mut rng);
                let mut gpu = make(i, plan, workload, rng, gpu_seed);
                if plan.background_noise {
                    // A stream of its own: noise on or off, the GPU's other draws are the same.
                    let noise = SmallRng::seed_from_u64(gpu_seed ^ 0x6E6F_6973_6521_0001);
                    gpu = gpu.with_background_noise(noise);
                }
                if plan.office_hours {
                    gpu = gpu.with_office_hours(start);
                }
                // Ten minutes of warm-up at time zero, so the first reading is of a fleet
                // that was already running: temperatures settled under their load.
                for _ in 0..5 {
                    gpu.step(0.0, 120.0);
                }
                gpu
            })
            .collect();
        Fleet {
            gpus,
            start,
            elapsed: 0.0,
            pending_events: Vec::new(),
            pending_failures: Vec::new(),
            host: HostInfo {
                hostname: crate::host::hostname(),
                driver_version: Some(DRIVER_VERSION.into()),
                cuda_version: Some("12.8".into()),
                ..HostInfo::default()
            },
        }
    }

    /// The same fleet on a host of another name (multi-host recordings).
    pub fn with_hostname(mut self, hostname: &str) -> Fleet {
        self.host.hostname = hostname.to_string();
        self
    }

    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    pub fn host(&self) -> &HostInfo {
        &self.host
    }

    /// Current simulated time.
    pub fn now(&self) -> DateTime<Utc> {
        // Saturating: simulated time never panics, however far it is pushed.
        self.start
            .checked_add_signed(TimeDelta::milliseconds((self.elapsed * 1000.0) as i64))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// Simulated seconds since the fleet started.
    pub fn elapsed_seconds(&self) -> f64 {
        self.elapsed
    }

    /// Moves simulated time forward by `seconds` in one step per GPU.
    pub fn advance(&mut self, seconds: f64) {
        if seconds.is_nan() || seconds <= 0.0 {
            return;
        }
        self.elapsed += seconds;
        let at = self.now();
        for gpu in &mut self.gpus {
            for xid in gpu.step(self.elapsed, seconds) {
                self.pending_events.push(XidEvent {
                    at,
                    gpu: Some(gpu.index),
                    uuid: Some(gpu.uuid.clone()),
                    pci_bus_id: Some(gpu.pci_bus_id.clone()),
                    xid,
                    source: XidSource::Simulator,
                    message: None,
                });
            }
            if let Some(kind) = gpu.take_failure() {
                self.pending_failures.push(Failure {
                    uuid: gpu.uuid.clone(),
                    at,
                    family: kind.name().to_string(),
                });
            }
        }
    }

    /// Failures reached since the last call.
    pub fn take_failures(&mut self) -> Vec<Failure> {
        std::mem::take(&mut self.pending_failures)
    }

    /// The simulated GPU itself (the fake NVML reads identity and state from it).
    pub fn gpu(&self, index: usize) -> Option<&SimGpu> {
        self.gpus.get(index)
    }

    /// What NVML would report for GPU `index` now.
    pub fn sample(&self, index: usize) -> Option<GpuSample> {
        self.gpus.get(index).map(SimGpu::sample)
    }

    /// Processes on GPU `index`, with the owner information the host would resolve.
    pub fn processes(&self, index: usize) -> Vec<ProcessSample> {
        let Some(gpu) = self.gpus.get(index) else {
            return Vec::new();
        };
        gpu.processes()
            .into_iter()
            .map(|p| ProcessSample {
                gpu: gpu.index,
                uuid: gpu.uuid.clone(),
                pid: p.pid,
                used_memory_bytes: Some(SimGpu::process_memory(&p)),
                // In MIG mode NVML keeps no per-process utilization: none, as there.
                sm_utilization: p
                    .instance
                    .is_none()
                    .then(|| (p.sm_share * 100.0).round() / 100.0),
                memory_utilization: None,
                process: Some(p.command.to_string()),
                command: Some(p.command.to_string()),
                user: Some(p.user.to_string()),
                container: p.container.clone(),
                pod: p.pod.clone(),
                namespace: p.namespace.map(str::to_string),
                hpc_job: None,
                slurm_account: None,
                team: None,
                liveness: p.liveness,
                runtime_seconds: Some((self.elapsed - p.started).max(0.0).round()),
                gpu_instance: p.instance.map(|(gi, _)| gi),
                compute_instance: p.instance.map(|(_, ci)| ci),
            })
            .collect()
    }

    /// XIDs raised since the last call.
    pub fn take_events(&mut self) -> Vec<XidEvent> {
        std::mem::take(&mut self.pending_events)
    }

    /// A snapshot of every GPU now, taking the pending XIDs.
    pub fn snapshot(&mut self) -> Snapshot {
        Snapshot {
            at: self.now(),
            host: self.host.clone(),
            gpus: self.gpus.iter().map(SimGpu::sample).collect(),
            processes: (0..self.gpus.len())
                .flat_map(|i| self.processes(i))
                .collect(),
            events: self.take_events(),
            allocations: Vec::new(),
            scheduled_by: Vec::new(),
        }
    }
}

/// The simulator as a [`Source`]: simulated time runs `speed` times faster than the wall clock.
pub struct SimulatedSource {
    fleet: Fleet,
    speed: f64,
    wall_start: Instant,
}

impl SimulatedSource {
    pub fn new(config: &SimulationConfig) -> SimulatedSource {
        SimulatedSource {
            fleet: Fleet::new(config, Utc::now()),
            speed: config.speed,
            wall_start: Instant::now(),
        }
    }
}

/// Collector families the simulator reports health for (it never fails).
const SIM_FAMILIES: [&str; 1] = ["simulator"];

impl Source for SimulatedSource {
    fn collect(&mut self) -> Collection {
        let began = Instant::now();
        let simulated = self.wall_start.elapsed().as_secs_f64() * self.speed;
        self.fleet.advance(simulated - self.fleet.elapsed_seconds());
        let snapshot = self.fleet.snapshot();
        let seconds = began.elapsed().as_secs_f64();
        Collection {
            snapshot,
            health: CollectHealth {
                source_up: true,
                families: SIM_FAMILIES
                    .iter()
                    .map(|name| FamilyHealth {
                        name,
                        seconds,
                        success: true,
                    })
                    .collect(),
                errors_by_call: Default::default(),
                seconds,
            },
        }
    }

    fn describe(&self) -> String {
        format!(
            "simulator ({} GPUs, {}x speed)",
            self.fleet.len(),
            self.speed
        )
    }
}

#[cfg(test)]
mod spec_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn run(config: &SimulationConfig, hours: f64, step: f64) -> (Fleet, Vec<Snapshot>) {
        let mut fleet = Fleet::new(config, start());
        let mut snaps = Vec::new();
        let mut t = 0.0;
        while t < hours * 3600.0 {
            t += step;
            fleet.advance(step);
            snaps.push(fleet.snapshot());
        }
        (fleet, snaps)
    }

    #[test]
    fn same_seed_same_fleet() {
        let config = SimulationConfig::default();
        let (_, a) = run(&config, 2.0, 60.0);
        let (_, b) = run(&config, 2.0, 60.0);
        assert_eq!(a, b);
        let other = SimulationConfig { seed: 43, ..config };
        let (_, c) = run(&other, 2.0, 60.0);
        assert_ne!(a.last().unwrap().gpus, c.last().unwrap().gpus);
    }

    #[test]
    fn default_mix_shows_every_fault_family_within_ten_simulated_hours() {
        // --sim-speed 600 turns a minute of wall time into ten simulated hours.
        let (mut fleet, snaps) = run(&SimulationConfig::default(), 10.0, 5.0 * 600.0 / 60.0);
        let last = snaps.last().unwrap();
        let xids: Vec<(u32, u32)> = snaps
            .iter()
            .flat_map(|s| s.events.iter().map(|e| (e.gpu.unwrap(), e.xid)))
            .collect();
        let g = |i: usize| &last.gpus[i];
        // memory_wear on GPU 1
        assert!(g(1).ecc.corrected_volatile.unwrap() > 10);
        assert!(g(1).ecc.uncorrected_volatile.unwrap() > 0);
        assert!(g(1).remapped_rows.unwrap().pending);
        assert!(xids.contains(&(1, 48)));
        // pcie_link on GPU 2
        assert!(g(2).pcie.replay_counter.unwrap() > 200);
        assert_eq!(g(2).pcie.link_width, Some(8));
        // thermal on GPU 3: memory far hotter than the die, and slowing down at some point
        let gap = g(3).memory_temperature_celsius.unwrap() - g(3).temperature_celsius.unwrap();
        assert!(gap > 15.0, "memory-GPU gap {gap}");
        assert!(
            snaps
                .iter()
                .any(|s| s.gpus[3].clock_events.unwrap().thermal())
        );
        assert!(
            !snaps
                .iter()
                .any(|s| s.gpus[0].clock_events.unwrap().thermal())
        );
        // fell_off_bus on GPU 4
        assert!(!g(4).up);
        assert!(xids.contains(&(4, 79)));
        // Each hardware fault reached its failure point once (8 h of the 10 simulated).
        let mut failed: Vec<String> = fleet
            .take_failures()
            .into_iter()
            .map(|f| f.family)
            .collect();
        failed.sort();
        assert_eq!(
            failed,
            ["fell_off_bus", "memory_wear", "pcie_link", "thermal"]
        );
        // allocated_idle on GPU 5: memory held, no compute
        assert!(g(5).memory.used_bytes.unwrap() > 50 << 30);
        assert!(g(5).utilization.gpu.unwrap() <= 0.02);
        // ghost_process on GPU 6: memory held by a PID that is gone
        let ghost: Vec<_> = last.processes.iter().filter(|p| p.gpu == 6).collect();
        assert_eq!(ghost.len(), 1);
        assert_eq!(ghost[0].liveness, crate::model::Liveness::Gone);
        assert_eq!(g(6).utilization.gpu, Some(0.0));
        // healthy GPUs stay healthy
        for i in [0, 7] {
            assert!(g(i).up);
            assert_eq!(g(i).ecc.uncorrected_volatile, Some(0));
        }
    }

    #[test]
    fn large_fleets_keep_distinct_identities() {
        let config = SimulationConfig {
            gpus: 1024,
            ..SimulationConfig::default()
        };
        let mut fleet = Fleet::new(&config, start());
        fleet.advance(600.0);
        let snap = fleet.snapshot();
        assert_eq!(snap.gpus.len(), 1024);
        let uuids: std::collections::BTreeSet<_> = snap.gpus.iter().map(|g| &g.uuid).collect();
        let buses: std::collections::BTreeSet<_> =
            snap.gpus.iter().map(|g| &g.pci_bus_id).collect();
        assert_eq!((uuids.len(), buses.len()), (1024, 1024));
    }
}
