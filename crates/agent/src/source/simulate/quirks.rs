//! What makes a healthy GPU look unhealthy: the confounders of the scenario library. None
//! of them predicts a failure; a risk model that warns on them is wrong.
//!
//! A GPU without quirks (the built-in fleet) draws nothing here, so its readings stay what
//! they were; a GPU with some draws from a stream of its own.

use rand::rngs::SmallRng;

use super::fault::{VolatileBase, Wear, poisson};
use super::noise::Counter;

/// A one-off burst of corrected ECC errors: `count` in the hour from `at`, then silence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct EccBurst {
    /// Simulated seconds since the fleet started.
    pub at: f64,
    pub count: f64,
}

/// Inlet air warmer by `degrees` from `start` to `end` (simulated seconds): a node-wide
/// cooling event (CDU or room trouble) when every GPU of a node has the same one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct InletEvent {
    pub start: f64,
    pub end: f64,
    pub degrees: f64,
}

/// The confounders one GPU shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Quirks {
    pub(crate) ecc_burst: Option<EccBurst>,
    /// Times the volatile counters (ECC, PCIe replays, NVLink errors) go back to zero: a
    /// driver reload of the node or a reset of this GPU.
    pub(crate) counter_resets: Vec<f64>,
    /// Aggregate ECC errors from before the recording, which never grow.
    pub(crate) old_corrected: u64,
    pub(crate) old_uncorrected: u64,
    /// PCIe replays per hour of a link that is noisy but steady, for weeks.
    pub(crate) steady_replays_per_hour: f64,
    /// Degrees of inlet air above the aisle, all the time (hot but stable).
    pub(crate) extra_inlet: f64,
    pub(crate) inlet_events: Vec<InletEvent>,
    /// No work from `.0` to `.1` (simulated seconds): idle for days.
    pub idle: Option<(f64, f64)>,
    /// MIG mode on: the whole-GPU utilization and the row-remap counters read `[N/A]`.
    pub mig: bool,
    /// ECC off: no ECC, remap or retirement counters.
    pub(crate) ecc_disabled: bool,
}

impl Quirks {
    /// Extra inlet degrees at time `t`.
    pub(crate) fn inlet(&self, t: f64) -> f64 {
        self.extra_inlet
            + self
                .inlet_events
                .iter()
                .filter(|e| (e.start..e.end).contains(&t))
                .map(|e| e.degrees)
                .fold(0.0, f64::max)
    }

    /// Whether the GPU is kept idle at time `t`.
    pub(crate) fn idle_at(&self, t: f64) -> bool {
        self.idle.is_some_and(|(from, to)| (from..to).contains(&t))
    }

    /// One step of `dt` seconds ending at `t`.
    pub fn step(&self, t: f64, dt: f64, wear: &mut Wear, rng: &mut SmallRng) {
        let hours = dt / 3600.0;
        if let Some(burst) = self.ecc_burst {
            // The part of this step inside the burst's hour.
            let overlap = (t.min(burst.at + 3600.0) - (t - dt).max(burst.at)).max(0.0);
            if overlap > 0.0 {
                wear.corrected += poisson(burst.count * overlap / 3600.0, rng);
            }
        }
        if self.steady_replays_per_hour > 0.0 {
            let mean = self.steady_replays_per_hour * hours;
            wear.pcie_replays += wear.noise.draw(Counter::PcieReplays, mean, t, dt, rng);
        }
        if self.counter_resets.iter().any(|&r| r > t - dt && r <= t) {
            wear.volatile_base = VolatileBase::of(wear);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_burst_lands_in_its_hour_and_a_reset_zeroes_the_volatile_counts() {
        let quirks = Quirks {
            ecc_burst: Some(EccBurst {
                at: 7200.0,
                count: 200.0,
            }),
            counter_resets: vec![5.0 * 3600.0],
            ..Quirks::default()
        };
        let mut rng = SmallRng::seed_from_u64(1);
        let mut wear = Wear::default();
        let mut t = 0.0;
        let mut after_burst = 0;
        while t < 4.0 * 3600.0 {
            t += 60.0;
            quirks.step(t, 60.0, &mut wear, &mut rng);
            if t <= 7200.0 {
                assert_eq!(wear.corrected, 0);
            }
            if t == 3.0 * 3600.0 {
                after_burst = wear.corrected;
            }
        }
        assert!((150..250).contains(&after_burst), "{after_burst}");
        assert_eq!(wear.corrected, after_burst, "silence after the hour");
        while t < 6.0 * 3600.0 {
            t += 60.0;
            quirks.step(t, 60.0, &mut wear, &mut rng);
        }
        assert_eq!(wear.volatile_base.corrected, wear.corrected);
    }

    #[test]
    fn inlet_events_add_to_the_constant_extra() {
        let quirks = Quirks {
            extra_inlet: 3.0,
            inlet_events: vec![InletEvent {
                start: 10.0,
                end: 20.0,
                degrees: 18.0,
            }],
            idle: Some((100.0, 200.0)),
            ..Quirks::default()
        };
        assert_eq!(quirks.inlet(5.0), 3.0);
        assert_eq!(quirks.inlet(15.0), 21.0);
        assert!(quirks.idle_at(150.0) && !quirks.idle_at(250.0));
    }
}
