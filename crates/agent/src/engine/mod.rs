//! The analysis engine: a pure step from (state, snapshot) to (state, findings).
//!
//! No I/O and no clock reads happen here: time comes from the snapshot, so a replay of a
//! recording gives exactly the findings the live agent gave, as fast as the CPU allows.
//! State is bounded (rolling windows of downsampled aggregates per GPU, see [`window`])
//! and serialisable, so the agent persists it in the state directory ([`store`]) and a
//! restart does not forget a week of evidence.
//!
//! - [`risk`]: failure-risk features and the logistic model, with rules for known-bad states;
//! - [`idle`]: idle time, allocated-but-idle GPUs, ghost and long-running processes;
//! - [`cost`]: what busy and idle time cost, and GPU-seconds per owner;
//! - [`capacity`]: scaling advice with hysteresis, and placement on this node.

mod assess;
pub mod capacity;
pub mod cost;
mod counters;
pub(crate) use counters::FailingLink;
pub mod health;
pub mod idle;
pub mod mig;
mod readings;
pub(crate) use readings::Readings;
pub mod risk;
mod slots;
pub mod store;
pub mod window;

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::{CapacityConfig, CostConfig, DEFAULT_RISK_THRESHOLD, HealthConfig, IdleConfig};
use crate::model::{Allocation, ClockEvents, GpuSample, ProcessSample, Snapshot};
use counters::Counters;
pub(crate) use slots::GpuStates;
use slots::Scratch;
use window::{Deltas, Point, Windows};

/// Shortest gap between two samples of a GPU that may count as a hole (the agent was down,
/// the log has one): time across a hole is attributed to nothing. The limit is this or four
/// times the source's usual cadence, whichever is longer, so a simulator at 600× speed
/// (50 simulated minutes between samples) is not all holes.
const MAX_GAP_SECONDS: f64 = 600.0;

/// Snapshot gaps the cadence is the median of: enough that one outage does not move it,
/// few enough that a changed collection interval is adopted within minutes.
const CADENCE_SAMPLES: usize = 15;

/// How long a GPU may be missing from snapshots before it counts as lost.
pub const VANISHED_AFTER_SECONDS: i64 = 120;

/// Hardware XIDs remembered per GPU for reasons and rules.
const RECENT_XIDS: usize = 64;

/// Everything the engine needs besides the snapshots.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub risk_model: risk::RiskModel,
    pub risk_threshold: f64,
    pub idle: IdleConfig,
    pub cost: CostConfig,
    pub capacity: CapacityConfig,
    pub health: HealthConfig,
}

impl EngineConfig {
    /// The engine settings of a configuration file; loads the risk model it names.
    pub fn from_config(config: &crate::config::Config) -> anyhow::Result<EngineConfig> {
        let risk_model = match &config.risk.model {
            Some(path) => risk::RiskModel::load(path)?,
            None => risk::RiskModel::shipped(),
        };
        Ok(EngineConfig {
            risk_model,
            risk_threshold: config.risk.threshold,
            idle: config.idle.clone(),
            cost: config.cost.clone(),
            capacity: config.capacity.clone(),
            health: config.health.clone(),
        })
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            risk_model: risk::RiskModel::shipped(),
            risk_threshold: DEFAULT_RISK_THRESHOLD,
            idle: IdleConfig::default(),
            cost: CostConfig::default(),
            capacity: CapacityConfig::default(),
            health: HealthConfig::default(),
        }
    }
}

/// What the engine remembers about one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    /// Unix seconds of the last sample of this GPU, up or not.
    pub(crate) last_seen: i64,
    /// Unix seconds of the last sample in which the GPU answered.
    pub last_up: Option<i64>,
    pub windows: Windows,
    counters: Counters,
    pub idle: idle::IdleState,
    pub cost: cost::CostState,
    /// Hardware-fault XIDs with their unix time, newest last.
    pub(crate) recent_xids: VecDeque<(i64, u32)>,
    /// The GPU answered at some point and then stopped answering or vanished.
    pub lost: bool,
    /// The risk features' running state and held evidence; absent from state saved
    /// before it existed, and then learnt again.
    #[serde(default)]
    pub risk: risk::RiskState,
    /// The health verdicts' holds and references; absent from older state: judged afresh.
    #[serde(default)]
    pub health: health::GpuHealthState,
    /// Its MIG instances' idle runs and cost (absent from state saved before them).
    #[serde(default, skip_serializing_if = "mig::MigState::is_empty")]
    pub mig: mig::MigState,
}

impl GpuState {
    fn new(sample: &GpuSample, at: i64) -> GpuState {
        GpuState {
            index: sample.index,
            uuid: sample.uuid.clone(),
            name: sample.name.clone(),
            pci_bus_id: sample.pci_bus_id.clone(),
            last_seen: at,
            last_up: None,
            windows: Windows::default(),
            counters: Counters::default(),
            idle: idle::IdleState::default(),
            cost: cost::CostState::default(),
            recent_xids: VecDeque::new(),
            lost: false,
            risk: risk::RiskState::default(),
            health: health::GpuHealthState::default(),
            mig: mig::MigState::default(),
        }
    }
}

/// The engine's whole memory: what [`store`] persists.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineState {
    /// Format version of the persisted state.
    pub version: u32,
    /// By GPU UUID (persisted as a map), each in a dense slot.
    pub gpus: GpuStates,
    pub capacity: capacity::CapacityState,
    /// Unix seconds of the last snapshot.
    pub last_at: Option<i64>,
    /// The latest gaps between snapshots, seconds: the source's cadence is their median.
    #[serde(default)]
    pub gaps: VecDeque<i64>,
    /// The node components' holds; absent from older state.
    #[serde(default)]
    pub health: health::NodeHealthState,
}

impl EngineState {
    /// Longest gap between a GPU's samples that is still observed time.
    fn max_gap(&self) -> f64 {
        let mut gaps: Vec<i64> = self.gaps.iter().copied().collect();
        gaps.sort_unstable();
        let cadence = gaps.get(gaps.len() / 2).copied().unwrap_or(0) as f64;
        MAX_GAP_SECONDS.max(4.0 * cadence)
    }

    fn note_gap(&mut self, now: i64) {
        if let Some(gap) = self.last_at.map(|last| now - last).filter(|g| *g > 0) {
            self.gaps.push_back(gap);
            while self.gaps.len() > CADENCE_SAMPLES {
                self.gaps.pop_front();
            }
        }
    }
}

/// Current format of [`EngineState`]; state of another version is discarded with a warning.
pub const STATE_VERSION: u32 = 1;

/// What one step found, GPU by GPU and for the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Findings {
    pub at: DateTime<Utc>,
    pub gpus: Vec<GpuFindings>,
    pub capacity: capacity::Advice,
    pub placement: capacity::Placement,
    /// The node's health verdict (each GPU's is on its findings).
    pub health: health::NodeHealth,
}

/// What one step found about one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuFindings {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub up: bool,
    /// Answered before, and now does not (`GPU_IS_LOST`, vanished from NVML, rows stopped).
    pub lost: bool,
    pub risk: risk::Assessment,
    pub idle: idle::IdleFindings,
    /// Thermal slowdown active in this sample.
    pub thermal_slowdown: bool,
    /// Hardware-fault XIDs raised in this step.
    pub new_hardware_xids: Vec<u32>,
    /// Distinct hardware-fault XIDs of the last 24 hours.
    pub hardware_xids_24h: Vec<u32>,
    /// Row remapping failed: NVIDIA's RMA signal.
    pub row_remap_failure: bool,
    /// Uncorrectable ECC errors counted in the last 24 hours.
    pub uncorrectable_ecc_24h: f64,
    /// The NVLink whose errors grew most while watched, named in the risk's reasons.
    pub failing_nvlink: Option<FailingLink>,
    pub cost: cost::CostView,
    /// This step's raw readings, for rules that compare them with thresholds.
    pub readings: Readings,
    /// The GPU's health verdict, component by component.
    pub health: health::GpuHealth,
    /// Each MIG instance's idle state and cost, on a GPU in MIG mode.
    pub mig: Vec<mig::InstanceFindings>,
}

/// Every finding a GPU can have, in the order the API and the replay report list them.
pub const FINDING_KINDS: [&str; 9] = [
    "failure_risk",
    "lost",
    "hardware_xid",
    "row_remap_failure",
    "uncorrectable_ecc",
    "thermal_slowdown",
    "allocated_idle",
    "ghost_process",
    "long_running_process",
];

/// The names of the kinds set in `mask` (see [`GpuFindings::kind_mask`]).
pub fn kinds_in(mask: u32) -> Vec<&'static str> {
    FINDING_KINDS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, kind)| *kind)
        .collect()
}

impl GpuFindings {
    /// Findings for a GPU the engine knows but the snapshot does not list, written over
    /// `self` (a finding of an earlier step, whose allocations are reused).
    fn set_missing(&mut self, state: &GpuState, now: i64) {
        self.index = state.index;
        self.uuid.clone_from(&state.uuid);
        self.name.clone_from(&state.name);
        self.up = false;
        self.lost = state.lost;
        // Set with the risk, from the step's one summary of the windows.
        self.risk.score = 0.0;
        self.uncorrectable_ecc_24h = 0.0;
        self.idle = idle::IdleFindings::default();
        self.thermal_slowdown = false;
        self.new_hardware_xids.clear();
        recent_distinct(&state.recent_xids, now, &mut self.hardware_xids_24h);
        self.row_remap_failure = false;
        self.failing_nvlink = state.counters.failing_link();
        self.cost = state.cost.view(now);
        self.readings = Readings::default();
        state.mig.last_known(now, &mut self.mig);
    }

    /// The findings that hold as a bit mask over [`FINDING_KINDS`] (bit i: kind i).
    pub fn kind_mask(&self, risk_threshold: f64) -> u32 {
        let holds: [bool; FINDING_KINDS.len()] = [
            self.risk.score >= risk_threshold,
            self.lost,
            !self.hardware_xids_24h.is_empty(),
            self.row_remap_failure,
            self.uncorrectable_ecc_24h > 0.0,
            self.thermal_slowdown,
            self.idle.allocated_idle,
            !self.idle.ghosts.is_empty(),
            !self.idle.long_running.is_empty(),
        ];
        holds
            .iter()
            .enumerate()
            .filter(|(_, holds)| **holds)
            .fold(0, |mask, (i, _)| mask | 1 << i)
    }

    /// Names of the findings that hold, as the replay report and the API list them.
    pub fn kinds(&self, risk_threshold: f64) -> Vec<&'static str> {
        kinds_in(self.kind_mask(risk_threshold))
    }
}

/// The analysis engine.
#[derive(Debug, Clone)]
pub struct Engine {
    pub config: EngineConfig,
    pub state: EngineState,
    /// Buffers a step reuses, so that a step allocates nothing per GPU for them.
    scratch: Scratch,
    /// Findings handed back by [`Engine::recycle`], the GPUs' and the node's verdicts: the
    /// next step writes over them, reusing their strings and lists.
    spare: Vec<GpuFindings>,
    spare_node: Vec<health::Verdict>,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Engine {
        Engine::with_state(config, EngineState::default())
    }

    /// An engine that resumes from persisted state.
    pub(crate) fn with_state(config: EngineConfig, mut state: EngineState) -> Engine {
        state.version = STATE_VERSION;
        Engine {
            config,
            state,
            scratch: Scratch::default(),
            spare: Vec::new(),
            spare_node: Vec::new(),
        }
    }

    /// Hands back a step's findings once read: the next step reuses their allocations (a
    /// replay steps millions of times; the live agent need not). Findings come out the same,
    /// provided they come back as the step gave them: a GPU's verdicts published from holds
    /// that did not change since are not written again.
    pub fn recycle(&mut self, findings: Findings) {
        if findings.gpus.capacity() >= self.spare.capacity() {
            self.spare = findings.gpus;
        }
        self.spare_node = findings.health.components;
        self.scratch.placement_slots = findings.placement.slots;
    }

    /// Folds one snapshot into the state and returns what holds now.
    pub fn step(&mut self, snapshot: &Snapshot) -> Findings {
        let now = snapshot.at.timestamp();
        self.state.note_gap(now);
        let max_gap = self.state.max_gap();
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.slots.clear();
        // Findings are written over those of an earlier step ([`Engine::recycle`]).
        let mut gpus = std::mem::take(&mut self.spare);
        let mut used = 0;
        for (position, sample) in snapshot.gpus.iter().enumerate() {
            // A recording of nvidia-smi logs has no processes, allocations or XIDs: those
            // lists are then empty without a pass over the snapshot's.
            let processes: Vec<&ProcessSample> = match snapshot.processes.is_empty() {
                true => Vec::new(),
                false => (snapshot.processes.iter())
                    .filter(|p| p.is_on(sample))
                    .collect(),
            };
            let allocations: Vec<&Allocation> = match snapshot.allocations.is_empty() {
                true => Vec::new(),
                false => (snapshot.allocations.iter())
                    .filter(|a| a.is_on(sample))
                    .collect(),
            };
            let xids: Vec<u32> = match snapshot.events.is_empty() {
                true => Vec::new(),
                false => (snapshot.events.iter())
                    .filter(|e| e.is_on(sample))
                    .map(|e| e.xid)
                    .collect(),
            };
            let slot = self
                .state
                .gpus
                .slot_of(position, &sample.uuid, || GpuState::new(sample, now));
            scratch.slots.push(slot);
            let findings = next_finding(&mut gpus, &mut used);
            self.step_gpu(
                findings,
                slot,
                now,
                max_gap,
                sample,
                &processes,
                &allocations,
                &xids,
            );
            let scheduled = !snapshot.scheduled_by.is_empty();
            findings.idle.outside_scheduler =
                idle::outside_scheduler(&processes, &allocations, scheduled, sample);
        }
        let mut repeated = scratch.mark_seen(self.state.gpus.len());
        // A GPU missing for a week (replaced, or an RMA) is forgotten: it should not stay
        // lost, and alerting, forever.
        let seen = &scratch.seen;
        let dropped = self.state.gpus.retain(|slot, state| {
            seen.get(slot).copied().unwrap_or(false) || now - state.last_seen <= window::WEEK
        });
        if dropped {
            repeated = scratch.look_up_again(&mut self.state.gpus, snapshot, now);
        }
        // GPUs the engine knew that this snapshot no longer lists: gone from NVML, or
        // their rows stopped in a log. They stay in the findings, lost once the gap is
        // long; in UUID order, after the listed ones.
        scratch.find_missing(&self.state.gpus);
        for &slot in &scratch.missing {
            let state = self.state.gpus.slot_mut(slot);
            if state.last_up.is_some() && now - state.last_seen > VANISHED_AFTER_SECONDS {
                state.lost = true;
            }
            next_finding(&mut gpus, &mut used).set_missing(state, now);
            scratch.slots.push(slot);
        }
        gpus.truncate(used);
        self.assess_risk(now, snapshot, &mut gpus, &mut scratch, repeated);
        let health = self.assess_health(now, snapshot, &mut gpus, &scratch);
        let span = self.config.capacity.window.as_secs() as i64;
        let mut utilization: Vec<Option<f64>> = Vec::with_capacity(gpus.len());
        for ((g, &slot), summaries) in gpus.iter().zip(&scratch.slots).zip(&scratch.summaries) {
            if !g.up {
                continue;
            }
            // The capacity window is usually the hour the step has summarised already.
            utilization.push(if span == window::HOUR {
                summaries.hour.utilization.mean()
            } else {
                let state = self.state.gpus.slot_mut(slot);
                state.windows.last_sums(now, span).utilization.mean()
            });
        }
        self.scratch = scratch;
        let advice = capacity::advise(
            &mut self.state.capacity,
            now,
            &utilization,
            &self.config.capacity,
        );
        let slots = std::mem::take(&mut self.scratch.placement_slots);
        let placement = capacity::Placement::of_into(snapshot, &self.config.idle, slots);
        self.state.last_at = Some(now);
        Findings {
            at: snapshot.at,
            gpus,
            capacity: advice,
            placement,
            health,
        }
    }

    /// Folds one GPU's sample into its state and writes what holds into `out` (all but the
    /// risk and what comes from the windows' summaries, which [`Engine::assess_risk`] sets).
    #[allow(clippy::too_many_arguments)]
    fn step_gpu(
        &mut self,
        out: &mut GpuFindings,
        slot: usize,
        now: i64,
        max_gap: f64,
        sample: &GpuSample,
        processes: &[&ProcessSample],
        allocations: &[&Allocation],
        xids: &[u32],
    ) {
        let state = self.state.gpus.slot_mut(slot);
        // Time is attributed only between close samples: across a longer gap (the agent was
        // down, the log has a hole) nothing is known, and a clock stepping back adds nothing.
        let gap = (now - state.last_seen) as f64;
        let seconds = if (0.0..=max_gap).contains(&gap) {
            gap
        } else {
            0.0
        };
        if gap > max_gap {
            // Idle runs are runs of consecutive samples; one broken by a gap starts over.
            state.idle = idle::IdleState::default();
        }
        state.last_seen = state.last_seen.max(now);
        state.index = sample.index;
        // Compared first: the name is the same sample after sample, and copying it was a
        // measurable share of a step.
        if !sample.name.is_empty() && state.name != sample.name {
            state.name.clone_from(&sample.name);
        }
        if sample.up {
            state.last_up = Some(now);
            state.lost = false;
        } else if state.last_up.is_some() {
            state.lost = true;
        }

        let mut deltas = if sample.up {
            state.counters.update(sample)
        } else {
            Deltas::default()
        };
        out.new_hardware_xids.clear();
        for &xid in xids {
            if crate::xid::is_hardware_fault(xid) {
                deltas.xid_hardware += 1.0;
                out.new_hardware_xids.push(xid);
                state.recent_xids.push_back((now, xid));
                while state.recent_xids.len() > RECENT_XIDS {
                    state.recent_xids.pop_front();
                }
            }
        }
        deltas.failed_calls = f64::from(sample.failed_calls);
        let events = sample.clock_events.unwrap_or_default();
        let point = Point {
            at: now,
            seconds,
            // A GPU in MIG mode has no utilization of its own: its instances' activity.
            utilization: sample.utilization.gpu.or_else(|| mig::utilization(sample)),
            temperature: sample.temperature_celsius,
            memory_temperature: sample.memory_temperature_celsius,
            power: sample.power_watts,
            thermal_slowdown: events.thermal(),
            power_brake: events.intersects(ClockEvents::HW_POWER_BRAKE_SLOWDOWN),
            collect_seconds: sample.up.then_some(sample.collect_seconds),
            deltas,
        };
        state.windows.add(&point);
        state.risk.observe(&point, sample, &state.windows);
        (state.risk.cadence).note_news(point.deltas != window::Deltas::default());

        let idle = idle::update(
            &mut state.idle,
            now,
            sample,
            processes,
            allocations,
            &self.config.idle,
        );
        let busy = !idle.idle_now;
        let cost = mig::account(
            &mut state.mig,
            &mut state.cost,
            now,
            seconds,
            sample,
            cost::Holders {
                processes,
                allocations,
            },
            busy,
            &mig::Settings {
                idle: &self.config.idle,
                cost: &self.config.cost,
            },
            &mut out.mig,
        );
        recent_distinct(&state.recent_xids, now, &mut out.hardware_xids_24h);
        out.index = sample.index;
        out.uuid.clone_from(&sample.uuid);
        out.name.clone_from(&state.name);
        out.up = sample.up;
        out.lost = state.lost;
        out.idle = idle;
        out.thermal_slowdown = events.thermal();
        out.row_remap_failure = sample.remapped_rows.is_some_and(|r| r.failure);
        out.failing_nvlink = state.counters.failing_link();
        out.uncorrectable_ecc_24h = 0.0;
        out.cost = cost;
        out.readings = Readings::of(sample);
    }
}

/// The next finding of a step: one of an earlier step to write over, or a new one.
fn next_finding<'a>(gpus: &'a mut Vec<GpuFindings>, used: &mut usize) -> &'a mut GpuFindings {
    if *used == gpus.len() {
        gpus.push(GpuFindings::default());
    }
    *used += 1;
    &mut gpus[*used - 1]
}

/// Distinct hardware XIDs of the last day, ascending, into `out`.
fn recent_distinct(recent: &VecDeque<(i64, u32)>, now: i64, out: &mut Vec<u32>) {
    out.clear();
    out.extend(
        recent
            .iter()
            .filter(|(at, _)| now - at < window::DAY)
            .map(|&(_, xid)| xid),
    );
    out.sort_unstable();
    out.dedup();
}

#[cfg(test)]
mod tests;
