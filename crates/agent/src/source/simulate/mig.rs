//! A simulated GPU in MIG mode: its GPU and compute instances, each with a workload of its
//! own, in layouts operators use, and one instance created and one destroyed during the run.
//!
//! The layouts cycle over the MIG GPUs: the mixed one the captured H100 and H200 show
//! (a `2g`, two `1g`, and a `3g` split into `1c` and `2c` compute instances), seven `1g`
//! instances (the inference-cluster layout), and a `4g` beside a `3g`. Each compute
//! instance runs one of the simulator's workloads, scaled to its memory: among them a
//! notebook that holds its memory and stops computing (allocated but idle) and an
//! instance with nothing on it, which still reports (zeros, the driver's few MiB).
//!
//! On the last MIG GPU the layout's last GPU instance is created [`CREATE_AT`] seconds
//! into the run and its first is destroyed at [`DESTROY_AT`], as `nvidia-smi mig -cgi` /
//! `-dgi` (or a MIG manager) would: the collection must follow both.
//!
//! Everything draws from a stream of its own, so the GPUs not in MIG mode are unchanged.

use rand::Rng;
use rand::rngs::SmallRng;

use super::mig_profiles::{GiProfile, MigTable, gpu_instance_id};
use super::workload::{Load, SimProcess, Workload, WorkloadKind};
use crate::model::{Gpm, Memory, MigInstance, MigPlacement};

/// Simulated seconds after which the last MIG GPU's last GPU instance exists.
pub const CREATE_AT: f64 = 15.0 * 60.0;
/// Simulated seconds after which the last MIG GPU's first GPU instance is gone.
pub const DESTROY_AT: f64 = 30.0 * 60.0;

const MIB: u64 = 1 << 20;
/// Memory a CUDA context takes beyond what the process allocates (as on a whole GPU).
const CONTEXT_BYTES: u64 = 512 * MIB;
/// What the simulator's jobs are sized for: an 80 GB H100's memory.
const JOB_SIZED_FOR_BYTES: u64 = 81_559 * MIB;

/// One GPU instance of a layout: compute and memory slices, first memory slice, and the
/// compute slices and workload of each of its compute instances.
struct GiSpec {
    slices: u32,
    memory_slices: u32,
    start: u32,
    compute: &'static [(u32, WorkloadKind)],
}

const fn gi(
    slices: u32,
    memory_slices: u32,
    start: u32,
    compute: &'static [(u32, WorkloadKind)],
) -> GiSpec {
    GiSpec {
        slices,
        memory_slices,
        start,
        compute,
    }
}

use WorkloadKind::{AllocatedIdle, Bursty, Inference, Training, Unused};

/// The layouts, first GPU instance first (the one destroyed on the dynamic GPU) and last
/// the one created.
const LAYOUTS: [&[GiSpec]; 3] = [
    &[
        gi(2, 2, 0, &[(2, Inference)]),
        gi(1, 1, 2, &[(1, AllocatedIdle)]),
        gi(1, 1, 3, &[(1, Unused)]),
        gi(3, 4, 4, &[(1, Training), (2, Bursty)]),
    ],
    &[
        gi(1, 1, 0, &[(1, Inference)]),
        gi(1, 1, 1, &[(1, Inference)]),
        gi(1, 1, 2, &[(1, AllocatedIdle)]),
        gi(1, 1, 3, &[(1, Unused)]),
        gi(1, 1, 4, &[(1, Bursty)]),
        gi(1, 1, 5, &[(1, Inference)]),
        gi(1, 1, 6, &[(1, Training)]),
    ],
    &[
        gi(4, 4, 0, &[(4, Training)]),
        gi(3, 4, 4, &[(3, Inference)]),
    ],
];

/// One compute instance and what runs on it.
#[derive(Debug, Clone)]
struct SimInstance {
    profile: &'static GiProfile,
    placement: MigPlacement,
    gpu_instance: u32,
    compute_instance: u32,
    slices: u32,
    uuid: String,
    workload: Workload,
    /// Exists from `from` until `until`, simulated seconds.
    from: f64,
    until: f64,
    load: Load,
}

/// The MIG side of a simulated GPU.
#[derive(Debug, Clone)]
pub struct SimMig {
    table: MigTable,
    instances: Vec<SimInstance>,
    rng: SmallRng,
    /// Simulated seconds of the last step.
    now: f64,
}

impl SimMig {
    /// Layout `layout` (cycled) of `table`'s profiles; `dynamic`: its last GPU instance is
    /// created and its first destroyed during the run. `horizon` is the workloads' time
    /// scale (see [`Workload::new`]).
    pub fn new(
        table: MigTable,
        layout: usize,
        dynamic: bool,
        horizon: f64,
        mut rng: SmallRng,
    ) -> SimMig {
        let specs = LAYOUTS[layout % LAYOUTS.len()];
        let mut instances = Vec::new();
        for (position, spec) in specs.iter().enumerate() {
            let Some(profile) = table.profile(spec.slices, spec.memory_slices) else {
                continue;
            };
            let from = if dynamic && position + 1 == specs.len() {
                CREATE_AT
            } else {
                f64::NEG_INFINITY
            };
            let until = if dynamic && position == 0 {
                DESTROY_AT
            } else {
                f64::INFINITY
            };
            for (ci, &(slices, kind)) in spec.compute.iter().enumerate() {
                let turn_at = match kind {
                    AllocatedIdle => 0.05 * horizon,
                    _ => 0.1 * horizon,
                };
                let workload = Workload::new(kind, turn_at, &mut rng);
                instances.push(SimInstance {
                    profile,
                    placement: MigPlacement {
                        start: spec.start,
                        size: spec.memory_slices,
                    },
                    gpu_instance: gpu_instance_id(spec.memory_slices, spec.start),
                    compute_instance: ci as u32,
                    slices,
                    uuid: mig_uuid(&mut rng),
                    workload,
                    from,
                    until,
                    load: Load::default(),
                });
            }
        }
        // NVML lists MIG devices by GPU instance id, then compute instance id.
        instances.sort_by_key(|i| (i.gpu_instance, i.compute_instance));
        SimMig {
            table,
            instances,
            rng,
            now: 0.0,
        }
    }

    /// The MIG profiles of the GPU's model.
    pub fn table(&self) -> &MigTable {
        &self.table
    }

    fn present(&self) -> impl Iterator<Item = &SimInstance> {
        let now = self.now;
        self.instances
            .iter()
            .filter(move |i| (i.from..i.until).contains(&now))
    }

    /// Moves every instance's workload to time `t` and returns the GPU's load: each
    /// instance's weighted by its share of the GPU.
    pub fn step(&mut self, t: f64, working: bool) -> Load {
        self.now = t;
        let gpu_slices = f64::from(self.table.gpu_slices);
        let mut gpu = Load::default();
        for instance in &mut self.instances {
            if !(instance.from..instance.until).contains(&t) {
                instance.load = Load::default();
                continue;
            }
            instance.workload.advance(t, &mut self.rng);
            let load = match working {
                true => instance.workload.load(t, &mut self.rng),
                false => Load::default(),
            };
            let share = f64::from(instance.slices) / gpu_slices;
            gpu.util += load.util * share;
            gpu.mem_copy += load.mem_copy * share;
            gpu.decoder += load.decoder * share;
            gpu.tensor += load.tensor * share;
            instance.load = load;
        }
        gpu
    }

    /// Bytes a job sized for an 80 GB GPU holds in compute instance `i`: as much of its
    /// part of the GPU instance's memory (by compute slices, so the jobs of a split GPU
    /// instance fit together) after contexts and the driver's share.
    fn scaled(i: &SimInstance, bytes: u64) -> u64 {
        let profile = i.profile;
        let room = (profile.memory_mib * MIB)
            .saturating_sub(CONTEXT_BYTES * u64::from(profile.slices) + 64 * MIB);
        let part = room as f64 * f64::from(i.slices) / f64::from(profile.slices.max(1));
        let share = part / JOB_SIZED_FOR_BYTES as f64;
        (bytes as f64 * share / MIB as f64).floor() as u64 * MIB
    }

    /// The processes of every instance now, with their instance, memory scaled to it.
    pub fn processes(&self) -> Vec<SimProcess> {
        let mut out = Vec::new();
        for i in self.present() {
            for mut p in i.workload.processes(i.load.util) {
                p.memory_bytes = SimMig::scaled(i, p.memory_bytes);
                p.instance = Some((i.gpu_instance, i.compute_instance));
                out.push(p);
            }
        }
        out
    }

    /// Memory the GPU's instances hold, bytes: what the GPU reports used.
    pub fn used_bytes(&self) -> u64 {
        let mut gis: Vec<u32> = Vec::new();
        let mut used = 0;
        for i in self.present() {
            if !gis.contains(&i.gpu_instance) {
                gis.push(i.gpu_instance);
                used += self.gpu_instance_used(i.gpu_instance);
            }
        }
        used
    }

    /// Memory used in GPU instance `gi`: its processes with their contexts, and what the
    /// driver keeps in any instance (9 MiB in a captured `1g`, 17 in a `2g`, 22 in a `3g`).
    fn gpu_instance_used(&self, gi: u32) -> u64 {
        let mut slices = 0;
        let mut held = 0;
        for i in self.present().filter(|i| i.gpu_instance == gi) {
            slices = i.profile.slices;
            held += i
                .workload
                .processes(0.0)
                .iter()
                .map(|p| SimMig::scaled(i, p.memory_bytes) + CONTEXT_BYTES)
                .sum::<u64>();
        }
        let driver_mib = match slices {
            0 | 1 => 9,
            2 => 17,
            n => 22 + 5 * u64::from(n - 3),
        };
        held + driver_mib * MIB
    }

    /// What NVML reports of each instance now, in its order.
    pub fn instances(&self) -> Vec<MigInstance> {
        let round = |x: f64| (x * 100.0).round() / 100.0;
        let present: Vec<&SimInstance> = self.present().collect();
        present
            .iter()
            .enumerate()
            .map(|(index, i)| {
                // Memory and GPM belong to the GPU instance: its compute instances' load
                // weighted by their slices.
                let siblings = present.iter().filter(|s| s.gpu_instance == i.gpu_instance);
                let (mut util, mut copy, mut tensor) = (0.0, 0.0, 0.0);
                for s in siblings {
                    let w = f64::from(s.slices) / f64::from(i.profile.slices.max(1));
                    util += s.load.util * w;
                    copy += s.load.mem_copy * w;
                    tensor += s.load.tensor * w;
                }
                let total = i.profile.memory_mib * MIB;
                let used = self.gpu_instance_used(i.gpu_instance).min(total);
                MigInstance {
                    gpu_instance: i.gpu_instance,
                    compute_instance: i.compute_instance,
                    uuid: i.uuid.clone(),
                    device_index: index as u32,
                    profile: i.profile.name.to_string(),
                    slices: i.slices,
                    gpu_instance_slices: i.profile.slices,
                    gpu_slices: self.table.gpu_slices,
                    placement: Some(i.placement),
                    multiprocessors: Some(
                        i.profile.multiprocessors * i.slices / i.profile.slices.max(1),
                    ),
                    memory: Memory {
                        total_bytes: Some(total),
                        used_bytes: Some(used),
                        free_bytes: Some(total - used),
                        reserved_bytes: Some(0),
                    },
                    gpm: Some(Gpm {
                        sm_active: Some(round(util * 0.88)),
                        sm_occupancy: Some(round(util * 0.45)),
                        tensor_active: Some(round(tensor)),
                        dram_active: Some(round(copy * 0.9)),
                        // The engine is busy whenever a kernel runs: the instance's load.
                        graphics_active: Some(round(util)),
                    }),
                    processes: i.workload.processes(0.0).len() as u32,
                }
            })
            .collect()
    }
}

/// A MIG device UUID in NVML's form (`MIG-` and a UUID).
fn mig_uuid(rng: &mut SmallRng) -> String {
    format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        rng.random::<u32>(),
        rng.random::<u16>(),
        rng.random::<u16>(),
        rng.random::<u16>(),
        rng.random::<u64>() & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;
