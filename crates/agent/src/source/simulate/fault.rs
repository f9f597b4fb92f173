//! Hardware fault families and how they unfold over simulated time.
//!
//! Each family progresses from 0 to 1 (its failure point, `horizon` seconds in) and beyond.
//! Its precursors take at most the family's precursor span ([`FaultKind::precursor_days`]):
//! a GPU that fails in three weeks looks healthy for the first two and then degrades the
//! way one that fails within days does. The shapes follow what operators and field studies
//! report (sources in docs/detection.md):
//!
//! - memory wear: accelerating corrected ECC and row remaps long before an uncorrected error
//!   (XID 48/63/94), then a failed remap (XID 64) — HBM faults are the largest GPU failure
//!   class in Meta's Llama 3 report;
//! - PCIe link: replay bursts growing, the link training down;
//! - thermal: memory running ever hotter than the GPU (a failing TIM or cold plate), then
//!   thermal slowdown;
//! - fell off the bus: no numeric warning at all, then XID 79 and the GPU is gone;
//! - NVLink: CRC and replay counters of one link climbing, recoveries, then XID 74
//!   (NCSA Delta: NVLink errors are often retried away before one is fatal);
//! - GSP firmware: NVML calls through the GPU System Processor slowing and failing, then
//!   XID 119/120 and a GPU that needs a reset (Delta: the GSP is the most error-prone part);
//! - power delivery: hardware power-brake slowdowns growing more frequent and the draw
//!   swinging (gpud: "constant hardware slowdowns are often a failing PSU"), then the GPU
//!   drops off the bus (XID 79);
//! - row remapping with little ECC, and page retirement on pre-Ampere GPUs: see
//!   [`super::fault_memory`].
//!
//! A fault built with [`Fault::new`] unfolds in its family's one fixed shape (the built-in
//! fleet and the detection tests rely on it, draw for draw); one built with
//! [`Fault::shaped`] follows a drawn [`Shape`] instead: curve, rate, growth and span.

use rand::Rng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Poisson};

use super::noise::{Counter, Counts};
use super::shape::Shape;
use crate::model::NvLinkErrors;

/// A hardware fault family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    MemoryWear,
    PcieLink,
    Thermal,
    FellOffBus,
    NvLink,
    GspFirmware,
    PowerDelivery,
    /// Rows remapped one after another with hardly any corrected ECC, a remap pending, then
    /// a remap that fails (Ampere and later).
    RowRemap,
    /// Pages retired for single- then double-bit errors, a retirement pending, then a
    /// double-bit error (pre-Ampere GPUs, which retire pages instead of remapping rows).
    PageRetirement,
}

const DAY: f64 = 86_400.0;

/// The step a fault advances over: `dt` seconds ending at `t`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub t: f64,
    pub(crate) dt: f64,
}

impl Step {
    pub fn hours(self) -> f64 {
        self.dt / 3600.0
    }
}

/// What a shaped fault's counted precursor counts at its onset, per hour, before the drawn
/// shape's rate multiplies it (the intensity then grows by the shape's growth to the
/// failure point). The scenario library draws the rate at the failure point and divides
/// by these to get the shape's rate.
#[derive(Debug, Clone, Copy)]
pub struct ShapedBase {
    /// Corrected ECC errors of memory wear.
    pub(crate) memory_corrected: f64,
    /// Corrected ECC errors of page retirement (a page retired for every 20).
    pub(crate) page_corrected: f64,
    /// Rows remapped by row remapping.
    pub(crate) rows_remapped: f64,
    /// PCIe replays (a tenth of it for a link that trains down).
    pub(crate) pcie_replays: f64,
    /// CRC errors of the degrading NVLink.
    pub(crate) nvlink_errors: f64,
}

pub const SHAPED_BASE: ShapedBase = ShapedBase {
    memory_corrected: 2.0,
    page_corrected: 0.5,
    rows_remapped: 0.1,
    pcie_replays: 100.0,
    nvlink_errors: 4.0,
};

impl FaultKind {
    /// Every family, in the order `[simulation] faults` lists them.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::MemoryWear,
        FaultKind::PcieLink,
        FaultKind::Thermal,
        FaultKind::FellOffBus,
        FaultKind::NvLink,
        FaultKind::GspFirmware,
        FaultKind::PowerDelivery,
    ];

    /// Every family the scenario library draws: [`FaultKind::ALL`] and the memory-repair
    /// families, which the built-in fleet does not use.
    pub const EVERY: [FaultKind; 9] = [
        FaultKind::MemoryWear,
        FaultKind::PcieLink,
        FaultKind::Thermal,
        FaultKind::FellOffBus,
        FaultKind::NvLink,
        FaultKind::GspFirmware,
        FaultKind::PowerDelivery,
        FaultKind::RowRemap,
        FaultKind::PageRetirement,
    ];

    /// Where in a fault's progress (0 to 1 at the failure point) its first sign shows.
    pub(crate) fn signal_onset(self) -> f64 {
        match self {
            FaultKind::MemoryWear
            | FaultKind::Thermal
            | FaultKind::RowRemap
            | FaultKind::PageRetirement => 0.1,
            FaultKind::PcieLink | FaultKind::NvLink => 0.2,
            FaultKind::GspFirmware => 0.25,
            FaultKind::PowerDelivery => 0.3,
            FaultKind::FellOffBus => 1.0,
        }
    }

    /// Longest time, in days, from the first sign of the fault to its failure point: a
    /// failure further out than this stays invisible until the span before it. Memory and
    /// cooling degrade over weeks in field reports, links and firmware over days.
    pub fn precursor_days(self) -> f64 {
        match self {
            FaultKind::MemoryWear
            | FaultKind::Thermal
            | FaultKind::RowRemap
            | FaultKind::PageRetirement => 10.0,
            FaultKind::PcieLink => 7.0,
            FaultKind::NvLink => 5.0,
            FaultKind::GspFirmware | FaultKind::PowerDelivery => 4.0,
            FaultKind::FellOffBus => 1.0,
        }
    }

    /// Whether anything measurable precedes the failure.
    pub fn has_precursors(self) -> bool {
        self != FaultKind::FellOffBus
    }
}

/// The counters and link state a fault acts on; owned by the simulated GPU.
#[derive(Debug, Clone, Default)]
pub struct Wear {
    pub corrected: u64,
    pub uncorrected: u64,
    pub(crate) remap_correctable: u64,
    pub(crate) remap_uncorrectable: u64,
    pub remap_pending: bool,
    pub remap_failure: bool,
    pub(crate) pcie_replays: u64,
    pub(crate) link_gen: u32,
    pub link_width: u32,
    pub lost: bool,
    /// Error counters of NVLinks that saw errors, one entry per link (absent links: zero).
    pub nvlink: Vec<NvLinkErrors>,
    /// Seconds the last collection of this GPU took; 0 where the simulation does not model it
    /// (the default fleet), so its snapshots stay as they were.
    pub collect_seconds: f64,
    /// NVML calls that failed in the last collection.
    pub failed_calls: u32,
    /// The baseboard asserts the external power brake (HW power-brake slowdown).
    pub(crate) power_brake: bool,
    /// Watts the power reading swings off what the load explains.
    pub(crate) power_swing: f64,
    /// NVLinks the GPU has; 0 where the simulation leaves it at the built-in 18.
    pub(crate) nvlinks: u32,
    /// Counts at the last reset of the volatile counters (driver reload, GPU reset): the
    /// volatile ECC counters, the replay counter and the NVLink error counters read the
    /// growth since.
    pub(crate) volatile_base: VolatileBase,
    /// How the error counts arrive around their rates (see [`super::noise`]).
    pub noise: Counts,
}

/// See [`Wear::volatile_base`].
#[derive(Debug, Clone, Default)]
pub(crate) struct VolatileBase {
    pub corrected: u64,
    pub uncorrected: u64,
    pub(crate) pcie_replays: u64,
    /// Each NVLink's counters at the reset (links without errors then: absent).
    pub nvlink: Vec<NvLinkErrors>,
}

impl VolatileBase {
    /// The volatile counters' readings now: everything since the last reset.
    pub fn of(wear: &Wear) -> VolatileBase {
        VolatileBase {
            corrected: wear.corrected,
            uncorrected: wear.uncorrected,
            pcie_replays: wear.pcie_replays,
            nvlink: wear.nvlink.clone(),
        }
    }

    /// NVLink `now`'s counters since the reset.
    pub(crate) fn nvlink_since(&self, now: &NvLinkErrors) -> NvLinkErrors {
        let Some(base) = self.nvlink.iter().find(|l| l.link == now.link) else {
            return *now;
        };
        NvLinkErrors {
            link: now.link,
            crc_flit: now.crc_flit.saturating_sub(base.crc_flit),
            crc_data: now.crc_data.saturating_sub(base.crc_data),
            replay: now.replay.saturating_sub(base.replay),
            recovery: now.recovery.saturating_sub(base.recovery),
        }
    }
}

impl Wear {
    /// The counters of NVLink `link`, created at zero on first use.
    pub(crate) fn nvlink_mut(&mut self, link: u32) -> &mut NvLinkErrors {
        let i = match self.nvlink.iter().position(|l| l.link == link) {
            Some(i) => i,
            None => {
                self.nvlink.push(NvLinkErrors {
                    link,
                    ..NvLinkErrors::default()
                });
                self.nvlink.len() - 1
            }
        };
        &mut self.nvlink[i]
    }
}

/// One fault on one GPU.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    /// Simulated seconds from start to the failure point.
    pub horizon: f64,
    /// One-time milestones already passed (bit per milestone), so each XID fires once.
    passed: u32,
    /// Corrected errors not yet turned into a row remap.
    pub(super) remap_budget: u64,
    /// Progress at the end of the last step.
    progress: f64,
    /// The failure point was passed and not yet reported.
    failure_due: bool,
    /// The NVLink that degrades, chosen at onset.
    link: Option<u32>,
    /// The drawn precursor shape; None: the family's one fixed shape.
    pub shape: Option<Shape>,
    /// How a shaped PCIe fault shows (ignored by the other families).
    pub(crate) link_mode: LinkMode,
}

/// How a degrading PCIe link shows before it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkMode {
    /// Replays accelerate; the link holds its width and generation, then drops (XID 79).
    Replays,
    /// The link trains down (x16 → x8, then two generations lower) with few replays.
    TrainDown,
    /// Both.
    #[default]
    Both,
}

impl Fault {
    pub fn new(kind: FaultKind, horizon: f64) -> Fault {
        Fault {
            kind,
            horizon,
            passed: 0,
            remap_budget: 0,
            progress: 0.0,
            failure_due: false,
            link: None,
            shape: None,
            link_mode: LinkMode::Both,
        }
    }

    /// A fault whose precursors follow `shape` rather than the family's fixed one.
    pub fn shaped(kind: FaultKind, horizon: f64, shape: Shape, link_mode: LinkMode) -> Fault {
        Fault {
            shape: Some(shape),
            link_mode,
            ..Fault::new(kind, horizon)
        }
    }

    /// Position between the first sign (0) and the failure point (1) at progress `p`.
    pub(super) fn since_onset(&self, p: f64) -> f64 {
        let onset = self.kind.signal_onset();
        if onset >= 1.0 {
            return p - 1.0;
        }
        (p - onset) / (1.0 - onset)
    }

    /// The family's intensity at progress `p`: `fixed` (the built-in shape) without a
    /// drawn shape, else `base` times the drawn shape's intensity.
    pub(super) fn intensity(&self, p: f64, base: f64, fixed: impl FnOnce() -> f64) -> f64 {
        match &self.shape {
            None => fixed(),
            Some(shape) => base * shape.intensity(self.since_onset(p)),
        }
    }

    /// How far a level-type precursor has moved (0 to about 1): `fixed` without a drawn
    /// shape.
    fn level(&self, p: f64, fixed: impl FnOnce() -> f64) -> f64 {
        match &self.shape {
            None => fixed(),
            Some(shape) => shape.rate.clamp(0.3, 1.5) * shape.level(self.since_onset(p)),
        }
    }

    /// Progress toward the failure point: 0 where the precursors may begin, 1 at failure;
    /// negative before the precursor span of a far-off failure.
    pub fn progress(&self, t: f64) -> f64 {
        if let Some(shape) = &self.shape {
            // The first sign comes at the family's onset; the span is measured from there.
            let onset = self.kind.signal_onset().min(0.9);
            let span = shape.precursor_days.max(0.01) * DAY / (1.0 - onset);
            return 1.0 - (self.horizon - t) / span;
        }
        let span = self.kind.precursor_days() * DAY;
        if self.horizon <= span {
            // Kept as a plain ratio (not rewritten as the general form below) so that short
            // horizons, the default fleet's included, draw bit-for-bit what they always drew.
            t / self.horizon
        } else {
            1.0 - (self.horizon - t) / span
        }
    }

    /// Extra degrees the memory runs above its normal gap to the GPU.
    pub(crate) fn memory_gap(&self, t: f64) -> f64 {
        match self.kind {
            FaultKind::Thermal => {
                let p = self.progress(t);
                26.0 * self.level(p, || smoothstep((p - 0.1) / 0.8))
            }
            _ => 0.0,
        }
    }

    /// Extra degrees of inlet temperature (a failing fan, a blocked heatsink).
    pub(crate) fn ambient(&self, t: f64) -> f64 {
        match self.kind {
            FaultKind::Thermal => {
                let p = self.progress(t);
                12.0 * self.level(p, || p.clamp(0.0, 1.2))
            }
            _ => 0.0,
        }
    }

    /// Advances the fault over `dt` seconds ending at `t`; returns the XIDs it raised.
    pub fn step(&mut self, t: f64, dt: f64, wear: &mut Wear, rng: &mut SmallRng) -> Vec<u32> {
        let p = self.progress(t);
        if self.progress < 1.0 && p >= 1.0 {
            self.failure_due = true;
        }
        self.progress = p;
        let hours = dt / 3600.0;
        let at = Step { t, dt };
        let mut xids = Vec::new();
        match self.kind {
            FaultKind::MemoryWear => self.memory_wear(p, at, wear, rng, &mut xids),
            FaultKind::RowRemap => self.row_remap(p, at, wear, rng, &mut xids),
            FaultKind::PageRetirement => self.page_retirement(p, at, wear, rng, &mut xids),
            FaultKind::PcieLink => self.pcie(p, at, wear, rng, &mut xids),
            FaultKind::Thermal => {}
            FaultKind::FellOffBus => {
                if self.first(0, p >= 1.0) {
                    wear.lost = true;
                    xids.push(79);
                }
            }
            FaultKind::NvLink => self.nvlink(p, at, wear, rng, &mut xids),
            FaultKind::GspFirmware => self.gsp(p, hours, wear, rng, &mut xids),
            FaultKind::PowerDelivery => self.power(p, wear, rng, &mut xids),
        }
        xids
    }

    /// Replay bursts growing from 0.5/h; the link trains down to x8, then to Gen3 at the
    /// failure point. A shaped fault counts replays ([`SHAPED_BASE`]: 100/h at onset, 10/h
    /// for a link that trains down), drawn by the GPU's noise model, and shows its
    /// [`LinkMode`]: replays, a train-down (x16 to x8, then two generations lower) or both,
    /// and the link then drops (XID 79).
    fn pcie(&mut self, p: f64, at: Step, wear: &mut Wear, rng: &mut SmallRng, xids: &mut Vec<u32>) {
        let mode = self.link_mode;
        if p >= 0.2 {
            if let Some(shape) = &self.shape {
                let base = SHAPED_BASE.pcie_replays
                    * if mode == LinkMode::TrainDown {
                        0.1
                    } else {
                        1.0
                    };
                let per_hour = base * shape.intensity(self.since_onset(p));
                let n = wear.noise.draw(
                    Counter::PcieReplays,
                    per_hour * at.hours(),
                    at.t,
                    at.dt,
                    rng,
                );
                wear.pcie_replays += n;
            } else {
                let bursts_per_hour = 0.5 + 8.0 * (p.min(1.5) - 0.2);
                for _ in 0..poisson(bursts_per_hour * at.hours(), rng) {
                    wear.pcie_replays += rng.random_range(20..400);
                }
            }
        }
        if self.shape.is_none() {
            if self.first(0, p >= 0.8) {
                wear.link_width = 8;
            }
            if self.first(1, p >= 1.0) {
                wear.link_gen = 3;
            }
            return;
        }
        if mode != LinkMode::Replays {
            if self.first(0, p >= 0.45) {
                wear.link_width = (wear.link_width / 2).max(1);
            }
            if self.first(1, p >= 0.8) {
                wear.link_gen = wear.link_gen.saturating_sub(2).max(1);
            }
        }
        if self.first(2, p >= 1.0) {
            wear.lost = true;
            xids.push(79);
        }
    }

    /// One link's CRC errors grow ~e^5 over the precursor span (each one replayed), the
    /// link starts recovering (retraining) late, then an uncorrectable error: XID 74.
    fn nvlink(
        &mut self,
        p: f64,
        at: Step,
        wear: &mut Wear,
        rng: &mut SmallRng,
        xids: &mut Vec<u32>,
    ) {
        if p < 0.2 {
            return;
        }
        if self.link.is_none() {
            let links = if wear.nvlinks == 0 { 18 } else { wear.nvlinks };
            self.link = Some(rng.random_range(0..links));
        }
        let hours = at.hours();
        let per_hour = self.intensity(p, SHAPED_BASE.nvlink_errors, || {
            4.0 * (5.0 * (p.min(1.5) - 0.2)).exp()
        });
        let flits = wear
            .noise
            .draw(Counter::NvLinkErrors, per_hour * hours, at.t, at.dt, rng);
        let recoveries = if p >= 0.6 {
            let mean = 0.3 * (3.0 * (p.min(1.5) - 0.6)).exp() * hours;
            wear.noise
                .draw(Counter::NvLinkRecoveries, mean, at.t, at.dt, rng)
        } else {
            0
        };
        let link = wear.nvlink_mut(self.link.unwrap_or(0));
        link.crc_flit += flits;
        link.crc_data += flits / 8;
        link.replay += flits;
        link.recovery += recoveries;
        if self.first(0, p >= 1.0) {
            xids.push(74);
        }
    }

    /// Calls through the GSP slow down (some collections take seconds), then start failing,
    /// then GSP RPC timeouts (XID 119) and the GSP error that needs a reset (XID 120): the
    /// GPU stops answering.
    fn gsp(
        &mut self,
        p: f64,
        hours: f64,
        wear: &mut Wear,
        rng: &mut SmallRng,
        xids: &mut Vec<u32>,
    ) {
        // A healthy collection takes milliseconds; keep the GPU's own noise when it has some.
        if wear.collect_seconds <= 0.0 {
            wear.collect_seconds = rng.random_range(0.002..0.006);
        }
        wear.failed_calls = 0;
        let slow = self.intensity(p, 0.05, || 0.05 + 0.9 * (p - 0.25));
        if p >= 0.25 && rng.random_bool(slow.clamp(0.0, 0.7)) {
            wear.collect_seconds += rng.random_range(0.3..3.0);
        }
        let failing = self.intensity(p, 0.02, || 0.6 * (p - 0.4));
        if p >= 0.4 && rng.random_bool(failing.clamp(0.0, 0.5)) {
            wear.failed_calls = rng.random_range(1..4);
        }
        if (0.85..1.0).contains(&p) && poisson(0.3 * hours, rng) > 0 {
            xids.push(119);
        }
        if self.first(0, p >= 1.0) {
            xids.extend([119, 120]);
            wear.lost = true;
        }
    }

    /// Power-brake episodes take a growing share of the time and the draw swings more and
    /// more, then the supply gives out and the GPU drops off the bus.
    fn power(&mut self, p: f64, wear: &mut Wear, rng: &mut SmallRng, xids: &mut Vec<u32>) {
        wear.power_brake = false;
        wear.power_swing = 0.0;
        if (0.3..1.0).contains(&p) {
            let brake = self.intensity(p, 0.03, || 0.03 + 0.4 * (p - 0.3));
            wear.power_brake = rng.random_bool(brake.clamp(0.0, 0.5));
            let swing = self
                .intensity(p, 40.0, || 40.0 + 200.0 * (p - 0.3))
                .clamp(0.0, 400.0);
            if swing > 0.0 {
                wear.power_swing = rng.random_range(-swing..swing);
            }
        }
        if self.first(0, p >= 1.0) {
            wear.lost = true;
            xids.push(79);
        }
    }

    /// The kind, once, after the failure point is passed.
    pub(crate) fn take_failure(&mut self) -> Option<FaultKind> {
        std::mem::take(&mut self.failure_due).then_some(self.kind)
    }

    /// True exactly once: the first time `condition` holds for milestone `bit`.
    pub(super) fn first(&mut self, bit: u32, condition: bool) -> bool {
        let mask = 1 << bit;
        if condition && self.passed & mask == 0 {
            self.passed |= mask;
            true
        } else {
            false
        }
    }
}

/// A Poisson draw that tolerates a zero or negligible mean.
pub fn poisson(mean: f64, rng: &mut SmallRng) -> u64 {
    if mean < 1e-12 {
        return 0;
    }
    match Poisson::new(mean) {
        Ok(dist) => dist.sample(rng) as u64,
        Err(_) => 0,
    }
}

fn smoothstep(x: f64) -> f64 {
    let x = x.clamp(0.0, 1.0);
    x * x * (3.0 - 2.0 * x)
}

#[cfg(test)]
mod tests;
