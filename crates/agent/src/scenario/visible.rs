//! Whether a failing GPU of the library shows anything to warn on a day before it fails.
//!
//! The library draws precursor spans from one day and end rates from a few events a day
//! (docs/detection.md, "The scenario library"), so some failures show nothing 24 hours
//! ahead: a one-day span starts its signs at that moment, and memory wear ending at three
//! corrected errors a day has counted one or two errors by then, as a healthy GPU does now
//! and then. No reading of the data can warn those a day ahead without warning healthy GPUs
//! as often, so the library's recall a day ahead is judged on the failures that do show
//! something by then, and the others are reported beside it (warning one of them a day
//! ahead would be luck). What counts is the precursor's *expected* signal from the drawn
//! shape — never what a model made of it, nor the noise's draw — by the moment a day
//! before the failure:
//!
//! - a milestone no healthy GPU of the library reaches: a remap pending (memory wear, row
//!   remapping), an uncorrectable error contained by a remap (row remapping), a page retired
//!   for a double-bit error (page retirement), a link trained down (PCIe);
//! - more events of the counted precursor expected since its first sign than the largest
//!   burst a healthy GPU of the library shows of that counter ([`LARGEST_HEALTHY_BURST`]):
//!   however few the hours they fall in, no healthy burst looks like that;
//! - at least [`HOURS`] hours expected since its first sign in which the precursor shows:
//!   an event of the counted precursor (corrected ECC, rows remapped, PCIe replays, NVLink
//!   CRC errors), or a collection that came slow or failed (GSP) or was power-braked, or a
//!   power swing at least the family's base ±40 W (power), at the node's interval. Hours, not events: the engine reads counts by the clock
//!   hour they fall in, capped (a burst is one bad hour), and a healthy GPU of the library
//!   shows a burst hour of each counter every week or so;
//! - a temperature precursor moved by at least [`DEGREES`]: the HBM-to-die gap on a model
//!   with an HBM sensor, the inlet (which the die follows) on one without. The operators'
//!   anchors call a 6 °C change of the gap ordinary.
//!
//! A healthy GPU of the library shows an isolated corrected error about every ten days and
//! a burst of PCIe replays or NVLink errors every seven to ten, so five hours stand clear of
//! it over any span the library draws.

use crate::source::simulate::{FaultKind, GpuSpec, LinkMode, SHAPED_BASE, Shape};

use super::NodeScenario;

/// Expected hours showing the precursor, by a day before the failure, that count as
/// something to warn on. The engine's rate tests count a bad hour as at most 2.5 nats of
/// evidence (crates/agent/src/engine/risk/rate.rs); a scan of six windows at every hour of
/// 1,000 GPU-days meets chance evidence of ln(24,000 × 6) ≈ 11.9 nats about once, so an
/// ideal test needs about five such hours (12.5 nats) to warn within a budget of one false
/// warning per 1,000 GPU-days.
pub const HOURS: f64 = 5.0;
/// Degrees a temperature precursor must have moved by then.
pub const DEGREES: f64 = 6.0;

/// The largest burst of each counted precursor a healthy GPU of the library shows, events:
/// corrected ECC 400 in an hour (`ecc_burst`), PCIe replays 120 (a background burst), NVLink
/// errors 20 (a background burst). Rows remapped: none, so the bar is two, as a remap or
/// two that a day of noise could bring is no climb yet.
pub struct LargestHealthyBurst {
    pub corrected: f64,
    pub pcie_replays: f64,
    pub nvlink_errors: f64,
    pub rows_remapped: f64,
}

pub const LARGEST_HEALTHY_BURST: LargestHealthyBurst = LargestHealthyBurst {
    corrected: 400.0,
    pcie_replays: 120.0,
    nvlink_errors: 20.0,
    rows_remapped: 2.0,
};

const HOUR: f64 = 3_600.0;

impl NodeScenario {
    /// Whether GPU `index`, collected every `interval_s` seconds, fails after a precursor
    /// that shows something to warn on a day before the failure (false for a GPU that does
    /// not fail, or fails without precursors).
    pub fn shows_a_day_ahead(&self, index: usize, interval_s: f64) -> bool {
        self.gpus
            .get(index)
            .is_some_and(|gpu| gpu_shows_a_day_ahead(gpu, interval_s))
    }
}

fn gpu_shows_a_day_ahead(gpu: &GpuSpec, interval_s: f64) -> bool {
    let (Some(kind), Some(shape)) = (gpu.plan.fault, gpu.shape.as_ref()) else {
        return false;
    };
    if !kind.has_precursors() {
        return false;
    }
    let ahead = Ahead::new(kind, shape);
    // A span of a day or less has not begun a day ahead.
    if ahead.hours <= 0.0 {
        return false;
    }
    let collections_an_hour = HOUR / interval_s.max(1.0);
    let b = &LARGEST_HEALTHY_BURST;
    // Hours that show the precursor, or more events than any healthy burst.
    let counted = |base: f64, burst: f64| {
        ahead.hours_with_events(base) >= HOURS || ahead.events(base) > burst
    };
    match kind {
        FaultKind::MemoryWear => {
            ahead.progress >= 0.75 || counted(SHAPED_BASE.memory_corrected, b.corrected)
        }
        FaultKind::RowRemap => {
            ahead.progress >= 0.6 || counted(SHAPED_BASE.rows_remapped, b.rows_remapped)
        }
        FaultKind::PageRetirement => {
            ahead.progress >= 0.7 || counted(SHAPED_BASE.page_corrected, b.corrected)
        }
        FaultKind::PcieLink => {
            // Both modes train down; only a link that trains down without replaying
            // replays a tenth as often (the simulator's `pcie`).
            let trains_down = gpu.link_mode != LinkMode::Replays;
            let scale = if gpu.link_mode == LinkMode::TrainDown {
                0.1
            } else {
                1.0
            };
            (trains_down && ahead.progress >= 0.45)
                || counted(SHAPED_BASE.pcie_replays * scale, b.pcie_replays)
        }
        FaultKind::NvLink => counted(SHAPED_BASE.nvlink_errors, b.nvlink_errors),
        FaultKind::GspFirmware => {
            // Slow collections from the first sign, failing ones from 40% of the way (the
            // simulator's `gsp`), each a share of the collections.
            let clean = |i: f64, p: f64| {
                let slow = (0.05 * i).clamp(0.0, 0.7);
                let failed = if p >= 0.4 {
                    (0.02 * i).clamp(0.0, 0.5)
                } else {
                    0.0
                };
                (1.0 - slow) * (1.0 - failed)
            };
            ahead.hours_with_collections(collections_an_hour, clean) >= HOURS
        }
        FaultKind::PowerDelivery => {
            // Braked collections, or the draw swinging by the family's base ±40 W or more
            // (the simulator's `power`: 40 W times the intensity).
            let clean = |i: f64, _| {
                if i >= 1.0 {
                    0.0
                } else {
                    1.0 - (0.03 * i).clamp(0.0, 0.5)
                }
            };
            ahead.hours_with_collections(collections_an_hour, clean) >= HOURS
        }
        FaultKind::Thermal => {
            // The simulator's `memory_gap` and `ambient`: 26 and 12 degrees at the full
            // level, scaled by the drawn rate.
            let scale = shape.rate.clamp(0.3, 1.5);
            let moved = ahead.largest_level() * scale;
            let degrees = if gpu.sku.spec().memory_sensor_share > 0.0 {
                26.0 * moved
            } else {
                12.0 * moved
            };
            degrees >= DEGREES
        }
        FaultKind::FellOffBus => false,
    }
}

/// A precursor seen from a day before its failure.
struct Ahead<'a> {
    shape: &'a Shape,
    onset: f64,
    /// Hours from the first sign to a day before the failure (≤ 0: not begun then).
    hours: f64,
    /// The fault's progress then (0 where precursors may begin, 1 at the failure).
    progress: f64,
}

impl<'a> Ahead<'a> {
    fn new(kind: FaultKind, shape: &'a Shape) -> Ahead<'a> {
        let onset = kind.signal_onset().min(0.9);
        let days = shape.precursor_days.max(0.01);
        let x = 1.0 - 1.0 / days;
        Ahead {
            shape,
            onset,
            hours: (days - 1.0) * 24.0,
            progress: onset + x * (1.0 - onset),
        }
    }

    /// Each whole or part hour from the first sign to a day before the failure: its length
    /// in hours and its midpoint's position between first sign (0) and failure (1).
    fn hours(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        let span_hours = self.shape.precursor_days.max(0.01) * 24.0;
        let whole = self.hours.max(0.0).ceil() as usize;
        (0..whole).map(move |h| {
            let from = h as f64;
            let length = (self.hours - from).min(1.0);
            (length, (from + length / 2.0) / span_hours)
        })
    }

    /// Events expected of a counted precursor whose rate at the first sign is `base` an
    /// hour before the shape multiplies it.
    fn events(&self, base: f64) -> f64 {
        self.hours()
            .map(|(length, x)| length * base * self.shape.intensity(x))
            .sum()
    }

    /// Hours expected to hold at least one event of a counted precursor whose rate at the
    /// first sign is `base` an hour before the shape multiplies it (Poisson: an hour at
    /// rate λ holds one with probability 1 − e^−λ; a part hour counts its part).
    fn hours_with_events(&self, base: f64) -> f64 {
        self.hours()
            .map(|(length, x)| length * (1.0 - (-base * self.shape.intensity(x)).exp()))
            .sum()
    }

    /// Hours expected to hold at least one affected collection, at `per_hour` collections
    /// an hour, where `clean(intensity, progress)` is the chance that a collection is not
    /// affected at that intensity multiplier and progress.
    fn hours_with_collections(&self, per_hour: f64, clean: impl Fn(f64, f64) -> f64) -> f64 {
        self.hours()
            .map(|(length, x)| {
                let progress = self.onset + x * (1.0 - self.onset);
                let clean = clean(self.shape.intensity(x), progress).clamp(0.0, 1.0);
                length * (1.0 - clean.powf(per_hour))
            })
            .sum()
    }

    /// The largest level a level-type precursor reached by then (0 to about 1).
    fn largest_level(&self) -> f64 {
        self.hours()
            .map(|(_, x)| self.shape.level(x))
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests;
