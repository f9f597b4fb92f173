//! Power that varies at steady load: the residual of the draw against the GPU's own
//! utilization → power relation, hour by hour, against the GPU's own normal residual.
//!
//! A failing voltage regulator or power stage shows as a draw that swings while the work
//! does not; it need not assert the power-brake bit. The relation is a straight line fitted
//! to the last hours' samples (exponentially weighted, e-fold [`FIT_SECONDS`]): a job's
//! checkpoint dips, gaps and diurnal load move along it, a change of job moves it within
//! hours. Each clock hour's residual spread (root mean square, as a share of the power
//! limit) is compared with the GPU's own normal spread, a [`Baseline`] learnt over a
//! warm-up and then drifting by at most 1% of the limit a day: a GPU whose draw always
//! swung (an all-reduce that idles the SMs' power at full utilization) is its own normal.
//! An hour whose spread passes twice that normal, and the normal by
//! [`UNSTABLE_EXCESS`] of the limit, is an unstable hour; the hours are counted by a
//! [`RateTest`] like every error counter, so one odd hour is one bad hour and days of them
//! are evidence.

use serde::{Deserialize, Serialize};

use super::rate::{RateTest, floor};
use super::state::Baseline;
use crate::engine::window::Point;

/// E-fold time of the utilization → power fit.
const FIT_SECONDS: f64 = 2.0 * 3600.0;

/// Samples an hour needs before its spread means anything.
const HOUR_SAMPLES: u32 = 6;

/// Spread beyond the GPU's normal, as a share of its limit, below which no hour is
/// unstable: sensor noise and boost clocks move the draw by a percent or two.
pub(crate) const UNSTABLE_EXCESS: f64 = 0.02;

/// How far the normal spread may drift in a day, as a share of the limit.
const NORMAL_DRIFT_PER_DAY: f64 = 0.01;

/// A GPU's power against its utilization.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PowerResidual {
    /// Means of utilization, power, utilization², utilization × power (e-fold
    /// [`FIT_SECONDS`]).
    moments: [f64; 4],
    fitted: bool,
    /// The most power drawn: the scale where the limit is unknown.
    peak: f64,
    /// The open clock hour: its start, its squared residuals' sum (shares of the limit)
    /// and samples.
    hour: i64,
    squares: f64,
    samples: u32,
    /// Residual spread of the last hour closed, as a share of the limit.
    pub(crate) unexplained: f64,
    /// The GPU's normal hourly spread.
    pub normal: Baseline,
    /// Unstable hours, read as a rate.
    pub unstable: RateTest,
}

impl PowerResidual {
    /// The most power drawn: the scale where the limit is unknown.
    pub fn peak(&self) -> f64 {
        self.peak
    }

    /// Folds one sample in; `limit` is the GPU's power limit where known.
    pub fn observe(&mut self, p: &Point, limit: Option<f64>) {
        let hour = p.at.div_euclid(3600) * 3600;
        if hour > self.hour {
            if self.hour != 0 {
                self.close();
            }
            self.hour = hour;
            self.squares = 0.0;
            self.samples = 0;
        }
        self.unstable
            .observe(p.at, 0.0, p.seconds, floor::UNSTABLE_HOURS);
        let (Some(power), Some(util)) = (p.power, p.utilization) else {
            return;
        };
        if !power.is_finite()
            || !util.is_finite()
            || power.abs() > 1e6
            || p.seconds.is_nan()
            || p.seconds <= 0.0
        {
            return;
        }
        self.peak = self.peak.max(power);
        let scale = limit.filter(|l| *l > 0.0).unwrap_or(self.peak);
        let x = [util, power, util * util, util * power];
        if self.fitted {
            let k = super::state::weight(p.seconds, FIT_SECONDS);
            for (m, x) in self.moments.iter_mut().zip(x) {
                *m += (x - *m) * k;
            }
        } else {
            self.moments = x;
            self.fitted = true;
        }
        let [u, pw, uu, up] = self.moments;
        let var = uu - u * u;
        // Utilization that barely moves says nothing about the slope: the line is flat.
        let slope = if var > 1e-4 { (up - u * pw) / var } else { 0.0 };
        let predicted = pw + slope * (util - u);
        if scale > 0.0 {
            let residual = (power - predicted) / scale;
            if residual.is_finite() {
                self.squares += residual * residual;
                self.samples += 1;
            }
        }
    }

    /// Closes the hour: its spread against the normal, and whether it was unstable.
    fn close(&mut self) {
        if self.samples < HOUR_SAMPLES {
            return;
        }
        let spread = (self.squares / f64::from(self.samples)).sqrt();
        if !spread.is_finite() {
            return;
        }
        self.unexplained = spread;
        let unstable = self
            .normal
            .get()
            .is_some_and(|normal| spread > 2.0 * normal && spread - normal > UNSTABLE_EXCESS);
        if unstable {
            // Counted in the hour it describes, which the test has open still.
            self.unstable
                .observe(self.hour, 1.0, 0.0, floor::UNSTABLE_HOURS);
        }
        self.normal.learn(spread, 3600.0, NORMAL_DRIFT_PER_DAY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Normal};

    /// A GPU at a 700 W limit polled every minute for `days`; `draw(t, rng)` gives
    /// (utilization 0–1, watts) at day `t`. Returns the unstable hours' statistic and the
    /// last hour's spread at the end of each day.
    fn run(days: usize, seed: u64, draw: impl Fn(f64, &mut SmallRng) -> (f64, f64)) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut power = PowerResidual::default();
        let start = 1_700_000_000 / 3600 * 3600;
        let mut out = Vec::new();
        for m in 0..(days as i64 * 1440) {
            let t = m as f64 / 1440.0;
            let (util, watts) = draw(t, &mut rng);
            let point = Point {
                at: start + m * 60,
                seconds: 60.0,
                utilization: Some(util),
                power: Some(watts),
                ..Point::default()
            };
            power.observe(&point, Some(700.0));
            if (m + 1) % 1440 == 0 {
                out.push(power.unstable.llr());
            }
        }
        out
    }

    /// A training job at ~96% with a 4-minute checkpoint dip every 130 minutes and power
    /// following utilization, plus sensor noise.
    fn training(t: f64, rng: &mut SmallRng) -> (f64, f64) {
        let minute = (t * 1440.0) as i64;
        let util = if minute % 130 < 4 {
            rng.random_range(0.03..0.15)
        } else {
            (0.96 + Normal::new(0.0, 0.02).map_or(0.0, |n: Normal<f64>| n.sample(rng)))
                .clamp(0.0, 1.0)
        };
        let watts =
            70.0 + 560.0 * util + Normal::new(0.0, 6.0).map_or(0.0, |n: Normal<f64>| n.sample(rng));
        (util, watts)
    }

    #[test]
    fn power_that_swings_more_and_more_at_steady_load_is_evidence() {
        // Swings growing from nothing to a 120 W standard deviation over days 3 to 8.
        let s = run(9, 1, |t, rng| {
            let (util, watts) = training(t, rng);
            let sd = 120.0 * ((t - 3.0) / 5.0).clamp(0.0, 1.0);
            let noise = Normal::new(0.0, sd.max(1e-9)).map_or(0.0, |n: Normal<f64>| n.sample(rng));
            (util, watts + noise)
        });
        assert!(s[2] < 1.0, "before: {s:?}");
        assert!(s[6] > 12.0, "four days in: {s:?}");
    }

    #[test]
    fn a_draw_that_always_swung_is_its_own_normal() {
        // An all-reduce phase drops the draw by a third in 30% of samples at full
        // utilization, from the first day on.
        let s = run(12, 2, |t, rng| {
            let (util, mut watts) = training(t, rng);
            if util > 0.5 && rng.random::<f64>() < 0.3 {
                watts -= rng.random_range(0.22..0.38) * 700.0;
            }
            (util, watts)
        });
        assert!(s.iter().all(|x| *x < 3.0), "{s:?}");
    }

    #[test]
    fn load_that_moves_power_along_its_line_is_not_unstable() {
        // Diurnal inference: utilization swings 20–80% over the day with noise, and power
        // follows it.
        let s = run(12, 3, |t, rng| {
            let base = 0.5 + 0.3 * (2.0 * std::f64::consts::PI * t).sin();
            let util = (base + Normal::new(0.0, 0.11).map_or(0.0, |n: Normal<f64>| n.sample(rng)))
                .clamp(0.0, 1.0);
            let watts = 70.0
                + 560.0 * util.powf(1.15)
                + Normal::new(0.0, 6.0).map_or(0.0, |n: Normal<f64>| n.sample(rng));
            (util, watts)
        });
        assert!(s.iter().all(|x| *x < 3.0), "{s:?}");
    }
}
