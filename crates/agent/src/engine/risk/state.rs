//! What the risk features remember about one GPU between samples: running state updated
//! in O(1) per sample, so no feature scans history when it is read.
//!
//! - [`RollingDays`]: corrected ECC errors, PCIe replays, and loaded and thermal-slowdown
//!   seconds per rolling day over the last week, from the week window's 2-hour buckets,
//!   re-added only when a bucket closes;
//! - [`Growth`]: rows remapped and pages retired recently, as counts that decay;
//! - [`Baseline`]: the GPU's own normal level of a reading, learnt during a warm-up and then
//!   allowed to drift only slowly, so a fault that builds over days stands out against it
//!   instead of becoming the new normal;
//! - the memory–GPU temperature gap and the GPU temperature against their baselines at
//!   similar utilization ([`BandedBaseline`]), power
//!   spread that utilization does not explain against its own baseline, and the shares of
//!   time in generic hardware slowdown and with a trained-down PCIe link under load.
//!
//! The state is persisted with the engine's (`--save-state`); state saved before it
//! existed starts empty and the features warm up again.

use serde::{Deserialize, Serialize};

use super::cadence::Cadence;
use super::features::SLOW_COLLECTION_SECONDS;
use super::hold::Hold;
use super::power::PowerResidual;
use super::rate::{RateTest, floor};
use crate::engine::window::{DAY, HOUR, Point, Windows};
use crate::model::{ClockEvents, GpuSample};

/// Rolling days remembered: the week window's span.
pub const DAYS: usize = 7;
/// Counts kept per rolling day: corrected ECC errors, PCIe replays.
const COUNTS: usize = 2;
pub(crate) const CORRECTED: usize = 0;
pub(crate) const REPLAYS: usize = 1;

/// Observed time a baseline needs before it is trusted.
const WARM_UP_SECONDS: f64 = 12.0 * 3600.0;

/// How fast a remap or page retirement stops counting as recent (e-fold time).
const GROWTH_SECONDS: f64 = 3.0 * DAY as f64;

/// Utilization at and above which a GPU is under load for the PCIe link check: below it a
/// link may legitimately drop width or generation to save power.
const LOADED_UTILIZATION: f64 = 0.5;

/// Everything the risk features keep per GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RiskState {
    pub days: RollingDays,
    /// Rows remapped (an uncorrectable-error remap counts twice).
    pub remaps: Growth,
    /// Pages retired (pre-Ampere; a double-bit retirement counts twice).
    pub retired: Growth,
    /// Memory minus GPU temperature against the GPU's own at similar utilization.
    pub gap: BandedBaseline,
    /// GPU temperature against the GPU's own at similar power; absent from state
    /// saved before it existed.
    pub temperature: BandedBaseline,
    /// Power against utilization: its residual spread and unstable hours.
    pub power: PowerResidual,
    /// Every error counter read as a rate against the GPU's own baseline.
    pub rates: CounterRates,
    /// Share of recent time in hardware slowdown that neither the power brake nor a
    /// thermal reason explains (e-fold 6 h).
    pub hw_slowdown: f64,
    /// Share of recent loaded time with the PCIe link below its maximum width or
    /// generation (e-fold 2 h of loaded time).
    pub(crate) link_degraded: f64,
    /// The widest link and highest generation seen under load: the maximum where the
    /// source does not report one (a Prometheus store, a CSV log without the max columns).
    pub(crate) link_best: [Option<u32>; 2],
    /// The score's held evidence.
    pub hold: Hold,
    /// The last assessment, repeated within its minute (not saved).
    #[serde(skip)]
    pub cadence: Cadence,
}

impl RiskState {
    /// Folds one sample in; `windows` already holds it.
    pub fn observe(&mut self, p: &Point, sample: &GpuSample, windows: &Windows) {
        self.days.observe(p, windows);
        self.rates.observe(p);
        if !sample.up {
            return;
        }
        let remaps = sample.remapped_rows.map(|r| {
            r.correctable
                .saturating_add(r.uncorrectable.saturating_mul(2))
        });
        self.remaps.update(remaps, p.at);
        let retired = sample
            .retired_pages
            .map(|r| r.sbe.saturating_add(r.dbe.saturating_mul(2)));
        self.retired.update(retired, p.at);
        self.power.observe(p, sample.power_limit_watts);
        // Baselines move at most 1 °C a day: a cooling fault that builds over a week stays
        // visible.
        if let (Some(util), Some(gpu), Some(memory)) =
            (p.utilization, p.temperature, p.memory_temperature)
        {
            self.gap
                .observe(util, UTILIZATION_BANDS, memory - gpu, p.seconds, 1.0, true);
        }
        // The die's temperature at a given power is the cooling's thermal resistance: the
        // same whatever job draws it, so it is compared at similar power, not utilization.
        let scale = sample
            .power_limit_watts
            .filter(|l| *l > 0.0)
            .unwrap_or(self.power.peak());
        if let (Some(power), Some(gpu)) = (p.power, p.temperature)
            && scale > 0.0
        {
            self.temperature
                .observe(power / scale, POWER_BANDS, gpu, p.seconds, 1.0, false);
        }
        let events = sample.clock_events.unwrap_or_default();
        let generic = events.intersects(ClockEvents::HW_SLOWDOWN)
            && !events.intersects(ClockEvents::HW_POWER_BRAKE_SLOWDOWN)
            && !events.thermal();
        ewma(
            &mut self.hw_slowdown,
            flag(generic),
            p.seconds,
            6.0 * HOUR as f64,
        );
        let loaded = p.utilization.is_some_and(|u| u >= LOADED_UTILIZATION);
        if loaded {
            self.observe_link(sample, p.seconds);
        }
    }
}

impl RiskState {
    /// The link's width and generation under load against their maximum: the reported
    /// one, or the best this GPU has shown under load, whichever is higher.
    fn observe_link(&mut self, sample: &GpuSample, seconds: f64) {
        let pcie = &sample.pcie;
        let mut below = None;
        for (i, (now, max)) in [
            (pcie.link_width, pcie.link_width_max),
            (pcie.link_generation, pcie.link_generation_max),
        ]
        .into_iter()
        .enumerate()
        {
            let Some(now) = now else { continue };
            let best = self.link_best[i].map_or(now, |b| b.max(now));
            self.link_best[i] = Some(best);
            let max = max.map_or(best, |m| m.max(best));
            below = Some(below.unwrap_or(false) || now < max);
        }
        if let Some(below) = below {
            ewma(
                &mut self.link_degraded,
                flag(below),
                seconds,
                2.0 * HOUR as f64,
            );
        }
    }
}

/// The rate tests of a GPU's error counters ([`RateTest`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CounterRates {
    pub ecc_corrected: RateTest,
    pub(crate) pcie_replays: RateTest,
    pub(crate) nvlink_errors: RateTest,
    pub(crate) xid_hardware: RateTest,
    pub failed_calls: RateTest,
    /// Collections of [`SLOW_COLLECTION_SECONDS`] or more: a GSP going bad slows read
    /// after read, hour after hour, where a host's moment of load slows one.
    pub(crate) slow_collections: RateTest,
}

impl CounterRates {
    fn observe(&mut self, p: &Point) {
        let d = &p.deltas;
        let (hour, s) = (super::rate::hour_of(p.at), p.seconds);
        self.ecc_corrected
            .observe_in(hour, d.ecc_corrected, s, floor::ECC_CORRECTED);
        self.pcie_replays
            .observe_in(hour, d.pcie_replays, s, floor::PCIE_REPLAYS);
        self.nvlink_errors
            .observe_in(hour, d.nvlink_errors, s, floor::NVLINK_ERRORS);
        self.xid_hardware
            .observe_in(hour, d.xid_hardware, s, floor::XID_HARDWARE);
        self.failed_calls
            .observe_in(hour, d.failed_calls, s, floor::FAILED_CALLS);
        let slow = p
            .collect_seconds
            .is_some_and(|c| c >= SLOW_COLLECTION_SECONDS);
        self.slow_collections
            .observe_in(hour, flag(slow), s, floor::SLOW_COLLECTIONS);
    }
}

fn flag(on: bool) -> f64 {
    if on { 1.0 } else { 0.0 }
}

/// Moves `value` towards `x` as an exponentially weighted mean over time (e-fold `tau`).
fn ewma(value: &mut f64, x: f64, seconds: f64, tau: f64) {
    if seconds > 0.0 && x.is_finite() {
        *value += (x - *value) * weight(seconds, tau);
    }
}

/// `1.0 - (-seconds / tau).exp()`: the weight of `seconds` of news in a mean of e-fold
/// `tau`. A sample stands for the same seconds as the one before it, step after step, and
/// each GPU's sample is weighed at a few fixed `tau`s: the last weights worked out are
/// remembered on the thread (the same inputs, the same weight to the bit), which spares
/// most of the five or six `exp` calls of a sample.
pub(crate) fn weight(seconds: f64, tau: f64) -> f64 {
    use std::cell::RefCell;
    const REMEMBERED: usize = 6;
    /// Seconds, e-fold and weight of the last few worked out, and the slot to write next.
    type Remembered = ([(f64, f64, f64); REMEMBERED], usize);
    thread_local! {
        static LAST: RefCell<Remembered> =
            const { RefCell::new(([(f64::NAN, f64::NAN, 0.0); REMEMBERED], 0)) };
    }
    LAST.with_borrow_mut(|(slots, next)| {
        // An empty slot's NaN equals nothing; 0.0 and -0.0, which compare equal, give the
        // same weight.
        if let Some(&(_, _, w)) = slots.iter().find(|(s, t, _)| *s == seconds && *t == tau) {
            return w;
        }
        let w = 1.0 - (-seconds / tau).exp();
        slots[*next] = (seconds, tau, w);
        *next = (*next + 1) % REMEMBERED;
        w
    })
}

/// Counts per rolling day of the last week: day 0 is the week window's newest 2-hour
/// bucket and the eleven before it, day 1 the twelve before those, and so on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RollingDays {
    /// Start of the newest bucket when `closed` was added up.
    key: i64,
    /// Counts of the closed buckets of each day.
    closed: [[f64; COUNTS]; DAYS],
    /// Observed seconds of the closed buckets of each day.
    observed: [f64; DAYS],
    /// Counts of the newest bucket, kept up as samples arrive.
    live: [f64; COUNTS],
    /// Loaded and thermal-slowdown seconds of the closed buckets of each day, and of the
    /// newest bucket; absent from state saved before they existed.
    slowdown_closed: [Slowdown; DAYS],
    slowdown_live: Slowdown,
}

/// Seconds under load, and of those in thermal slowdown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Slowdown {
    pub loaded: f64,
    pub thermal: f64,
}

impl RollingDays {
    fn observe(&mut self, p: &Point, windows: &Windows) {
        let start = windows.week.bucket_start(p.at);
        if start > self.key {
            // A bucket opened: add up the closed ones again (84 at most, once per 2 hours).
            self.key = start;
            self.closed = [[0.0; COUNTS]; DAYS];
            self.observed = [0.0; DAYS];
            self.live = [0.0; COUNTS];
            self.slowdown_closed = [Slowdown::default(); DAYS];
            self.slowdown_live = Slowdown::default();
            for b in windows.week.buckets() {
                let counts = [b.deltas.ecc_corrected, b.deltas.pcie_replays];
                // A bucket's loaded seconds from its mean utilization; its thermal
                // seconds counted whatever the load (slowdown at idle is rare).
                let slowdown = Slowdown {
                    loaded: b.seconds * b.utilization.mean().unwrap_or(0.0).clamp(0.0, 1.0),
                    thermal: b.thermal_slowdown_seconds,
                };
                if b.start >= start {
                    self.live = counts;
                    self.slowdown_live = slowdown;
                    continue;
                }
                let day = (start.saturating_sub(b.start) / DAY) as usize;
                if day < DAYS {
                    for (sum, c) in self.closed[day].iter_mut().zip(counts) {
                        *sum += c;
                    }
                    self.observed[day] += b.seconds;
                    self.slowdown_closed[day].loaded += slowdown.loaded;
                    self.slowdown_closed[day].thermal += slowdown.thermal;
                }
            }
        } else {
            // The window folds a late sample into its newest bucket; so does this.
            self.live[CORRECTED] += p.deltas.ecc_corrected;
            self.live[REPLAYS] += p.deltas.pcie_replays;
            self.slowdown_live.loaded += p.seconds * p.utilization.unwrap_or(0.0).clamp(0.0, 1.0);
            if p.thermal_slowdown {
                self.slowdown_live.thermal += p.seconds;
            }
        }
    }

    /// Loaded and thermal-slowdown seconds of rolling day `day` (0: the last 24 hours).
    pub fn slowdown(&self, day: usize) -> Slowdown {
        let closed = self.slowdown_closed.get(day).copied().unwrap_or_default();
        if day == 0 {
            Slowdown {
                loaded: closed.loaded + self.slowdown_live.loaded,
                thermal: closed.thermal + self.slowdown_live.thermal,
            }
        } else {
            closed
        }
    }

    /// The count of `signal` on rolling day `day` (0: the last 24 hours).
    pub fn count(&self, signal: usize, day: usize) -> f64 {
        let closed = self.closed.get(day).map_or(0.0, |d| d[signal]);
        if day == 0 {
            closed + self.live[signal]
        } else {
            closed
        }
    }

    /// The days before the last one with at least half a day observed.
    pub fn observed_days(&self) -> impl Iterator<Item = usize> + '_ {
        (1..DAYS).filter(|&d| self.observed[d] >= DAY as f64 / 2.0)
    }
}

/// A cumulative count's recent growth, decaying with e-fold time [`GROWTH_SECONDS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Growth {
    last: Option<u64>,
    at: i64,
    /// Recent growth, decayed to `at`.
    recent: f64,
}

impl Growth {
    fn update(&mut self, total: Option<u64>, now: i64) {
        let Some(total) = total else { return };
        self.recent = self.at_time(now);
        self.at = self.at.max(now);
        // The first reading is a reference, not growth: rows remapped before the agent
        // started are history the operator has seen.
        if let Some(last) = self.last.filter(|last| total > *last) {
            self.recent += (total - last) as f64;
        }
        self.last = Some(total);
    }

    /// Recent growth as of `now`.
    pub(crate) fn at_time(&self, now: i64) -> f64 {
        // Nothing grown (most GPUs, every step) decays to itself: no exponential needed.
        if self.recent == 0.0 {
            return self.recent;
        }
        let elapsed = now.saturating_sub(self.at).max(0) as f64;
        self.recent * (-elapsed / GROWTH_SECONDS).exp()
    }
}

/// A GPU's own normal level of a reading: the mean during a warm-up of
/// [`WARM_UP_SECONDS`] observed, then a tracker that moves towards each reading by at
/// most `drift` per day. The cap keeps a fault building over days from becoming the
/// baseline; ordinary slow change (season, workload mix) is followed within days.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Baseline {
    value: f64,
    seconds: f64,
}

impl Baseline {
    pub(super) fn learn(&mut self, x: f64, seconds: f64, drift_per_day: f64) {
        if seconds <= 0.0 || !x.is_finite() {
            return;
        }
        // A damaged state file could hold anything: such a baseline is learnt afresh.
        if !(self.seconds >= 0.0 && self.value.is_finite()) {
            *self = Baseline::default();
        }
        if self.seconds < WARM_UP_SECONDS {
            self.seconds += seconds;
            self.value += (x - self.value) * seconds / self.seconds;
        } else {
            let step = drift_per_day * seconds / DAY as f64;
            self.value += (x - self.value).clamp(-step, step);
            self.seconds += seconds;
        }
    }

    /// The baseline, once warm.
    pub fn get(&self) -> Option<f64> {
        (self.seconds >= WARM_UP_SECONDS).then_some(self.value)
    }
}

/// E-fold, in days, of the lasting deviations ([`BandedBaseline::deviation_days`]).
const LASTING_DAYS: f64 = 3.0;

/// Utilization bands the memory–GPU gap is learnt in: HBM and die heat differently with
/// load, so the gap is compared only with the gap at similar load.
const UTILIZATION_BANDS: usize = 4;
/// Power bands (shares of the limit) the GPU temperature is learnt in: an eighth of a
/// 700 W limit moves an H100's die by about 8 °C, so a band's spread stays within the
/// feature's 4 °C allowance either side.
const POWER_BANDS: usize = 8;

/// A temperature reading (the memory–GPU gap, the GPU temperature) against the GPU's own
/// at a similar level (utilization for the gap, power for the temperature).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BandedBaseline {
    /// One baseline per band (a list, so state saved with another band count loads and
    /// is learnt afresh).
    bands: Vec<Baseline>,
    /// The reading minus its band's baseline, averaged over about an hour; None until a
    /// band is warm.
    pub(crate) deviation: Option<f64>,
    /// The same averaged over about a day: what persists rather than what passes.
    pub(crate) deviation_day: Option<f64>,
    /// The same averaged over about three days, where asked for: what keeps rising past
    /// the baseline's drift. A step of a few degrees (another job, a moved rack) is learnt
    /// by the baseline within days and stays low here; a cooling that degrades keeps
    /// ahead of it. Absent from state saved before it existed: it starts again.
    pub(crate) deviation_days: Option<f64>,
}

impl BandedBaseline {
    /// Folds in `reading` at `level` (0–1, of `bands` equal bands) over `seconds`; the
    /// baseline may drift by `drift_per_day` once warm; `lasting`: keep the three-day
    /// deviation too.
    fn observe(
        &mut self,
        level: f64,
        bands: usize,
        reading: f64,
        seconds: f64,
        drift_per_day: f64,
        lasting: bool,
    ) {
        if !level.is_finite() || !reading.is_finite() || bands == 0 {
            return;
        }
        if self.bands.len() != bands {
            *self = BandedBaseline {
                bands: vec![Baseline::default(); bands],
                deviation: None,
                deviation_day: None,
                deviation_days: None,
            };
        }
        let band = ((level.clamp(0.0, 1.0) * bands as f64) as usize).min(bands - 1);
        if let Some(base) = self.bands[band].get() {
            let deviation = reading - base;
            let mut smoothed = self.deviation.unwrap_or(deviation);
            ewma(&mut smoothed, deviation, seconds, HOUR as f64);
            self.deviation = Some(smoothed);
            let mut day = self.deviation_day.unwrap_or(deviation);
            ewma(&mut day, deviation, seconds, DAY as f64);
            self.deviation_day = Some(day);
            if lasting {
                let mut days = self.deviation_days.unwrap_or(deviation);
                ewma(&mut days, deviation, seconds, LASTING_DAYS * DAY as f64);
                self.deviation_days = Some(days);
            }
        }
        self.bands[band].learn(reading, seconds, drift_per_day);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_warms_up_then_drifts_slowly() {
        let mut b = Baseline::default();
        for _ in 0..11 {
            b.learn(-8.0, 3600.0, 1.0);
        }
        assert_eq!(b.get(), None, "not warm after 11 hours");
        b.learn(-8.0, 3600.0, 1.0);
        assert_eq!(b.get(), Some(-8.0));
        // A day at +17 moves it by one degree, not 25.
        for _ in 0..24 {
            b.learn(17.0, 3600.0, 1.0);
        }
        let moved = b.get().unwrap_or_default();
        assert!((moved - -7.0).abs() < 1e-9, "{moved}");
    }

    #[test]
    fn a_damaged_baseline_is_learnt_afresh() {
        let mut b = Baseline {
            value: 3.0,
            seconds: -3600.0,
        };
        b.learn(5.0, 3600.0, 1.0);
        assert_eq!((b.value, b.seconds), (5.0, 3600.0));
    }

    #[test]
    fn a_banded_baseline_compares_a_reading_with_its_own_at_the_same_level() {
        let mut b = BandedBaseline::default();
        // Half a day at 300 W of 700 (band 3) at 60 °C and at 600 W (band 6) at 75 °C.
        for _ in 0..12 {
            b.observe(300.0 / 700.0, POWER_BANDS, 60.0, 3600.0, 1.0, false);
            b.observe(600.0 / 700.0, POWER_BANDS, 75.0, 3600.0, 1.0, false);
        }
        assert_eq!(b.deviation, None, "the last hour warmed them up");
        b.observe(600.0 / 700.0, POWER_BANDS, 75.0, 3600.0, 1.0, false);
        assert_eq!(b.deviation, Some(0.0), "hot at high power is its normal");
        // 12 °C more at the low power, for hours: the deviation follows within the hour.
        for _ in 0..6 {
            b.observe(300.0 / 700.0, POWER_BANDS, 72.0, 3600.0, 1.0, false);
        }
        let deviation = b.deviation.unwrap_or_default();
        assert!(deviation > 10.0 && deviation <= 12.0, "{deviation}");
        // State saved with another band count is learnt afresh, not misread.
        b.observe(0.5, UTILIZATION_BANDS, 5.0, 3600.0, 1.0, false);
        assert_eq!((b.bands.len(), b.deviation), (UTILIZATION_BANDS, None));
    }

    #[test]
    fn growth_counts_increases_only_and_decays() {
        let mut g = Growth::default();
        g.update(Some(5), 0);
        assert_eq!(g.at_time(0), 0.0, "the first reading is a reference");
        g.update(Some(7), 100);
        assert_eq!(g.at_time(100), 2.0);
        g.update(Some(3), 200);
        assert!(g.at_time(200) < 2.0 && g.at_time(200) > 1.9);
        let later = g.at_time(200 + 3 * DAY);
        assert!((later - g.at_time(200) / std::f64::consts::E).abs() < 1e-9);
    }

    #[test]
    fn weights_remembered_are_those_worked_out() {
        // More pairs than are remembered, interleaved and repeated, each checked to the bit.
        let taus = [HOUR as f64, DAY as f64, 7200.0, 21_600.0, 1.0, 3.0, 1e9];
        for round in 0..3 {
            for (i, tau) in taus.iter().enumerate() {
                for seconds in [
                    5.0,
                    60.0,
                    0.25 + i as f64,
                    1e-300,
                    86_400.0 * f64::from(round),
                ] {
                    let fresh = 1.0 - (-seconds / tau).exp();
                    assert_eq!(weight(seconds, *tau).to_bits(), fresh.to_bits());
                }
            }
        }
    }
}
