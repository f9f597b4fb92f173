//! The shape of a fault's precursors: how fast they start, how they grow, and over how long.
//!
//! The built-in fleet gives each family one fixed shape (see [`super::fault`]); the scenario
//! library (crates/agent/src/scenario/) draws a [`Shape`] per failing GPU instead, so the same family
//! shows up as a slow linear climb on one GPU, an exponential run-up on another, clusters of
//! errors separated by silence on a third, and a staircase on a fourth. The failure itself
//! (the XIDs, the lost GPU) stays what the family does.

use serde::{Deserialize, Serialize};

/// How a precursor's intensity grows from its first sign to the failure point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Curve {
    /// Intensity rises in a straight line.
    Linear,
    /// Intensity multiplies by the same factor every hour: quiet for long, then steep.
    Exponential,
    /// Recurring bursts: the exponential run-up, but all of it in episodes of a few hours
    /// separated by silence (a weak cell that errs when the memory is hot, a connector that
    /// acts up under load). The episodes recur every [`Shape::cluster_hours`], each a fifth
    /// of the period, and the curve is not the noise model: how the counts arrive within an
    /// episode is the GPU's [`super::noise::NoiseModel`].
    Clustered,
    /// Flat plateaus with jumps between them (each jump a new weak row, a further crack).
    Stepwise,
}

impl Curve {
    pub const ALL: [Curve; 4] = [
        Curve::Linear,
        Curve::Exponential,
        Curve::Clustered,
        Curve::Stepwise,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Curve::Linear => "linear",
            Curve::Exponential => "exponential",
            Curve::Clustered => "clustered",
            Curve::Stepwise => "stepwise",
        }
    }
}

/// Plateaus of a stepwise curve between first sign and failure.
const STEPS: f64 = 4.0;
/// Share of the time a clustered precursor is active; its rate is scaled up by the inverse,
/// so it shows as many errors as a continuous one, only bunched.
const CLUSTER_DUTY: f64 = 0.2;

/// A precursor shape: curve, rate, growth and span.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    pub curve: Curve,
    /// Multiplies the family's intensity at onset (its base rate, documented per family in
    /// docs/detection.md): 0.3 is a faint precursor, 3 a loud one. The scenario library
    /// draws a counted precursor's rate at the failure point instead and sets this to that
    /// over the base rate times the growth.
    pub rate: f64,
    /// Intensity at the failure point over intensity at the first sign (≥ 1).
    pub growth: f64,
    /// Days from the first sign of the fault to its failure point.
    pub precursor_days: f64,
    /// Hours from the start of one cluster to the next (clustered curve only).
    pub(crate) cluster_hours: f64,
}

impl Shape {
    /// Intensity multiplier at `x`, the position between first sign (0) and failure (1);
    /// nothing before the first sign, and past the failure point it stays where it got to
    /// by 1.5.
    pub(crate) fn intensity(&self, x: f64) -> f64 {
        if x.is_nan() || x < 0.0 {
            return 0.0;
        }
        let x = x.min(1.5);
        let growth = self.growth.max(1.0);
        let factor = match self.curve {
            Curve::Linear => 1.0 + (growth - 1.0) * x,
            Curve::Exponential => growth.powf(x),
            Curve::Stepwise => 1.0 + (growth - 1.0) * (x * STEPS).floor() / STEPS,
            Curve::Clustered => growth.powf(x) * self.cluster_gate(x),
        };
        self.rate.max(0.0) * factor
    }

    /// How far a level-type precursor (a temperature gap, a power swing) has moved, 0 at the
    /// first sign and 1 at the failure point, following the curve.
    pub fn level(&self, x: f64) -> f64 {
        if x.is_nan() || x <= 0.0 {
            return 0.0;
        }
        let x = x.min(1.2);
        let growth = self.growth.max(1.0 + 1e-9);
        match self.curve {
            Curve::Linear => x,
            Curve::Exponential => (growth.powf(x) - 1.0) / (growth - 1.0),
            Curve::Stepwise => ((x * STEPS).ceil() / STEPS).min(1.2),
            // Episodes at the level the ramp has reached, nothing in between.
            Curve::Clustered => x * self.cluster_gate(x) * CLUSTER_DUTY,
        }
    }

    /// 1/duty inside a cluster, 0 between clusters; clusters start at the first sign.
    fn cluster_gate(&self, x: f64) -> f64 {
        let hours = x * self.precursor_days * 24.0;
        let period = self.cluster_hours.max(1.0);
        if (hours / period).fract() < CLUSTER_DUTY {
            1.0 / CLUSTER_DUTY
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(curve: Curve) -> Shape {
        Shape {
            curve,
            rate: 1.0,
            growth: 20.0,
            precursor_days: 5.0,
            cluster_hours: 12.0,
        }
    }

    #[test]
    fn every_curve_starts_at_the_rate_and_ends_near_rate_times_growth() {
        for curve in [Curve::Linear, Curve::Exponential, Curve::Stepwise] {
            let s = shape(curve);
            assert_eq!(s.intensity(-0.1), 0.0);
            assert!((s.intensity(0.0) - 1.0).abs() < 1e-9, "{curve:?}");
            assert!((s.intensity(1.0) - 20.0).abs() < 1e-9, "{curve:?}");
            assert!((s.level(1.0) - 1.0).abs() < 1e-9, "{curve:?}");
        }
        // Linear is above exponential in the middle: the exponential waits, then climbs.
        assert!(shape(Curve::Linear).intensity(0.5) > shape(Curve::Exponential).intensity(0.5));
        // Stepwise is flat within a plateau.
        let s = shape(Curve::Stepwise);
        assert_eq!(s.intensity(0.30), s.intensity(0.45));
        assert!(s.intensity(0.55) > s.intensity(0.45));
    }

    #[test]
    fn clustered_errs_in_episodes_with_the_same_mean() {
        let s = shape(Curve::Clustered);
        let n = 10_000;
        let xs = (0..n).map(|i| i as f64 / n as f64);
        let (mut on, mut total) = (0usize, 0.0);
        for x in xs {
            let v = s.intensity(x);
            on += usize::from(v > 0.0);
            total += v;
        }
        let share = on as f64 / n as f64;
        assert!((share - CLUSTER_DUTY).abs() < 0.03, "{share}");
        let exp_mean: f64 = (0..n)
            .map(|i| shape(Curve::Exponential).intensity(i as f64 / n as f64))
            .sum();
        assert!(
            (total / exp_mean - 1.0).abs() < 0.2,
            "{total} vs {exp_mean}"
        );
    }
}
