//! What one sample adds to a bucket, worked out once for the three rings it goes into.
//!
//! [`Stat::add`] leaves out a value that is not finite or past 1e12 (see there): the
//! gauges are checked here once, not once a ring, and the rings take them as they are. A
//! sample that counts no event adds nothing to a bucket's counters, so they are left as
//! they are: a bucket's counters start at +0.0 and only ever have counts added, so they
//! are never -0.0, and adding ±0.0 to anything else gives it back to the bit.

use super::{Bucket, Deltas, Point, Stat};

/// One sample as a bucket takes it.
pub(super) struct Added {
    seconds: f64,
    utilization: Option<f64>,
    temperature: Option<f64>,
    memory_gap: Option<f64>,
    power: Option<f64>,
    collect_seconds: Option<f64>,
    thermal_slowdown: bool,
    power_brake: bool,
    /// `None` when the sample counts no event.
    deltas: Option<Deltas>,
}

/// A gauge [`Stat::add`] takes: finite and within 1e12.
pub(super) fn believable(value: f64) -> Option<f64> {
    (value.is_finite() && value.abs() <= 1e12).then_some(value)
}

impl Added {
    pub(super) fn of(p: &Point) -> Added {
        let memory_gap = match (p.memory_temperature, p.temperature) {
            (Some(m), Some(g)) => believable(m - g),
            _ => None,
        };
        Added {
            seconds: p.seconds,
            utilization: p.utilization.and_then(believable),
            temperature: p.temperature.and_then(believable),
            memory_gap,
            power: p.power.and_then(believable),
            collect_seconds: p.collect_seconds.and_then(believable),
            thermal_slowdown: p.thermal_slowdown,
            power_brake: p.power_brake,
            deltas: (p.deltas != Deltas::default()).then_some(p.deltas),
        }
    }
}

impl Stat {
    /// [`Stat::add`] of a value it takes ([`believable`]).
    pub(super) fn add_believable(&mut self, value: Option<f64>) {
        let Some(value) = value else {
            return;
        };
        if self.n == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.n += 1;
        self.sum += value;
        self.sumsq += value * value;
    }
}

impl Bucket {
    /// Folds one sample in.
    pub(super) fn add(&mut self, a: &Added) {
        self.samples += 1;
        self.seconds += a.seconds;
        self.utilization.add_believable(a.utilization);
        self.temperature.add_believable(a.temperature);
        self.memory_gap.add_believable(a.memory_gap);
        self.power.add_believable(a.power);
        self.collect_seconds.add_believable(a.collect_seconds);
        if a.thermal_slowdown {
            self.thermal_slowdown_seconds += a.seconds;
        }
        if a.power_brake {
            self.power_brake_seconds += a.seconds;
        }
        if let Some(deltas) = &a.deltas {
            self.deltas.add(deltas);
        }
    }
}
