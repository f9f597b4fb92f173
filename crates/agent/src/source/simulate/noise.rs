//! How error counts arrive: the noise model a scenario GPU's counters draw from.
//!
//! A precursor curve gives a counter's mean rate at each moment (corrected ECC, PCIe
//! replays, NVLink CRC errors and recoveries, rows remapped); the noise model turns that
//! mean into counts. Field counts are rarely a plain Poisson process, and a risk model
//! fitted on one noise model can learn it rather than the failure, so the scenario library
//! draws one of three per GPU, each with the same mean rate:
//!
//! - [`NoiseModel::Poisson`]: counts drawn Poisson from the rate;
//! - [`NoiseModel::Overdispersed`]: counts in trains of 2–6 (a compound Poisson with a mean
//!   train of 4), the rate itself scaled per three-hour block by a gamma draw of mean 1 and
//!   variance ½ (a negative binomial over the block): clustered hours and clustered days;
//! - [`NoiseModel::Diurnal`]: the rate scaled by the time of day, from ×0.3 at night to ×1.7
//!   at the GPU's peak (drawn between 12:00 and 18:00), the same mean over a day.
//!
//! The built-in fleet and the detection tests use Poisson, which draws exactly what
//! [`poisson`] draws from the same stream, so their readings stay what they were.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

use super::fault::poisson;

const DAY: f64 = 86_400.0;

/// How a GPU's error counts arrive around their mean rate.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum NoiseModel {
    /// Poisson from the rate.
    #[default]
    Poisson,
    /// Trains of 2–6 counts, the rate varying from one three-hour block to the next.
    Overdispersed,
    /// The rate following the time of day, ×0.3 to ×1.7.
    Diurnal,
}

impl NoiseModel {
    pub const ALL: [NoiseModel; 3] = [
        NoiseModel::Poisson,
        NoiseModel::Overdispersed,
        NoiseModel::Diurnal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NoiseModel::Poisson => "poisson",
            NoiseModel::Overdispersed => "overdispersed",
            NoiseModel::Diurnal => "diurnal",
        }
    }
}

/// The counters a noise model draws for; each has its own rate blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Corrected,
    PcieReplays,
    NvLinkErrors,
    NvLinkRecoveries,
    RowsRemapped,
}

const COUNTERS: usize = 5;

/// Shortest and longest train of the overdispersed model, and its mean.
const TRAIN: (u64, u64) = (2, 6);
const MEAN_TRAIN: f64 = 4.0;
/// Seconds of one block of the overdispersed model's rate, and the gamma shape of its
/// multiplier (variance 1 / shape).
const BLOCK_SECONDS: f64 = 3.0 * 3600.0;
const BLOCK_SHAPE: f64 = 2.0;
/// Above this many trains in one step, each is taken at the mean length (cost stays flat).
const MOST_TRAINS: u64 = 4096;
/// Amplitude of the diurnal model: ×(1 − A) at night to ×(1 + A) at the peak.
const DIURNAL_AMPLITUDE: f64 = 0.7;

/// A GPU's noise model with what it remembers: the current block of each counter's rate.
#[derive(Debug, Clone)]
pub struct Counts {
    model: NoiseModel,
    /// Seed of the blocks' multipliers (a stream of their own, so the GPU's draws stay
    /// in step whatever the blocks).
    seed: u64,
    /// Seconds after midnight of simulated time zero at which the diurnal rate peaks.
    peak: f64,
    /// Per counter: the block index and its multiplier.
    blocks: [(i64, f64); COUNTERS],
}

impl Default for Counts {
    fn default() -> Counts {
        Counts::new(NoiseModel::Poisson, 0)
    }
}

impl Counts {
    /// Noise model `model`, its peak hour and blocks drawn from `seed`.
    pub fn new(model: NoiseModel, seed: u64) -> Counts {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6E6F_6973_654D_0001);
        Counts {
            model,
            seed,
            peak: rng.random_range(12.0..18.0) * 3600.0,
            blocks: [(i64::MIN, 1.0); COUNTERS],
        }
    }

    pub fn model(&self) -> NoiseModel {
        self.model
    }

    /// Counts of `counter` in the step of `dt` seconds ending at `t`, where a steady
    /// Poisson process would expect `mean`.
    pub fn draw(
        &mut self,
        counter: Counter,
        mean: f64,
        t: f64,
        dt: f64,
        rng: &mut SmallRng,
    ) -> u64 {
        if !mean.is_finite() || mean <= 0.0 {
            return 0;
        }
        match self.model {
            NoiseModel::Poisson => poisson(mean, rng),
            NoiseModel::Diurnal => poisson(mean * self.diurnal(t, dt), rng),
            NoiseModel::Overdispersed => {
                let mean = mean * self.block(counter, t - 0.5 * dt.max(0.0));
                let trains = poisson(mean / MEAN_TRAIN, rng);
                if trains > MOST_TRAINS {
                    return trains * MEAN_TRAIN as u64;
                }
                (0..trains)
                    .map(|_| rng.random_range(TRAIN.0..=TRAIN.1))
                    .sum()
            }
        }
    }

    /// Events of `counter` in the step (each event itself a train of counts, as a replay
    /// burst is): Poisson around `mean` with the model's rate (its blocks or its time of
    /// day), never bunched further.
    pub fn events(
        &mut self,
        counter: Counter,
        mean: f64,
        t: f64,
        dt: f64,
        rng: &mut SmallRng,
    ) -> u64 {
        if !mean.is_finite() || mean <= 0.0 {
            return 0;
        }
        let scale = match self.model {
            NoiseModel::Poisson => 1.0,
            NoiseModel::Diurnal => self.diurnal(t, dt),
            NoiseModel::Overdispersed => self.block(counter, t - 0.5 * dt.max(0.0)),
        };
        poisson(mean * scale, rng)
    }

    /// The diurnal multiplier averaged over the step of `dt` seconds ending at `t`.
    pub(crate) fn diurnal(&self, t: f64, dt: f64) -> f64 {
        let omega = std::f64::consts::TAU / DAY;
        let phase = |s: f64| omega * (s - self.peak);
        if !(dt.is_finite() && t.is_finite()) || dt <= 1e-9 {
            return 1.0 + DIURNAL_AMPLITUDE * phase(t).cos();
        }
        let integral = dt + DIURNAL_AMPLITUDE / omega * (phase(t).sin() - phase(t - dt).sin());
        (integral / dt).max(0.0)
    }

    /// The overdispersed model's multiplier for `counter` at time `s`.
    fn block(&mut self, counter: Counter, s: f64) -> f64 {
        let index = if s.is_finite() {
            (s / BLOCK_SECONDS).floor() as i64
        } else {
            0
        };
        let slot = &mut self.blocks[counter as usize];
        if slot.0 != index {
            let seed = self.seed
                ^ (counter as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)
                ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut rng = SmallRng::seed_from_u64(seed);
            let multiplier = Gamma::new(BLOCK_SHAPE, 1.0 / BLOCK_SHAPE)
                .map(|g| g.sample(&mut rng))
                .unwrap_or(1.0);
            *slot = (index, multiplier);
        }
        slot.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Daily counts of a rate climbing linearly from 0 to `end` a day over `days`, drawn
    /// every ten minutes.
    fn daily(model: NoiseModel, end: f64, days: usize, seed: u64) -> Vec<u64> {
        let mut counts = Counts::new(model, seed);
        let mut rng = SmallRng::seed_from_u64(seed);
        let dt = 600.0;
        let mut out = vec![0; days];
        let steps = (days as f64 * DAY / dt) as usize;
        for i in 1..=steps {
            let t = i as f64 * dt;
            let per_day = end * t / (days as f64 * DAY);
            let n = counts.draw(Counter::Corrected, per_day * dt / DAY, t, dt, &mut rng);
            out[((t - 1.0) / DAY) as usize] += n;
        }
        out
    }

    #[test]
    fn every_model_keeps_the_mean_rate() {
        for model in NoiseModel::ALL {
            let mut counts = Counts::new(model, 3);
            let mut rng = SmallRng::seed_from_u64(3);
            let (dt, per_step) = (300.0, 0.05);
            let steps = 200_000;
            let total: u64 = (1..=steps)
                .map(|i| counts.draw(Counter::PcieReplays, per_step, i as f64 * dt, dt, &mut rng))
                .sum();
            let mean = total as f64 / (steps as f64 * per_step);
            assert!((mean - 1.0).abs() < 0.08, "{model:?}: {mean}");
        }
    }

    #[test]
    fn a_climb_reads_noisy_and_not_monotone_on_every_model() {
        for model in NoiseModel::ALL {
            let mut falls = 0;
            for seed in 0..20 {
                let days = daily(model, 12.0, 8, seed);
                falls += days.windows(2).filter(|w| w[1] < w[0]).count();
            }
            // A monotone climb would never fall from one day to the next.
            assert!(falls >= 20, "{model:?}: {falls} falls in 140 day pairs");
        }
    }

    #[test]
    fn overdispersed_counts_come_in_trains_and_diurnal_ones_follow_the_day() {
        let (dt, per_step) = (60.0, 0.01);
        let mut over = Counts::new(NoiseModel::Overdispersed, 5);
        let mut rng = SmallRng::seed_from_u64(5);
        let steps: Vec<u64> = (1..=100_000)
            .map(|i| over.draw(Counter::Corrected, per_step, i as f64 * dt, dt, &mut rng))
            .collect();
        assert!(steps.iter().all(|&n| n == 0 || n >= 2));
        let blocks: Vec<u64> = steps.chunks(180).map(|c| c.iter().sum()).collect();
        let mean = blocks.iter().sum::<u64>() as f64 / blocks.len() as f64;
        let var = blocks
            .iter()
            .map(|&b| (b as f64 - mean).powi(2))
            .sum::<f64>()
            / blocks.len() as f64;
        assert!(var / mean > 4.0, "index of dispersion {}", var / mean);

        let diurnal = Counts::new(NoiseModel::Diurnal, 5);
        let day: f64 = (0..1440)
            .map(|m| diurnal.diurnal(m as f64 * 60.0 + 60.0, 60.0))
            .sum();
        assert!((day / 1440.0 - 1.0).abs() < 1e-6, "{day}");
        let at = |hours: f64| diurnal.diurnal(diurnal.peak + hours * 3600.0, 1.0);
        assert!((at(0.0) - 1.7).abs() < 1e-3 && (at(12.0) - 0.3).abs() < 1e-3);
        // A step of a whole day averages the day.
        assert!((diurnal.diurnal(5.0 * DAY, DAY) - 1.0).abs() < 1e-9);
    }
}
