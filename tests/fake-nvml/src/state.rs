//! The fake's process-wide state and the common path of every exported call: count it, check
//! that NVML is initialised, move the simulated clock, apply the scenario's faults, and only
//! then answer from the simulated fleet.
//!
//! One `Mutex` guards everything; it is never held while sleeping (injected delays, event
//! waits), so a slow call on one thread does not stall the others, as with the real library.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::Utc;
use gpu_sentinel::model::{Gpm, GpuSample, Memory, MigInstance, MigPlacement};
use gpu_sentinel::source::simulate::Fleet;
use gpu_sentinel::source::simulate::mig_profiles::table_for;
use nvml_wrapper_sys::bindings::{nvmlDevice_st, nvmlDevice_t, nvmlReturn_t};

use crate::codes::*;
use crate::scenario::{ClockMode, Fault, MigSpec, ProcessSpec, Scenario, SetSpec, VanishSpec};

/// Device handles are these addresses plus 16 × index: opaque to the caller, never
/// dereferenced, and easy to check.
const DEVICE_HANDLE_BASE: usize = 0x6e76_6d6c_0000;
const HANDLE_STRIDE: usize = 16;
/// MIG device handles: this address plus 16 × ((GPU index × 16 + GPU instance id) × 8 +
/// compute instance id), so a handle stays the same device while it exists, as NVML's do.
const MIG_HANDLE_BASE: usize = 0x6d69_6700_0000;
/// GPU instance handles: this address plus 16 × (GPU index × 16 + GPU instance id).
const GPU_INSTANCE_HANDLE_BASE: usize = 0x6769_0000_0000;
/// Most MIG devices one GPU can hold (seven GPU instances on an A100/H100).
pub const MAX_MIG_DEVICES: usize = 7;
/// GPU instance ids are below 16, compute instance ids below 8.
const GI_IDS: usize = 16;
const CI_IDS: usize = 8;
/// In wall-clock mode the fleet moves at most every 10 ms, so the calls of one collection
/// see one consistent state (and the per-GPU sample cache stays useful).
const MIN_ADVANCE: Duration = Duration::from_millis(10);

static STATE: Mutex<Option<State>> = Mutex::new(None);
static CALLS: Mutex<BTreeMap<(&'static str, Option<u32>), u64>> = Mutex::new(BTreeMap::new());

/// A registered event set: which devices it watches and the events waiting for a wait.
#[derive(Debug, Default)]
pub struct EventSet {
    pub devices: HashMap<usize, u64>,
    /// (GPU index, XID) in arrival order. NVML keeps only the last XID per device between
    /// waits; the fake does the same, so readers that must not miss XIDs get tested.
    pub pending: VecDeque<(usize, u64)>,
}

/// A GPM sample: the GPU (and MIG GPU instance) it was taken on and its GPM state then.
#[derive(Debug, Clone, Copy)]
pub struct GpmSnapshot {
    pub gpu: usize,
    pub gpu_instance: Option<u32>,
    pub gpm: Gpm,
}

/// A process the fake reports on a GPU, and the MIG instance it runs in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FakeProcess {
    pub pid: u32,
    pub used_memory_bytes: u64,
    /// Share of SM time, 0–1.
    pub sm_utilization: f64,
    /// (GPU instance, compute instance) on a GPU in MIG mode.
    pub instance: Option<(u32, u32)>,
}

pub struct State {
    pub fleet: Fleet,
    clock: ClockMode,
    speed: f64,
    faults: Vec<Fault>,
    pub extra_processes: Vec<ProcessSpec>,
    pub migs: Vec<MigSpec>,
    vanishings: Vec<VanishSpec>,
    sets: Vec<SetSpec>,
    /// The first successful `nvmlInit_v2`: fault times and wall-clock simulation count from it.
    epoch: Instant,
    last_advance: Instant,
    pub init_refs: u32,
    samples: Vec<Option<GpuSample>>,
    pub event_sets: HashMap<usize, EventSet>,
    pub gpm_samples: HashMap<usize, Option<GpmSnapshot>>,
    next_handle: usize,
}

impl State {
    pub fn new(scenario: Scenario) -> State {
        let now = Instant::now();
        State {
            fleet: Fleet::new(&scenario.simulation, Utc::now()),
            clock: scenario.clock.mode,
            speed: scenario.simulation.speed,
            faults: scenario.compiled_faults(),
            extra_processes: scenario.processes.clone(),
            migs: scenario.migs.clone(),
            vanishings: scenario.vanishings.clone(),
            sets: scenario.sets.clone(),
            epoch: now,
            last_advance: now,
            init_refs: 0,
            samples: vec![None; scenario.simulation.gpus as usize],
            event_sets: HashMap::new(),
            gpm_samples: HashMap::new(),
            next_handle: 0x5e7_0000,
        }
    }

    pub fn wall_seconds(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Brings simulated time to "now" in wall-clock mode.
    pub fn tick(&mut self) {
        if self.clock == ClockMode::Manual {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.last_advance) < MIN_ADVANCE {
            return;
        }
        self.last_advance = now;
        let target = now.duration_since(self.epoch).as_secs_f64() * self.speed;
        let step = target - self.fleet.elapsed_seconds();
        if step > 0.0 {
            self.advance(step);
        }
    }

    /// Moves simulated time forward and delivers the XIDs raised meanwhile.
    pub fn advance(&mut self, seconds: f64) {
        self.fleet.advance(seconds);
        self.samples.iter_mut().for_each(|s| *s = None);
        for event in self.fleet.take_events() {
            let Some(gpu) = event.gpu.map(|g| g as usize) else {
                continue;
            };
            for set in self.event_sets.values_mut() {
                let wanted = set.devices.get(&gpu).copied().unwrap_or(0);
                if wanted & u64::from(nvml_wrapper_sys::bindings::nvmlEventTypeXidCriticalError)
                    == 0
                {
                    continue;
                }
                let xid = u64::from(event.xid);
                match set.pending.iter_mut().find(|(g, _)| *g == gpu) {
                    Some(entry) => entry.1 = xid,
                    None => set.pending.push_back((gpu, xid)),
                }
            }
        }
    }

    /// What NVML would report for GPU `index` now (cached until the clock moves).
    pub fn sample(&mut self, index: usize) -> Result<&GpuSample, nvmlReturn_t> {
        let fleet = &self.fleet;
        let slot = self.samples.get_mut(index).ok_or(INVALID_ARGUMENT)?;
        if slot.is_none() {
            let now = fleet.elapsed_seconds();
            let mut sample = fleet.sample(index);
            for set in self.sets.iter().filter(|s| s.active(index, now)) {
                // Checked against a sample when the scenario was read.
                if let Some(changed) = sample.as_ref().and_then(|s| set.apply(s).ok()) {
                    sample = Some(changed);
                }
            }
            *slot = sample;
        }
        slot.as_ref().ok_or(INVALID_ARGUMENT)
    }

    /// Every process on GPU `index`: the simulator's and the scenario's.
    pub fn processes(&self, index: usize) -> Vec<FakeProcess> {
        let mut out: Vec<FakeProcess> = self
            .fleet
            .processes(index)
            .into_iter()
            .map(|p| FakeProcess {
                pid: p.pid,
                used_memory_bytes: p.used_memory_bytes.unwrap_or(0),
                sm_utilization: p.sm_utilization.unwrap_or(0.0),
                instance: p.gpu_instance.zip(p.compute_instance),
            })
            .collect();
        for extra in self
            .extra_processes
            .iter()
            .filter(|p| p.gpu as usize == index)
        {
            out.retain(|p| p.pid != extra.pid);
            out.push(FakeProcess {
                pid: extra.pid,
                used_memory_bytes: extra.used_memory_bytes,
                sm_utilization: extra.sm_utilization,
                instance: extra
                    .gpu_instance
                    .map(|gi| (gi, extra.compute_instance.unwrap_or(0))),
            });
        }
        out
    }

    /// Whether GPU `index` (of the simulated fleet) has left the device list by now.
    pub fn vanished(&self, index: usize) -> bool {
        !self.vanishings.is_empty() && self.vanished_at(index, self.wall_seconds())
    }

    fn vanished_at(&self, index: usize, wall: f64) -> bool {
        self.vanishings
            .iter()
            .any(|v| v.gpu as usize == index && wall >= v.after_seconds)
    }

    /// How many GPUs NVML lists now.
    pub fn listed_count(&self) -> usize {
        if self.vanishings.is_empty() {
            return self.fleet.len();
        }
        let wall = self.wall_seconds();
        (0..self.fleet.len())
            .filter(|&i| !self.vanished_at(i, wall))
            .count()
    }

    /// The fleet index of the GPU NVML lists at `nvml_index` now.
    pub fn listed(&self, nvml_index: usize) -> Option<usize> {
        if self.vanishings.is_empty() {
            return (nvml_index < self.fleet.len()).then_some(nvml_index);
        }
        let wall = self.wall_seconds();
        (0..self.fleet.len())
            .filter(|&i| !self.vanished_at(i, wall))
            .nth(nvml_index)
    }

    /// The first matching fault's error and the longest matching delay.
    fn fault(&self, function: &str, gpu: Option<u32>) -> (Option<nvmlReturn_t>, Duration) {
        let wall = self.wall_seconds();
        let mut error = None;
        let mut delay = 0;
        for fault in self
            .faults
            .iter()
            .filter(|f| f.matches(function, gpu, wall))
        {
            error = error.or(fault.error);
            delay = delay.max(fault.delay_ms);
        }
        (error, Duration::from_millis(delay))
    }

    /// A fresh opaque handle for an event set or GPM sample.
    pub fn new_handle(&mut self) -> usize {
        self.next_handle += HANDLE_STRIDE;
        self.next_handle
    }
}

pub fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The handle of GPU `index`.
pub fn device_handle(index: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut::<nvmlDevice_st>(DEVICE_HANDLE_BASE + index * HANDLE_STRIDE)
}

/// The handle of MIG device (GPU instance `gi`, compute instance `ci`) of GPU `index`.
pub fn mig_handle(index: usize, gi: u32, ci: u32) -> nvmlDevice_t {
    let n = (index * GI_IDS + gi as usize % GI_IDS) * CI_IDS + ci as usize % CI_IDS;
    std::ptr::without_provenance_mut::<nvmlDevice_st>(MIG_HANDLE_BASE + n * HANDLE_STRIDE)
}

/// The (GPU index, GPU instance, compute instance) a MIG handle stands for, if it is ours.
pub fn mig_of(handle: nvmlDevice_t) -> Option<(usize, u32, u32)> {
    // MIG handles lie between the GPU instance handles and the GPU handles.
    if handle.addr() >= DEVICE_HANDLE_BASE {
        return None;
    }
    let offset = handle.addr().checked_sub(MIG_HANDLE_BASE)?;
    let n = (offset % HANDLE_STRIDE == 0).then_some(offset / HANDLE_STRIDE)?;
    Some((
        n / CI_IDS / GI_IDS,
        (n / CI_IDS % GI_IDS) as u32,
        (n % CI_IDS) as u32,
    ))
}

/// The handle of GPU instance `gi` of GPU `index`.
pub fn gpu_instance_handle(index: usize, gi: u32) -> usize {
    GPU_INSTANCE_HANDLE_BASE + (index * GI_IDS + gi as usize % GI_IDS) * HANDLE_STRIDE
}

/// The (GPU index, GPU instance) a GPU instance handle stands for, if it is ours.
pub fn gpu_instance_of(handle: usize) -> Option<(usize, u32)> {
    if handle >= MIG_HANDLE_BASE {
        return None;
    }
    let offset = handle.checked_sub(GPU_INSTANCE_HANDLE_BASE)?;
    let n = (offset % HANDLE_STRIDE == 0).then_some(offset / HANDLE_STRIDE)?;
    Some((n / GI_IDS, (n % GI_IDS) as u32))
}

impl State {
    /// The MIG devices of GPU `index` now, `None` when it is not in MIG mode: the
    /// simulator's, or for a scenario's `[[mig]]` GPU one `1g` instance of its model per
    /// listed UUID.
    pub fn mig_instances(&mut self, index: usize) -> Option<Vec<MigInstance>> {
        let spec = self.migs.iter().find(|m| m.gpu as usize == index).cloned();
        let sample = self.sample(index).ok()?;
        if !sample.mig_instances.is_empty() {
            return Some(sample.mig_instances.clone());
        }
        let spec = spec?;
        let table = table_for(&sample.name)?;
        let one = table.profile(1, 1)?;
        let instances = spec
            .devices
            .iter()
            .take(MAX_MIG_DEVICES)
            .enumerate()
            .map(|(i, uuid)| MigInstance {
                gpu_instance: 7 + i as u32,
                compute_instance: 0,
                uuid: uuid.clone(),
                device_index: i as u32,
                profile: one.name.to_string(),
                slices: 1,
                gpu_instance_slices: 1,
                gpu_slices: table.gpu_slices,
                placement: Some(MigPlacement {
                    start: i as u32,
                    size: 1,
                }),
                multiprocessors: Some(one.multiprocessors),
                memory: Memory {
                    total_bytes: Some(one.memory_mib << 20),
                    used_bytes: Some(9 << 20),
                    free_bytes: Some((one.memory_mib - 9) << 20),
                    reserved_bytes: Some(0),
                },
                gpm: Some(Gpm::default()),
                processes: 0,
            })
            .collect();
        Some(instances)
    }

    /// MIG device (`gi`, `ci`) of GPU `index`, if it exists now.
    pub fn mig_instance(&mut self, index: usize, gi: u32, ci: u32) -> Option<MigInstance> {
        self.mig_instances(index)?
            .into_iter()
            .find(|i| i.gpu_instance == gi && i.compute_instance == ci)
    }
}

/// The GPU index a handle stands for, if it is one of ours.
pub fn device_index(handle: nvmlDevice_t) -> Option<usize> {
    let offset = handle.addr().checked_sub(DEVICE_HANDLE_BASE)?;
    (offset % HANDLE_STRIDE == 0).then_some(offset / HANDLE_STRIDE)
}

/// Counts a call of `function` (on `gpu`, where it names one).
pub fn record_call(function: &'static str, gpu: Option<u32>) {
    let mut calls = CALLS.lock().unwrap_or_else(PoisonError::into_inner);
    *calls.entry((function, None)).or_insert(0) += 1;
    if gpu.is_some() {
        *calls.entry((function, gpu)).or_insert(0) += 1;
    }
}

/// Calls of `function` so far: all of them, or those naming `gpu`.
pub fn call_count(function: &str, gpu: Option<u32>) -> u64 {
    let calls = CALLS.lock().unwrap_or_else(PoisonError::into_inner);
    calls
        .iter()
        .filter(|((f, g), _)| *f == function && *g == gpu)
        .map(|(_, n)| *n)
        .sum()
}

pub fn reset_call_counts() {
    CALLS.lock().unwrap_or_else(PoisonError::into_inner).clear();
}

/// Runs `body` so that a panic becomes `NVML_ERROR_UNKNOWN` instead of unwinding into C.
pub fn guarded(function: &str, body: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(code) => code,
        Err(_) => {
            eprintln!("fake-nvml: {function} panicked; answering NVML_ERROR_UNKNOWN");
            UNKNOWN
        }
    }
}

/// Runs a test-only export's `body`; a panic answers `T::default()` instead of unwinding.
pub fn guarded_value<T: Default>(body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        eprintln!("fake-nvml: a test-only export panicked");
        T::default()
    })
}

/// The common path of an exported call. `gpu` is the GPU the call names, if any. Answers
/// UNINITIALIZED before `nvmlInit_v2`, the injected error or delay when a fault matches,
/// GPU_IS_LOST for a GPU the simulator lost, and otherwise whatever `body` says.
pub fn enter(
    function: &'static str,
    gpu: Option<u32>,
    body: impl FnOnce(&mut State) -> Result<(), nvmlReturn_t>,
) -> nvmlReturn_t {
    guarded(function, || {
        record_call(function, gpu);
        let (error, delay) = {
            let mut guard = lock();
            let Some(state) = guard.as_mut().filter(|s| s.init_refs > 0) else {
                return UNINITIALIZED;
            };
            state.tick();
            if gpu.is_some_and(|g| g as usize >= state.fleet.len()) {
                return INVALID_ARGUMENT;
            }
            state.fault(function, gpu)
        };
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if let Some(code) = error {
            return code;
        }
        let mut guard = lock();
        let Some(state) = guard.as_mut().filter(|s| s.init_refs > 0) else {
            return UNINITIALIZED;
        };
        if let Some(g) = gpu {
            if state.vanished(g as usize) {
                return GPU_IS_LOST;
            }
            match state.sample(g as usize) {
                Ok(sample) if !sample.up => return GPU_IS_LOST,
                Ok(_) => {}
                Err(code) => return code,
            }
        }
        match body(state) {
            Ok(()) => SUCCESS,
            Err(code) => code,
        }
    })
}

/// [`enter`] for a call on a device handle; `body` gets the GPU index.
pub fn enter_device(
    function: &'static str,
    device: nvmlDevice_t,
    body: impl FnOnce(&mut State, usize) -> Result<(), nvmlReturn_t>,
) -> nvmlReturn_t {
    let Some(index) = device_index(device) else {
        return guarded(function, || {
            record_call(function, None);
            INVALID_ARGUMENT
        });
    };
    enter(function, u32::try_from(index).ok(), |state| {
        body(state, index)
    })
}

/// Checks the scenario's faults for `nvmlInit_v2` (which runs before any state exists).
pub fn init_fault(state: &State) -> (Option<nvmlReturn_t>, Duration) {
    state.fault("nvmlInit_v2", None)
}
