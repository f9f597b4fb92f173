//! Hardware fault families and how they unfold over simulated time.
//!
//! Each family progresses from 0 (start) to 1 (its failure point, `horizon` seconds in) and
//! beyond. The shapes follow what operators report: memory wear shows accelerating corrected
//! ECC and row remaps long before an uncorrected error; PCIe trouble shows replay bursts and
//! a link that trains down; cooling trouble shows memory running ever hotter than the GPU
//! before slowdown; falling off the bus usually gives no numeric warning at all.

use rand::Rng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Poisson};

/// A hardware fault family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    MemoryWear,
    PcieLink,
    Thermal,
    FellOffBus,
}

/// The counters and link state a fault acts on; owned by the simulated GPU.
#[derive(Debug, Clone, Default)]
pub struct Wear {
    pub corrected: u64,
    pub uncorrected: u64,
    pub remap_correctable: u64,
    pub remap_uncorrectable: u64,
    pub remap_pending: bool,
    pub remap_failure: bool,
    pub pcie_replays: u64,
    pub link_gen: u32,
    pub link_width: u32,
    pub lost: bool,
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
    remap_budget: u64,
    /// Progress at the end of the last step.
    progress: f64,
    /// The failure point was passed and not yet reported.
    failure_due: bool,
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
        }
    }

    /// Progress toward the failure point: 0 at start, 1 at failure.
    pub fn progress(&self, t: f64) -> f64 {
        t / self.horizon
    }

    /// Extra degrees the memory runs above its normal gap to the GPU.
    pub fn memory_gap(&self, t: f64) -> f64 {
        match self.kind {
            FaultKind::Thermal => 26.0 * smoothstep((self.progress(t) - 0.1) / 0.8),
            _ => 0.0,
        }
    }

    /// Extra degrees of inlet temperature (a failing fan, a blocked heatsink).
    pub fn ambient(&self, t: f64) -> f64 {
        match self.kind {
            FaultKind::Thermal => 12.0 * self.progress(t).clamp(0.0, 1.2),
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
        let mut xids = Vec::new();
        match self.kind {
            FaultKind::MemoryWear => {
                if p >= 0.1 {
                    // 2/h at onset (48/day, far past the 10/day warning level), growing ~e^4.5.
                    let per_hour = 2.0 * (4.5 * (p.min(1.5) - 0.1)).exp();
                    let n = poisson(per_hour * hours, rng);
                    wear.corrected += n;
                    self.remap_budget += n;
                }
                if p >= 0.3 {
                    let remaps = self.remap_budget / 40;
                    wear.remap_correctable += remaps;
                    self.remap_budget -= remaps * 40;
                }
                if p >= 0.75 {
                    wear.remap_pending = true;
                }
                if self.first(0, p >= 1.0) {
                    wear.uncorrected += 1 + rng.random_range(0..3);
                    wear.remap_uncorrectable += 1;
                    // Double-bit error, the row remap recorded, the error contained.
                    xids.extend([48, 63, 94]);
                }
                if p >= 1.0 {
                    let n = poisson(0.5 * hours, rng);
                    if n > 0 {
                        wear.uncorrected += n;
                        xids.push(94);
                    }
                }
                if self.first(1, p >= 1.25) {
                    wear.remap_failure = true;
                    xids.push(64);
                }
            }
            FaultKind::PcieLink => {
                if p >= 0.2 {
                    let bursts_per_hour = 0.5 + 8.0 * (p.min(1.5) - 0.2);
                    for _ in 0..poisson(bursts_per_hour * hours, rng) {
                        wear.pcie_replays += rng.random_range(20..400);
                    }
                }
                if self.first(0, p >= 0.8) {
                    wear.link_width = 8;
                }
                if self.first(1, p >= 1.0) {
                    wear.link_gen = 3;
                }
            }
            FaultKind::Thermal => {}
            FaultKind::FellOffBus => {
                if self.first(0, p >= 1.0) {
                    wear.lost = true;
                    xids.push(79);
                }
            }
        }
        xids
    }

    /// The kind, once, after the failure point is passed.
    pub fn take_failure(&mut self) -> Option<FaultKind> {
        std::mem::take(&mut self.failure_due).then_some(self.kind)
    }

    /// True exactly once: the first time `condition` holds for milestone `bit`.
    fn first(&mut self, bit: u32, condition: bool) -> bool {
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
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn run(kind: FaultKind, until: f64) -> (Wear, Vec<u32>) {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut fault = Fault::new(kind, 8.0 * 3600.0);
        let mut wear = Wear {
            link_gen: 5,
            link_width: 16,
            ..Wear::default()
        };
        let mut xids = Vec::new();
        let dt = 60.0;
        let mut t = 0.0;
        while t < until {
            t += dt;
            xids.extend(fault.step(t, dt, &mut wear, &mut rng));
        }
        (wear, xids)
    }

    #[test]
    fn memory_wear_warns_before_it_fails() {
        let (before, xids) = run(FaultKind::MemoryWear, 0.9 * 8.0 * 3600.0);
        assert!(
            before.corrected > 10,
            "corrected ECC climbs: {}",
            before.corrected
        );
        assert!(before.remap_correctable > 0);
        assert!(before.remap_pending);
        assert_eq!(before.uncorrected, 0);
        assert!(xids.is_empty());
        let (after, xids) = run(FaultKind::MemoryWear, 1.3 * 8.0 * 3600.0);
        assert!(after.uncorrected > 0 && after.remap_failure);
        assert_eq!(&xids[..3], &[48, 63, 94]);
        assert!(xids.contains(&64));
    }

    #[test]
    fn pcie_link_bursts_then_trains_down() {
        let (w, _) = run(FaultKind::PcieLink, 1.01 * 8.0 * 3600.0);
        assert!(w.pcie_replays > 100, "{}", w.pcie_replays);
        assert_eq!((w.link_gen, w.link_width), (3, 8));
    }

    #[test]
    fn fell_off_bus_raises_xid_79_once() {
        let (w, xids) = run(FaultKind::FellOffBus, 2.0 * 8.0 * 3600.0);
        assert!(w.lost);
        assert_eq!(xids, vec![79]);
    }
}
