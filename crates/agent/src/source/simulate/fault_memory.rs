//! The memory families: wear (corrected ECC climbing, rows remapped), row remapping with
//! hardly any ECC, and page retirement on pre-Ampere GPUs.
//!
//! The repair records live in [`Wear`]'s `remap_*` fields whatever the GPU: a GPU that
//! remaps rows (Ampere and later) reports them as remapped rows, one that retires pages
//! (Volta and earlier) as retired pages (single-bit, double-bit, pending), which is what
//! `nvidia-smi` and NVML show on each.

use rand::Rng;
use rand::rngs::SmallRng;

use super::fault::{Fault, SHAPED_BASE, Step, Wear, poisson};
use super::noise::Counter;

impl Fault {
    /// Corrected ECC from 2/h growing ~e^4.5 (or the drawn shape), every 40 of them a row
    /// remapped, a remap pending late, then an uncorrected error (XID 48/63/94) and a
    /// failed remap (XID 64).
    pub(super) fn memory_wear(
        &mut self,
        p: f64,
        at: Step,
        wear: &mut Wear,
        rng: &mut SmallRng,
        xids: &mut Vec<u32>,
    ) {
        let hours = at.hours();
        if p >= 0.1 {
            // 2/h at onset (48/day, far past the 10/day warning level), growing ~e^4.5.
            let per_hour = self.intensity(p, SHAPED_BASE.memory_corrected, || {
                2.0 * (4.5 * (p.min(1.5) - 0.1)).exp()
            });
            let n = wear
                .noise
                .draw(Counter::Corrected, per_hour * hours, at.t, at.dt, rng);
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

    /// Rows remapped from 0.1/h (a weak row every ten hours, growing with the shape) while
    /// corrected ECC stays near one a day; a remap pending from 70% of the way; at the
    /// failure point an uncorrectable error whose remap fails (XID 48, 64).
    pub(super) fn row_remap(
        &mut self,
        p: f64,
        at: Step,
        wear: &mut Wear,
        rng: &mut SmallRng,
        xids: &mut Vec<u32>,
    ) {
        if p >= 0.1 {
            let hours = at.hours();
            wear.corrected += wear
                .noise
                .draw(Counter::Corrected, 0.04 * hours, at.t, at.dt, rng);
            let per_hour = self.intensity(p, SHAPED_BASE.rows_remapped, || {
                0.1 * (3.0 * (p.min(1.5) - 0.1)).exp()
            });
            wear.remap_correctable +=
                wear.noise
                    .draw(Counter::RowsRemapped, per_hour * hours, at.t, at.dt, rng);
        }
        if p >= 0.6 && self.first(2, rng.random_bool(0.5)) {
            // One uncorrectable error contained by a remap: recorded, not fatal.
            wear.uncorrected += 1;
            wear.remap_uncorrectable += 1;
            xids.extend([94, 63]);
        }
        if p >= 0.7 {
            wear.remap_pending = true;
        }
        if self.first(0, p >= 1.0) {
            wear.uncorrected += 1;
            wear.remap_uncorrectable += 1;
            wear.remap_failure = true;
            xids.extend([48, 64]);
        }
    }

    /// Pages retired for repeated single-bit errors (corrected ECC at 0.5/h growing, a page
    /// retired for every 20), one retired for a double-bit error at 70% of the way, a
    /// retirement pending from 85%, then a double-bit error (XID 48, 63) and, later, a
    /// retirement that cannot be recorded (XID 64).
    pub(super) fn page_retirement(
        &mut self,
        p: f64,
        at: Step,
        wear: &mut Wear,
        rng: &mut SmallRng,
        xids: &mut Vec<u32>,
    ) {
        if p >= 0.1 {
            let per_hour = self.intensity(p, SHAPED_BASE.page_corrected, || {
                0.5 * (4.0 * (p.min(1.5) - 0.1)).exp()
            });
            let n = wear
                .noise
                .draw(Counter::Corrected, per_hour * at.hours(), at.t, at.dt, rng);
            wear.corrected += n;
            self.remap_budget += n;
            let pages = self.remap_budget / 20;
            wear.remap_correctable += pages;
            self.remap_budget -= pages * 20;
        }
        if self.first(2, p >= 0.7) {
            wear.uncorrected += 1;
            wear.remap_uncorrectable += 1;
            xids.extend([48, 63]);
        }
        if p >= 0.85 {
            wear.remap_pending = true;
        }
        if self.first(0, p >= 1.0) {
            wear.uncorrected += 1 + rng.random_range(0..2);
            wear.remap_uncorrectable += 1;
            xids.extend([48, 63]);
        }
        if self.first(1, p >= 1.25) {
            wear.remap_failure = true;
            xids.push(64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultKind;
    use super::super::shape::{Curve, Shape};
    use super::*;
    use rand::SeedableRng;

    fn run(kind: FaultKind, curve: Curve, until: f64) -> (Wear, Vec<u32>) {
        let day = 86_400.0;
        let shape = Shape {
            curve,
            rate: 1.0,
            growth: 10.0,
            precursor_days: 6.0,
            cluster_hours: 12.0,
        };
        let mut fault = Fault::shaped(kind, 10.0 * day, shape, Default::default());
        let mut rng = SmallRng::seed_from_u64(11);
        let mut wear = Wear::default();
        let mut xids = Vec::new();
        let mut t = 0.0;
        while t < until * day {
            t += 300.0;
            xids.extend(fault.step(t, 300.0, &mut wear, &mut rng));
        }
        (wear, xids)
    }

    #[test]
    fn row_remap_remaps_rows_with_little_ecc_then_fails_the_remap() {
        for curve in Curve::ALL {
            let (before, _) = run(FaultKind::RowRemap, curve, 9.5);
            assert!(before.remap_correctable >= 3, "{curve:?}: {before:?}");
            assert!(before.corrected < 12, "{curve:?}: little ECC: {before:?}");
            assert!(before.remap_pending && !before.remap_failure);
            let (after, xids) = run(FaultKind::RowRemap, curve, 10.01);
            assert!(after.remap_failure, "{curve:?}");
            assert!(xids.ends_with(&[48, 64]), "{xids:?}");
        }
    }

    #[test]
    fn page_retirement_retires_pages_then_a_double_bit_error() {
        let (before, xids) = run(FaultKind::PageRetirement, Curve::Exponential, 9.5);
        assert!(before.remap_correctable > 0, "{before:?}");
        assert_eq!(before.remap_uncorrectable, 1);
        assert!(before.remap_pending);
        assert_eq!(xids, vec![48, 63]);
        let (after, xids) = run(FaultKind::PageRetirement, Curve::Exponential, 12.0);
        assert!(after.remap_failure && after.remap_uncorrectable == 2);
        assert_eq!(xids, vec![48, 63, 48, 63, 64]);
    }
}
