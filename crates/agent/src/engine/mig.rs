//! MIG instances in the engine: each instance of a GPU in MIG mode is idle, allocated,
//! allocated-but-idle and costed on its own, at its share of the GPU.
//!
//! An instance's activity is its GPU instance's GPM SM activity (NVML keeps no utilization
//! per instance); an instance without it (no GPM: an A100) is never called idle, as a whole
//! GPU without a utilization reading is not. It is *allocated* when a scheduler gave it to
//! someone, a process holds memory on it, or its GPU instance's memory in use is above the
//! idle floor while nothing holds any compute instance of it (see [`allocated`]); and
//! *allocated but idle* when that held while every sample of the window stayed under the
//! idle threshold, as for a whole GPU.
//!
//! Cost: the GPU's hourly cost is split by its instances' shares ([`MigInstance::fraction`],
//! compute slices over the GPU's): an instance's share is charged busy or idle by its own
//! state, and what no instance covers (slices not cut into instances) counts idle. Owners
//! are charged GPU-seconds at their instance's share, so an idle `1g` of an H100 wastes a
//! seventh of a GPU, not a GPU: each step, every instance listed charges its holders its
//! share of the step's seconds, split evenly, busy or idle by its state; a compute
//! instance's share is its own slices, so those of one GPU instance add up to it, and an
//! instance nothing holds charges nobody (docs/metrics.md, "MIG instance metrics").
//!
//! When the GPU stops answering, its instances' last known state is reported (`present:
//! false`), so the GPU's lost and hardware findings can name the instances and holders they
//! take down. A destroyed instance is forgotten a day after it was last seen.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cost::{self, CostState, CostView, Holders};
use crate::config::{CostConfig, IdleConfig};
use crate::model::{Allocation, GpuSample, MigInstance, ProcessSample};

const MIB: u64 = 1 << 20;

/// How long a destroyed instance's state is kept.
const FORGET_AFTER_SECONDS: i64 = 86_400;

/// What the engine remembers of a GPU's MIG instances, by MIG device UUID.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MigState {
    instances: BTreeMap<String, InstanceState>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct InstanceState {
    gpu_instance: u32,
    compute_instance: u32,
    profile: String,
    fraction: f64,
    /// Start (unix seconds) of the current run of idle samples.
    idle_since: Option<i64>,
    /// Start of the current run of idle samples while allocated.
    allocated_idle_since: Option<i64>,
    busy_cost: f64,
    idle_cost: f64,
    last_seen: i64,
    /// Its holders when last seen, for findings of a GPU that stopped answering.
    holders: Vec<Allocation>,
    owners: Vec<String>,
}

/// One MIG instance's findings at one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InstanceFindings {
    /// The MIG device's UUID.
    pub uuid: String,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// Its profile as `nvidia-smi -L` names it (`1g.10gb`, `1c.3g.40gb`).
    pub profile: String,
    /// Its share of the GPU, 0–1.
    pub fraction: f64,
    /// Listed by its GPU this step; false: the GPU stopped answering and this is the
    /// instance as last seen.
    pub present: bool,
    pub idle_now: bool,
    /// Consecutive idle time, seconds.
    pub idle_seconds: f64,
    pub allocated: bool,
    pub allocated_idle: bool,
    pub(crate) allocated_idle_seconds: f64,
    /// Nothing holds it and it is idle: free capacity.
    pub unused: bool,
    /// Who a scheduler gave it to.
    pub holders: Vec<Allocation>,
    /// Who its time is charged to (`[cost] owner`).
    pub owners: Vec<String>,
    /// Cost of its busy and idle time so far, and per hour at the GPU's power now.
    pub(crate) cost_busy: f64,
    pub(crate) cost_idle: f64,
    pub hourly: f64,
}

impl InstanceFindings {
    /// `MIG 1g.10gb (GI 9, CI 0)`: how alerts and the board name it.
    pub fn label(&self) -> String {
        format!(
            "MIG {} (GI {}, CI {})",
            self.profile, self.gpu_instance, self.compute_instance
        )
    }
}

/// Whether an instance is allocated: a scheduler's allocation of it, a process holding
/// memory on it, or memory in use above the idle floor that no holder of its GPU instance
/// accounts for. `processes` and `allocations` are its GPU's. The memory NVML reports is
/// the GPU instance's, the same on each of its compute instances: a compute instance
/// beside a held one is not held by that one's memory (nothing runs in it; it is free).
/// Memory nobody in the GPU instance explains (a process the host cannot see) marks each
/// of its compute instances allocated, as it marks a whole GPU. The placement counts free
/// instances by it too.
pub fn allocated(
    instance: &MigInstance,
    processes: &[&ProcessSample],
    allocations: &[&Allocation],
    config: &IdleConfig,
) -> bool {
    let holds_memory = |p: &&&ProcessSample| p.used_memory_bytes.is_none_or(|b| b > 0);
    if allocations.iter().any(|a| instance.holds(a))
        || processes
            .iter()
            .filter(holds_memory)
            .any(|p| instance.runs(p))
    {
        return true;
    }
    let gi = Some(instance.gpu_instance);
    let sibling_held = allocations.iter().any(|a| a.gpu_instance == gi)
        || processes
            .iter()
            .filter(holds_memory)
            .any(|p| p.gpu_instance == gi);
    let floor = config.memory_floor_mib.saturating_mul(MIB);
    !sibling_held && instance.memory.used_bytes.is_some_and(|used| used > floor)
}

/// A MIG GPU's load in GPUs: its instances' SM activity weighted by their shares; `None`
/// for a GPU without instances or without any instance's activity.
pub fn utilization(sample: &GpuSample) -> Option<f64> {
    let mut known = false;
    let mut sum = 0.0;
    for i in &sample.mig_instances {
        if let Some(active) = i.gpm.and_then(|g| g.sm_active) {
            known = true;
            sum += active * i.fraction();
        }
    }
    known.then(|| sum.clamp(0.0, 1.0))
}

/// The settings one step needs.
pub struct Settings<'a> {
    pub idle: &'a IdleConfig,
    pub cost: &'a CostConfig,
}

/// Charges `seconds` of one GPU and writes its instances' findings into `out`: for a GPU
/// in MIG mode instance by instance ([`MigState::step`]), otherwise as a whole
/// ([`cost::update`], `busy` by the GPU's utilization).
#[allow(clippy::too_many_arguments)]
pub fn account(
    mig: &mut MigState,
    gpu_cost: &mut CostState,
    now: i64,
    seconds: f64,
    sample: &GpuSample,
    holders: Holders<'_>,
    busy: bool,
    settings: &Settings<'_>,
    out: &mut Vec<InstanceFindings>,
) -> CostView {
    out.clear();
    if sample.up && !sample.mig_instances.is_empty() {
        return mig.step(gpu_cost, now, seconds, sample, holders, settings, out);
    }
    if !mig.instances.is_empty() {
        mig.instances
            .retain(|_, s| now - s.last_seen <= FORGET_AFTER_SECONDS);
        if !sample.up {
            mig.last_known(now, out);
        }
    }
    cost::update(gpu_cost, now, seconds, sample, holders, busy, settings.cost)
}

impl MigState {
    /// Whether no instance is remembered (a GPU never in MIG mode).
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// The instances as last seen within a day, not present now.
    pub(crate) fn last_known(&self, now: i64, out: &mut Vec<InstanceFindings>) {
        out.clear();
        // The newest listing of the GPU: the instances seen at its last sample.
        let latest = self.instances.values().map(|s| s.last_seen).max();
        for (uuid, s) in &self.instances {
            if Some(s.last_seen) != latest || now - s.last_seen > FORGET_AFTER_SECONDS {
                continue;
            }
            out.push(InstanceFindings {
                uuid: uuid.clone(),
                gpu_instance: s.gpu_instance,
                compute_instance: s.compute_instance,
                profile: s.profile.clone(),
                fraction: s.fraction,
                present: false,
                allocated: !s.holders.is_empty() || !s.owners.is_empty(),
                holders: s.holders.clone(),
                owners: s.owners.clone(),
                cost_busy: s.busy_cost,
                cost_idle: s.idle_cost,
                ..InstanceFindings::default()
            });
        }
        out.sort_by_key(|f| (f.gpu_instance, f.compute_instance));
    }

    /// One step of a GPU in MIG mode that answered.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        gpu_cost: &mut CostState,
        now: i64,
        seconds: f64,
        sample: &GpuSample,
        holders: Holders<'_>,
        settings: &Settings<'_>,
        out: &mut Vec<InstanceFindings>,
    ) -> CostView {
        let window = settings.idle.window.as_secs() as i64;
        let hourly = cost::hourly_cost(settings.cost, sample.power_watts);
        let charged = seconds > 0.0;
        let mut busy_share = 0.0;
        for instance in &sample.mig_instances {
            let processes: Vec<&ProcessSample> = holders
                .processes
                .iter()
                .copied()
                .filter(|p| instance.runs(p))
                .collect();
            let allocations: Vec<&Allocation> = holders
                .allocations
                .iter()
                .copied()
                .filter(|a| instance.holds(a))
                .collect();
            let state = self.instances.entry(instance.uuid.clone()).or_default();
            state.gpu_instance = instance.gpu_instance;
            state.compute_instance = instance.compute_instance;
            state.profile = instance.compute_profile();
            state.fraction = instance.fraction();
            // A gap in the samples breaks a run of idle samples, as for a whole GPU.
            if !charged && state.last_seen != 0 && now - state.last_seen > 0 {
                state.idle_since = None;
                state.allocated_idle_since = None;
            }
            state.last_seen = now;
            let active = instance.gpm.and_then(|g| g.sm_active);
            let idle_now = active.is_some_and(|a| a < settings.idle.threshold);
            let allocated = allocated(
                instance,
                holders.processes,
                holders.allocations,
                settings.idle,
            );
            state.idle_since = idle_now.then(|| state.idle_since.unwrap_or(now));
            state.allocated_idle_since =
                (idle_now && allocated).then(|| state.allocated_idle_since.unwrap_or(now));
            let share = instance.fraction();
            let owners = cost::owners_of(
                Holders {
                    processes: &processes,
                    allocations: &allocations,
                },
                &settings.cost.owner,
            );
            state.owners = owners.keys().cloned().collect();
            state.holders = allocations.iter().map(|a| (*a).clone()).collect();
            if charged {
                let spent = hourly * share * seconds / 3600.0;
                if idle_now {
                    state.idle_cost += spent;
                } else {
                    state.busy_cost += spent;
                    busy_share += share;
                }
                if !owners.is_empty() {
                    cost::charge_owners(gpu_cost, now, owners, share * seconds, !idle_now);
                }
            }
            let since = |t: Option<i64>| t.map_or(0.0, |s| (now - s) as f64);
            let allocated_idle_seconds = since(state.allocated_idle_since);
            out.push(InstanceFindings {
                uuid: instance.uuid.clone(),
                gpu_instance: instance.gpu_instance,
                compute_instance: instance.compute_instance,
                profile: state.profile.clone(),
                fraction: share,
                present: true,
                idle_now,
                idle_seconds: since(state.idle_since),
                allocated,
                allocated_idle: allocated && allocated_idle_seconds >= window as f64,
                allocated_idle_seconds,
                unused: idle_now && !allocated,
                holders: state.holders.clone(),
                owners: state.owners.clone(),
                cost_busy: state.busy_cost,
                cost_idle: state.idle_cost,
                hourly: hourly * share,
            });
        }
        if charged {
            // What no busy instance covers, the slices not cut into instances included.
            let spent = hourly * seconds / 3600.0;
            let busy_share = busy_share.clamp(0.0, 1.0);
            gpu_cost.busy += spent * busy_share;
            gpu_cost.idle += spent * (1.0 - busy_share);
        }
        self.instances
            .retain(|_, s| now - s.last_seen <= FORGET_AFTER_SECONDS);
        CostView {
            hourly,
            ..gpu_cost.view(now)
        }
    }
}

#[cfg(test)]
mod tests;
