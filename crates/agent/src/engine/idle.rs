//! Idle time, allocated-but-idle GPUs, ghost and long-running processes.
//!
//! The rules follow what peers use in the field. A GPU is *allocated but idle* when its
//! memory is held while every sample of the window stays under the threshold (dstack's
//! "every sample" rule, not an average that one burst can satisfy); a GPU with nothing
//! held is *unused*: free capacity, not wasted allocation. A *ghost* is a process that
//! holds memory with 0% SM for the whole window while its PID is gone, a zombie, or an
//! orphan. Where no process list exists (nvidia-smi logs), memory in use above a floor
//! stands for an allocation.
//!
//! On a GPU in MIG mode NVML keeps no per-process utilization (the call answers
//! NOT_SUPPORTED), so a process in a MIG instance is judged by its GPU instance's GPM SM
//! activity (see [`sm_idle`]), and its findings name the instance.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::IdleConfig;
use crate::model::{Allocation, GpuSample, Liveness, MigInstance, ProcessSample};

/// What idle tracking remembers about one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleState {
    /// Start (unix seconds) of the current run of idle samples.
    idle_since: Option<i64>,
    /// Start of the current run of idle samples while memory was held.
    allocated_idle_since: Option<i64>,
    /// Per PID: start of its current run of 0% SM while holding memory.
    zero_sm_since: BTreeMap<u32, i64>,
}

/// A process worth an operator's attention, with its owner.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcessFinding {
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    pub liveness: Liveness,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_seconds: Option<f64>,
    /// How long it has held memory with 0% SM.
    pub idle_seconds: f64,
    /// On a GPU in MIG mode, the MIG instance it runs in: GPU and compute instance, the
    /// compute instance's profile (`1g.10gb`, `1c.3g.40gb`) and MIG device UUID, as the
    /// instance's `gpu_mig_*` series name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_uuid: Option<String>,
}

impl ProcessFinding {
    /// `p` found idle for `idle_seconds`, in its MIG instance among `instances` (its GPU's).
    fn of(p: &ProcessSample, idle_seconds: f64, instances: &[MigInstance]) -> ProcessFinding {
        let instance = instance_of(p, instances);
        ProcessFinding {
            pid: p.pid,
            memory_bytes: p.used_memory_bytes,
            user: p.user.clone(),
            process: p.process.clone(),
            command: p.command.clone(),
            container: p.container.clone(),
            pod: p.pod.clone(),
            namespace: p.namespace.clone(),
            team: p.team.clone(),
            liveness: p.liveness,
            runtime_seconds: p.runtime_seconds,
            idle_seconds,
            gpu_instance: instance.map(|i| i.gpu_instance).or(p.gpu_instance),
            compute_instance: instance.map(|i| i.compute_instance).or(p.compute_instance),
            profile: instance.map(MigInstance::compute_profile),
            mig_uuid: instance.map(|i| i.uuid.clone()),
        }
    }

    /// `MIG 1g.10gb (GI 9, CI 0)` for a process in a MIG instance its GPU listed.
    pub fn instance_label(&self) -> Option<String> {
        let (profile, gi) = (self.profile.as_ref()?, self.gpu_instance?);
        Some(format!(
            "MIG {profile} (GI {gi}, CI {})",
            self.compute_instance.unwrap_or(0)
        ))
    }

    /// Who to talk to about it: `namespace/pod`, else the user, else the PID.
    pub fn owner(&self) -> String {
        match (&self.namespace, &self.pod, &self.user) {
            (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
            (None, Some(pod), _) => format!("pod {pod}"),
            (_, _, Some(user)) => user.clone(),
            _ => format!("pid {}", self.pid),
        }
    }
}

/// Idle findings of one GPU at one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IdleFindings {
    /// This sample is under the idle threshold.
    pub idle_now: bool,
    /// Consecutive idle time, seconds.
    pub idle_seconds: f64,
    /// Someone holds memory on the GPU now.
    pub allocated: bool,
    /// Memory held while every sample of the window was idle.
    pub allocated_idle: bool,
    /// Consecutive idle time while memory was held, seconds.
    pub(crate) allocated_idle_seconds: f64,
    /// Nothing held and idle: free capacity.
    pub unused: bool,
    /// Who a scheduler gave the GPU to (pods, Slurm jobs), whether they run anything or not
    /// (the API shows them next to the processes, not here).
    #[serde(skip)]
    pub holders: Vec<Allocation>,
    pub ghosts: Vec<ProcessFinding>,
    pub long_running: Vec<ProcessFinding>,
    /// Live processes on a GPU no scheduler gave out, on a host whose scheduler reported
    /// its allocations (see [`outside_scheduler`]).
    pub(crate) outside_scheduler: Vec<ProcessFinding>,
}

const MIB: u64 = 1 << 20;

/// GPM SM activity under this counts as 0% SM: what NVML's per-process reading, in whole
/// percent, shows as 0.
const ZERO_SM_ACTIVITY: f64 = 0.01;

/// The MIG instance among `instances` (its GPU's) that process `p` runs in.
fn instance_of<'a>(p: &ProcessSample, instances: &'a [MigInstance]) -> Option<&'a MigInstance> {
    p.gpu_instance?;
    instances.iter().find(|i| i.runs(p))
}

/// Whether process `p` used no SM since the last sample: by its own reading where the
/// source gives one (sources report 0 for a process that did not run). In a MIG instance
/// NVML gives none (per-process utilization is NOT_SUPPORTED in MIG mode), and nothing is
/// not evidence of a ghost; there the GPU instance's GPM SM activity stands in for it. It
/// covers every process of the GPU instance, so a live process beside a dead one keeps
/// the dead one from being called idle: a ghost may be missed, never made up. A process
/// with neither reading (no GPM: an A100) is never idle.
fn sm_idle(p: &ProcessSample, instances: &[MigInstance]) -> bool {
    match p.sm_utilization {
        Some(u) => u <= 0.0,
        None => instance_of(p, instances)
            .and_then(|i| i.gpm)
            .and_then(|g| g.sm_active)
            .is_some_and(|a| a < ZERO_SM_ACTIVITY),
    }
}

/// The live processes of a GPU that no scheduler gave out, when `scheduled` (the host's
/// scheduler listed its allocations this collection: see `Snapshot::scheduled_by`). On such
/// a host every GPU job should hold an allocation; one that does not was started beside
/// the scheduler (`docker run --gpus`, a pod seeing all GPUs through
/// `NVIDIA_VISIBLE_DEVICES`, a login-node shell), takes GPU time the scheduler thinks is
/// free, and is charged to no one. Dead processes are ghosts, reported as such.
pub(crate) fn outside_scheduler(
    processes: &[&ProcessSample],
    allocations: &[&Allocation],
    scheduled: bool,
    sample: &GpuSample,
) -> Vec<ProcessFinding> {
    if !scheduled || !allocations.is_empty() {
        return Vec::new();
    }
    processes
        .iter()
        .filter(|p| !matches!(p.liveness, Liveness::Gone | Liveness::Zombie))
        .map(|p| ProcessFinding::of(p, 0.0, &sample.mig_instances))
        .collect()
}

/// Someone holds the GPU: a scheduler gave it to a pod or job (which may run nothing yet: a
/// notebook left open, a job stuck before its first kernel), a process holds memory, or
/// (where no process list exists, as in nvidia-smi logs) memory in use is above the floor.
/// Placement counts free GPUs by it too.
pub fn allocated(
    sample: &GpuSample,
    processes: &[&ProcessSample],
    allocations: &[&Allocation],
    config: &IdleConfig,
) -> bool {
    let held_by_processes = processes
        .iter()
        .any(|p| p.used_memory_bytes.is_none_or(|b| b > 0));
    let floor = config.memory_floor_mib.saturating_mul(MIB);
    !allocations.is_empty()
        || held_by_processes
        || sample.memory.used_bytes.is_some_and(|used| used > floor)
}

/// Updates `state` with one sample and returns what holds now.
pub fn update(
    state: &mut IdleState,
    now: i64,
    sample: &GpuSample,
    processes: &[&ProcessSample],
    allocations: &[&Allocation],
    config: &IdleConfig,
) -> IdleFindings {
    if !sample.up {
        // A GPU that does not answer is neither idle nor busy; start over when it returns.
        *state = IdleState::default();
        return IdleFindings::default();
    }
    let window = config.window.as_secs() as i64;
    let idle_now = sample.utilization.gpu.is_some_and(|u| u < config.threshold);
    let allocated = allocated(sample, processes, allocations, config);

    state.idle_since = if idle_now {
        Some(state.idle_since.unwrap_or(now))
    } else {
        None
    };
    state.allocated_idle_since = if idle_now && allocated {
        Some(state.allocated_idle_since.unwrap_or(now))
    } else {
        None
    };
    let idle_seconds = state.idle_since.map_or(0.0, |s| (now - s) as f64);
    let allocated_idle_seconds = state.allocated_idle_since.map_or(0.0, |s| (now - s) as f64);

    let mut ghosts = Vec::new();
    let mut long_running = Vec::new();
    let mut zero_sm = BTreeMap::new();
    for p in processes {
        let holds = p.used_memory_bytes.is_none_or(|b| b > 0);
        let instances = &sample.mig_instances;
        if holds && sm_idle(p, instances) {
            let since = state.zero_sm_since.get(&p.pid).copied().unwrap_or(now);
            zero_sm.insert(p.pid, since);
            let dead = matches!(
                p.liveness,
                Liveness::Gone | Liveness::Zombie | Liveness::Orphaned
            );
            if dead && now - since >= window {
                ghosts.push(ProcessFinding::of(p, (now - since) as f64, instances));
            }
        }
        if p.runtime_seconds
            .is_some_and(|r| r >= config.long_running.as_secs_f64())
        {
            let idle = zero_sm.get(&p.pid).map_or(0.0, |s| (now - s) as f64);
            long_running.push(ProcessFinding::of(p, idle, &sample.mig_instances));
        }
    }
    // PIDs that left the GPU are forgotten, so the map stays as small as the process list.
    state.zero_sm_since = zero_sm;

    IdleFindings {
        idle_now,
        idle_seconds,
        allocated,
        allocated_idle: allocated && allocated_idle_seconds >= window as f64,
        allocated_idle_seconds,
        unused: idle_now && !allocated,
        holders: allocations.iter().map(|a| (*a).clone()).collect(),
        ghosts,
        long_running,
        outside_scheduler: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpu(util: f64, used: u64) -> GpuSample {
        let mut s = GpuSample {
            up: true,
            ..GpuSample::default()
        };
        s.utilization.gpu = Some(util);
        s.memory.used_bytes = Some(used);
        s
    }

    fn process(pid: u32, sm: Option<f64>, liveness: Liveness) -> ProcessSample {
        ProcessSample {
            pid,
            used_memory_bytes: Some(20 * GIB),
            sm_utilization: sm,
            user: Some("alice".into()),
            liveness,
            runtime_seconds: Some(3600.0),
            ..ProcessSample::default()
        }
    }

    fn config() -> IdleConfig {
        IdleConfig::default()
    }

    #[test]
    fn allocated_idle_needs_every_sample_of_the_window() {
        let mut state = IdleState::default();
        let p = process(10, Some(0.0), Liveness::Running);
        let mut last = IdleFindings::default();
        for minute in 0..=30 {
            // One busy sample at minute 10 restarts the window.
            let util = if minute == 10 { 0.5 } else { 0.01 };
            last = update(
                &mut state,
                minute * 60,
                &gpu(util, 21 * GIB),
                &[&p],
                &[],
                &config(),
            );
        }
        assert!(
            !last.allocated_idle,
            "only 20 idle minutes since the busy sample"
        );
        for minute in 31..=41 {
            last = update(
                &mut state,
                minute * 60,
                &gpu(0.01, 21 * GIB),
                &[&p],
                &[],
                &config(),
            );
        }
        assert!(last.allocated_idle);
        assert_eq!(last.allocated_idle_seconds, 30.0 * 60.0);
        assert!(!last.unused);
    }

    #[test]
    fn a_gpu_with_nothing_held_is_unused_not_wasted() {
        let mut state = IdleState::default();
        let mut last = IdleFindings::default();
        for minute in 0..=60 {
            last = update(&mut state, minute * 60, &gpu(0.0, 0), &[], &[], &config());
        }
        assert!(last.unused && !last.allocated && !last.allocated_idle);
        assert_eq!(last.idle_seconds, 3600.0);
    }

    #[test]
    fn memory_above_the_floor_stands_for_an_allocation_without_a_process_list() {
        let mut state = IdleState::default();
        let mut last = IdleFindings::default();
        for minute in 0..=30 {
            last = update(
                &mut state,
                minute * 60,
                &gpu(0.0, 30 * GIB),
                &[],
                &[],
                &config(),
            );
        }
        assert!(last.allocated_idle);
    }

    #[test]
    fn a_dead_process_holding_memory_becomes_a_ghost_after_the_window() {
        let mut state = IdleState::default();
        let alive = process(10, Some(0.0), Liveness::Running);
        let ghost = process(11, Some(0.0), Liveness::Gone);
        // No utilization at all (unsupported, as under MIG) is no evidence of a ghost.
        let unknown = process(12, None, Liveness::Orphaned);
        let mut last = IdleFindings::default();
        for minute in 0..=30 {
            last = update(
                &mut state,
                minute * 60,
                &gpu(0.0, 41 * GIB),
                &[&alive, &ghost, &unknown],
                &[],
                &config(),
            );
            if minute < 30 {
                assert!(
                    last.ghosts.is_empty(),
                    "not before the window at minute {minute}"
                );
            }
        }
        assert_eq!(last.ghosts.len(), 1);
        assert_eq!(last.ghosts[0].pid, 11);
        assert_eq!(last.ghosts[0].owner(), "alice");
    }

    #[test]
    fn computing_resets_a_ghost_candidate() {
        let mut state = IdleState::default();
        let orphan_idle = process(12, Some(0.0), Liveness::Orphaned);
        let orphan_busy = process(12, Some(0.3), Liveness::Orphaned);
        for minute in 0..20 {
            update(
                &mut state,
                minute * 60,
                &gpu(0.0, 21 * GIB),
                &[&orphan_idle],
                &[],
                &config(),
            );
        }
        update(
            &mut state,
            20 * 60,
            &gpu(0.3, 21 * GIB),
            &[&orphan_busy],
            &[],
            &config(),
        );
        let mut last = IdleFindings::default();
        for minute in 21..45 {
            last = update(
                &mut state,
                minute * 60,
                &gpu(0.0, 21 * GIB),
                &[&orphan_idle],
                &[],
                &config(),
            );
        }
        assert!(
            last.ghosts.is_empty(),
            "24 idle minutes since it last computed"
        );
    }

    #[test]
    fn long_running_processes_are_listed() {
        let mut state = IdleState::default();
        let mut p = process(13, Some(0.9), Liveness::Running);
        p.runtime_seconds = Some(25.0 * 3600.0);
        let f = update(&mut state, 0, &gpu(0.9, 21 * GIB), &[&p], &[], &config());
        assert_eq!(f.long_running.len(), 1);
    }
}

#[cfg(test)]
mod allocation_tests {
    use super::*;

    #[test]
    fn a_gpu_allocated_to_a_pod_without_a_process_is_allocated_idle() {
        let mut state = IdleState::default();
        let mut sample = GpuSample {
            up: true,
            ..GpuSample::default()
        };
        sample.utilization.gpu = Some(0.0);
        sample.memory.used_bytes = Some(0);
        let pod = Allocation {
            namespace: Some("ml-idle".into()),
            pod: Some("notebook-0".into()),
            ..Allocation::default()
        };
        let mut last = IdleFindings::default();
        for minute in 0..=30 {
            last = update(
                &mut state,
                minute * 60,
                &sample,
                &[],
                &[&pod],
                &IdleConfig::default(),
            );
        }
        assert!(last.allocated && last.allocated_idle && !last.unused);
        assert_eq!(last.holders, vec![pod]);
    }

    #[test]
    fn live_processes_without_an_allocation_are_outside_a_reporting_scheduler() {
        let process = |pid, liveness| ProcessSample {
            pid,
            liveness,
            ..ProcessSample::default()
        };
        let (live, gone) = (process(1, Liveness::Running), process(2, Liveness::Gone));
        let (pod, sample) = (Allocation::default(), GpuSample::default());
        let found = outside_scheduler(&[&live, &gone], &[], true, &sample);
        assert_eq!(
            found.iter().map(|f| f.pid).collect::<Vec<_>>(),
            [1],
            "ghosts are not jobs"
        );
        assert!(
            outside_scheduler(&[&live], &[&pod], true, &sample).is_empty(),
            "the pod's GPU"
        );
        assert!(
            outside_scheduler(&[&live], &[], false, &sample).is_empty(),
            "without a scheduler's list nothing is outside it"
        );
    }
}
