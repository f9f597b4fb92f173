//! Scaling and placement advice for this node.
//!
//! Scaling follows the rule operators use: when more than `busy_share` of the GPUs average
//! above `busy_utilization` over the window, advise scaling out; when more than `idle_share`
//! average below `idle_utilization`, advise scaling in. New advice must hold for `hold`
//! before it replaces the current one, so it does not flap with the load. The recommended
//! count is the demand (the GPUs' summed mean utilization, in whole-GPU equivalents) times
//! the buffer, rounded up.
//!
//! Placement answers what a scheduler asks before sending a job here: how many GPUs are
//! free, the largest free memory, how much free memory is stranded on partly used GPUs,
//! and whether an N-GPU job needing M bytes per GPU fits now (best fit: the smallest
//! sufficient holes are used, keeping large ones for large jobs). A GPU in MIG mode is no
//! whole GPU to place on: its free capacity is its free instances, counted in GPU
//! fractions (a free `1g` of an H100 is 1/7 of a GPU), and the scaling advice reads its
//! load as its instances' activity by share (the engine's windows hold it so).

use serde::{Deserialize, Serialize};

use crate::config::{CapacityConfig, IdleConfig};
use crate::model::{Allocation, ProcessSample, Snapshot};

/// Direction of scaling advice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Out,
    In,
    #[default]
    Hold,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Out => "out",
            Direction::In => "in",
            Direction::Hold => "hold",
        }
    }

    pub const ALL: [Direction; 3] = [Direction::Out, Direction::In, Direction::Hold];
}

/// What scaling advice remembers between steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityState {
    pub current: Direction,
    /// A different direction the load points at, and since when.
    pub candidate: Option<(Direction, i64)>,
}

/// Scaling advice at one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Advice {
    pub direction: Direction,
    /// GPUs answering and measured over the window.
    pub gpus: usize,
    /// Share of them averaging above the busy threshold.
    pub busy_share: f64,
    /// Share of them averaging below the idle threshold.
    pub idle_share: f64,
    /// Summed mean utilization: the work, in whole GPUs.
    pub(crate) demand_gpus: f64,
    /// GPUs the demand needs with the buffer.
    pub recommended_gpus: usize,
    /// Why, in one sentence.
    pub reason: String,
}

/// Advice from each answering GPU's mean utilization over the window (None: no data).
pub fn advise(
    state: &mut CapacityState,
    now: i64,
    utilization: &[Option<f64>],
    config: &CapacityConfig,
) -> Advice {
    let means: Vec<f64> = utilization.iter().flatten().copied().collect();
    let n = means.len();
    let share = |pred: &dyn Fn(f64) -> bool| {
        if n == 0 {
            0.0
        } else {
            means.iter().filter(|&&u| pred(u)).count() as f64 / n as f64
        }
    };
    let busy_share = share(&|u| u > config.busy_utilization);
    let idle_share = share(&|u| u < config.idle_utilization);
    let demand: f64 = means.iter().sum();
    let raw = if n == 0 {
        Direction::Hold
    } else if busy_share > config.busy_share {
        Direction::Out
    } else if idle_share > config.idle_share {
        Direction::In
    } else {
        Direction::Hold
    };

    if raw == state.current {
        state.candidate = None;
    } else {
        let since = match state.candidate {
            Some((dir, since)) if dir == raw => since,
            _ => now,
        };
        state.candidate = Some((raw, since));
        if now - since >= config.hold.as_secs() as i64 {
            state.current = raw;
            state.candidate = None;
        }
    }

    let needed = ((demand * config.buffer).ceil() as usize).max(1);
    let recommended_gpus = match state.current {
        Direction::Out => needed.max(n + 1),
        Direction::In => needed.min(n.saturating_sub(1)).max(1),
        Direction::Hold => n,
    };
    let reason = match state.current {
        Direction::Out => format!(
            "{:.0}% of {n} GPUs averaged above {:.0}% utilization; demand {demand:.1} GPUs × {:.1} buffer",
            busy_share * 100.0,
            config.busy_utilization * 100.0,
            config.buffer
        ),
        Direction::In => format!(
            "{:.0}% of {n} GPUs averaged below {:.0}% utilization; demand {demand:.1} GPUs × {:.1} buffer",
            idle_share * 100.0,
            config.idle_utilization * 100.0,
            config.buffer
        ),
        Direction::Hold => format!("load within bounds on {n} GPUs; demand {demand:.1} GPUs"),
    };
    Advice {
        direction: state.current,
        gpus: n,
        busy_share,
        idle_share,
        demand_gpus: demand,
        recommended_gpus,
        reason,
    }
}

/// One GPU as placement sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slot {
    pub index: u32,
    pub free_bytes: u64,
    /// Held by a process or memory above the floor (in MIG mode: any of its instances).
    pub allocated: bool,
    /// In MIG mode: no job gets it whole.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mig: bool,
}

/// A MIG instance nothing holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FreeInstance {
    pub gpu: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub profile: String,
    /// Its share of its GPU.
    pub fraction: f64,
    pub free_bytes: u64,
}

/// What a job could get on this node now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Placement {
    /// GPUs answering with nothing allocated.
    pub free_gpus: usize,
    pub(crate) largest_free_memory_bytes: u64,
    /// Share of free memory that sits on partly used GPUs (0 = none stranded).
    pub(crate) fragmentation_ratio: f64,
    pub slots: Vec<Slot>,
    /// Free MIG capacity in GPUs: the shares of the MIG instances nothing holds.
    pub(crate) free_mig_gpus: f64,
    /// The MIG instances nothing holds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) mig_free: Vec<FreeInstance>,
}

impl Placement {
    /// The answering GPUs of a snapshot.
    pub fn of(snapshot: &Snapshot, idle: &IdleConfig) -> Placement {
        Placement::of_into(snapshot, idle, Vec::new())
    }

    /// [`Placement::of`], its slots written into `slots` (emptied first) to reuse its
    /// allocation.
    pub(crate) fn of_into(
        snapshot: &Snapshot,
        idle: &IdleConfig,
        mut slots: Vec<Slot>,
    ) -> Placement {
        let mut mig_free = Vec::new();
        slots.clear();
        slots.extend(snapshot.gpus.iter().filter(|g| g.up).filter_map(|g| {
            let free_bytes = g.memory.free_bytes?;
            let processes: Vec<&ProcessSample> =
                snapshot.processes.iter().filter(|p| p.is_on(g)).collect();
            let allocations: Vec<&Allocation> =
                snapshot.allocations.iter().filter(|a| a.is_on(g)).collect();
            let mut allocated = super::idle::allocated(g, &processes, &allocations, idle);
            if !g.mig_instances.is_empty() {
                allocated = false;
                for i in &g.mig_instances {
                    if super::mig::allocated(i, &processes, &allocations, idle) {
                        allocated = true;
                    } else {
                        mig_free.push(FreeInstance {
                            gpu: g.index,
                            gpu_instance: i.gpu_instance,
                            compute_instance: i.compute_instance,
                            profile: i.compute_profile(),
                            fraction: i.fraction(),
                            free_bytes: i.memory.free_bytes.unwrap_or(0),
                        });
                    }
                }
            }
            Some(Slot {
                index: g.index,
                free_bytes,
                allocated,
                mig: !g.mig_instances.is_empty(),
            })
        }));
        // Saturating: memory sizes come from outside (a replayed log may claim anything).
        let total_free: u64 = slots
            .iter()
            .map(|s| s.free_bytes)
            .fold(0, u64::saturating_add);
        let stranded: u64 = slots
            .iter()
            .filter(|s| s.allocated)
            .map(|s| s.free_bytes)
            .fold(0, u64::saturating_add);
        Placement {
            free_gpus: slots.iter().filter(|s| !s.allocated && !s.mig).count(),
            free_mig_gpus: mig_free.iter().map(|f| f.fraction).sum(),
            mig_free,
            largest_free_memory_bytes: slots.iter().map(|s| s.free_bytes).max().unwrap_or(0),
            fragmentation_ratio: if total_free == 0 {
                0.0
            } else {
                stranded as f64 / total_free as f64
            },
            slots,
        }
    }

    /// GPUs for a job of `gpus` GPUs needing `memory_bytes` each, best fit; None if it
    /// does not fit now. `exclusive` jobs take only unallocated GPUs.
    pub fn fit(&self, gpus: usize, memory_bytes: u64, exclusive: bool) -> Option<Vec<u32>> {
        let mut candidates: Vec<&Slot> = self
            .slots
            .iter()
            .filter(|s| !s.mig && s.free_bytes >= memory_bytes && !(exclusive && s.allocated))
            .collect();
        if gpus == 0 || candidates.len() < gpus {
            return None;
        }
        candidates.sort_by_key(|s| (s.free_bytes, s.index));
        let mut chosen: Vec<u32> = candidates[..gpus].iter().map(|s| s.index).collect();
        chosen.sort_unstable();
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuSample, Memory, ProcessSample};

    fn config() -> CapacityConfig {
        CapacityConfig::default()
    }

    #[test]
    fn busy_fleet_advises_out_only_after_the_hold() {
        let mut state = CapacityState::default();
        let busy = vec![Some(0.95); 8];
        let first = advise(&mut state, 0, &busy, &config());
        assert_eq!(first.direction, Direction::Hold, "not before the hold");
        let later = advise(&mut state, 31 * 60, &busy, &config());
        assert_eq!(later.direction, Direction::Out);
        // 8 × 0.95 = 7.6 GPUs of work × 1.3 = 9.88 → 10.
        assert_eq!(later.recommended_gpus, 10);
    }

    #[test]
    fn advice_does_not_flap_with_short_swings() {
        let mut state = CapacityState::default();
        advise(&mut state, 0, &[Some(0.05); 8], &config());
        let in_ = advise(&mut state, 1800, &[Some(0.05); 8], &config());
        assert_eq!(in_.direction, Direction::In);
        assert_eq!(in_.recommended_gpus, 1);
        // Twenty busy minutes are not enough to leave "in".
        advise(&mut state, 1900, &[Some(0.5); 8], &config());
        let still = advise(&mut state, 1900 + 20 * 60, &[Some(0.5); 8], &config());
        assert_eq!(still.direction, Direction::In);
        let back = advise(&mut state, 1900 + 31 * 60, &[Some(0.5); 8], &config());
        assert_eq!(back.direction, Direction::Hold);
    }

    fn snapshot() -> Snapshot {
        let gib = 1u64 << 30;
        let gpu = |i: u32, free: u64, used: u64| GpuSample {
            index: i,
            uuid: format!("GPU-{i}"),
            up: true,
            memory: Memory {
                free_bytes: Some(free * gib),
                used_bytes: Some(used * gib),
                ..Memory::default()
            },
            ..GpuSample::default()
        };
        Snapshot {
            gpus: vec![gpu(0, 80, 0), gpu(1, 20, 60), gpu(2, 80, 0), gpu(3, 40, 40)],
            processes: vec![ProcessSample {
                gpu: 1,
                uuid: "GPU-1".into(),
                ..ProcessSample::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn placement_counts_free_gpus_and_stranded_memory() {
        let p = Placement::of(&snapshot(), &IdleConfig::default());
        assert_eq!(p.free_gpus, 2);
        assert_eq!(p.largest_free_memory_bytes, 80 << 30);
        // 60 GiB of 220 GiB free sits on partly used GPUs.
        assert!((p.fragmentation_ratio - 60.0 / 220.0).abs() < 1e-9);
    }

    #[test]
    fn a_mig_gpu_offers_its_free_instances_in_gpu_fractions_not_itself() {
        use crate::model::MigInstance;
        let mut snap = snapshot();
        let instance = |gi: u32, slices: u32| MigInstance {
            gpu_instance: gi,
            slices,
            gpu_instance_slices: slices,
            gpu_slices: 7,
            profile: format!("{slices}g"),
            ..MigInstance::default()
        };
        snap.gpus[0].mig_instances = vec![instance(2, 3), instance(9, 1), instance(10, 1)];
        snap.processes.push(ProcessSample {
            gpu: 0,
            uuid: "GPU-0".into(),
            gpu_instance: Some(2),
            compute_instance: Some(0),
            ..ProcessSample::default()
        });
        let p = Placement::of(&snap, &IdleConfig::default());
        // GPU 2 stays free; GPU 0 is no whole GPU now, its two free 1g are 2/7 of one.
        assert_eq!(p.free_gpus, 1);
        assert!((p.free_mig_gpus - 2.0 / 7.0).abs() < 1e-9);
        let free: Vec<u32> = p.mig_free.iter().map(|f| f.gpu_instance).collect();
        assert_eq!(free, [9, 10]);
        // No whole-GPU job lands on it.
        assert_eq!(p.fit(3, 1 << 30, false), Some(vec![1, 2, 3]));
        assert_eq!(p.fit(4, 1 << 30, false), None);
    }

    #[test]
    fn best_fit_keeps_large_holes_for_large_jobs() {
        let p = Placement::of(&snapshot(), &IdleConfig::default());
        let gib = 1u64 << 30;
        assert_eq!(p.fit(1, 30 * gib, false), Some(vec![3]));
        assert_eq!(p.fit(2, 30 * gib, true), Some(vec![0, 2]));
        assert_eq!(p.fit(3, 50 * gib, false), None);
    }
}
