//! Turning cumulative hardware counters into per-sample deltas.
//!
//! NVML's counters are cumulative, but they reset: volatile ECC counts and the PCIe replay
//! counter start again from zero when the driver reloads or the GPU resets, and a GPU
//! that was lost may come back with fresh counters. A counter that goes down is taken as
//! a reset, and its new value as the increase since then (what Prometheus's `rate()` does).

use serde::{Deserialize, Serialize};

use super::window::Deltas;
use crate::model::GpuSample;

/// The last value seen of each counter the engine differentiates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Counters {
    #[serde(default)]
    corrected: Ecc,
    #[serde(default)]
    uncorrected: Ecc,
    pcie_replays: Option<u64>,
    nvlink_errors: Option<u64>,
    /// Each NVLink's own errors, so a finding can name the failing link: the exposition
    /// sums links by default, and the risk reads their sum.
    #[serde(default)]
    links: Vec<LinkGrowth>,
}

/// Errors one NVLink gained while this agent watched it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct LinkGrowth {
    link: u32,
    last: Option<u64>,
    grown: u64,
}

/// The NVLink whose errors grew most while watched, and by how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FailingLink {
    pub link: u32,
    pub errors: u64,
}

/// Baselines of one ECC count in its two scopes. Each scope is only ever differenced
/// against itself: the aggregate count is the lifetime total and the volatile one the
/// count since the driver loaded, so one minus the other is no increase at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Ecc {
    volatile: Option<u64>,
    aggregate: Option<u64>,
}

impl Ecc {
    /// The increase: from the volatile count when this sample has it (it moves with the
    /// driver), else from the aggregate one (nvidia-smi logs that only carry aggregate
    /// columns, a volatile read that failed this tick).
    fn update(&mut self, volatile: Option<u64>, aggregate: Option<u64>) -> f64 {
        let from_aggregate = delta(&mut self.aggregate, aggregate);
        if volatile.is_some() {
            delta(&mut self.volatile, volatile)
        } else {
            // The volatile baseline is stale once a tick went uncounted by it; starting it
            // afresh keeps the errors the aggregate just counted from being counted twice.
            self.volatile = None;
            from_aggregate
        }
    }
}

impl Counters {
    /// Deltas since the previous sample; XIDs and failed calls are not counters and are
    /// filled by the caller.
    pub fn update(&mut self, sample: &GpuSample) -> Deltas {
        let ecc = &sample.ecc;
        let mut nvlink = None;
        for l in &sample.nvlink {
            let total = l.total();
            nvlink = Some(nvlink.unwrap_or(0u64).saturating_add(total));
            let at = match self.links.iter().position(|g| g.link == l.link) {
                Some(at) => at,
                None => {
                    self.links.push(LinkGrowth {
                        link: l.link,
                        ..LinkGrowth::default()
                    });
                    self.links.len() - 1
                }
            };
            let growth = &mut self.links[at];
            growth.grown = growth
                .grown
                .saturating_add(delta(&mut growth.last, Some(total)) as u64);
        }
        Deltas {
            ecc_corrected: self
                .corrected
                .update(ecc.corrected_volatile, ecc.corrected_aggregate),
            ecc_uncorrected: self
                .uncorrected
                .update(ecc.uncorrected_volatile, ecc.uncorrected_aggregate),
            pcie_replays: delta(&mut self.pcie_replays, sample.pcie.replay_counter),
            nvlink_errors: delta(&mut self.nvlink_errors, nvlink),
            ..Deltas::default()
        }
    }
}

impl Counters {
    /// The link whose errors grew most while watched; None while none grew.
    pub(crate) fn failing_link(&self) -> Option<FailingLink> {
        self.links
            .iter()
            .filter(|g| g.grown > 0)
            // Ties go to the lower link number, for a stable name.
            .max_by(|a, b| a.grown.cmp(&b.grown).then(b.link.cmp(&a.link)))
            .map(|g| FailingLink {
                link: g.link,
                errors: g.grown,
            })
    }
}

/// Increase from `last` to `now`, remembering `now`. The first value, and a missing one,
/// add nothing: only change observed by this agent counts.
fn delta(last: &mut Option<u64>, now: Option<u64>) -> f64 {
    let Some(now) = now else {
        return 0.0;
    };
    let increase = match *last {
        None => 0,
        Some(prev) if now >= prev => now - prev,
        // Went down: a reset; everything counted since then is new.
        Some(_) => now,
    };
    *last = Some(now);
    increase as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(corrected: u64, replays: Option<u64>) -> GpuSample {
        let mut s = GpuSample::default();
        s.ecc.corrected_volatile = Some(corrected);
        s.pcie.replay_counter = replays;
        s
    }

    #[test]
    fn the_failing_link_is_the_one_whose_errors_grew_not_the_one_with_an_old_count() {
        use crate::model::NvLinkErrors;
        let links = |a: u64, b: u64| GpuSample {
            nvlink: vec![
                NvLinkErrors {
                    link: 0,
                    replay: a,
                    ..NvLinkErrors::default()
                },
                NvLinkErrors {
                    link: 7,
                    crc_flit: b,
                    ..NvLinkErrors::default()
                },
            ],
            ..GpuSample::default()
        };
        let mut c = Counters::default();
        // Link 0 came with a large count from before the agent; link 7 is the one moving.
        assert_eq!(c.update(&links(5_000, 0)).nvlink_errors, 0.0);
        assert_eq!(c.failing_link(), None);
        assert_eq!(c.update(&links(5_000, 40)).nvlink_errors, 40.0);
        assert_eq!(c.update(&links(5_001, 100)).nvlink_errors, 61.0);
        assert_eq!(
            c.failing_link(),
            Some(FailingLink {
                link: 7,
                errors: 100
            })
        );
    }

    #[test]
    fn first_sample_sets_the_baseline() {
        let mut c = Counters::default();
        assert_eq!(c.update(&sample(500, Some(7))).ecc_corrected, 0.0);
        let d = c.update(&sample(503, Some(9)));
        assert_eq!((d.ecc_corrected, d.pcie_replays), (3.0, 2.0));
    }

    #[test]
    fn a_reset_counts_the_new_value() {
        let mut c = Counters::default();
        c.update(&sample(500, None));
        assert_eq!(c.update(&sample(4, None)).ecc_corrected, 4.0);
        assert_eq!(c.update(&sample(6, None)).ecc_corrected, 2.0);
    }

    #[test]
    fn a_failed_volatile_read_does_not_count_the_lifetime_total() {
        let mut c = Counters::default();
        let mut s = sample(3, None);
        s.ecc.corrected_aggregate = Some(5000);
        c.update(&s);
        s.ecc.corrected_volatile = None;
        s.ecc.corrected_aggregate = Some(5001);
        assert_eq!(c.update(&s).ecc_corrected, 1.0);
        s.ecc.corrected_volatile = Some(5);
        s.ecc.corrected_aggregate = Some(5003);
        assert_eq!(c.update(&s).ecc_corrected, 0.0, "a fresh volatile baseline");
        s.ecc.corrected_volatile = Some(6);
        assert_eq!(c.update(&s).ecc_corrected, 1.0);
    }

    #[test]
    fn a_missing_value_keeps_the_baseline() {
        let mut c = Counters::default();
        c.update(&sample(1, Some(10)));
        assert_eq!(c.update(&sample(1, None)).pcie_replays, 0.0);
        assert_eq!(c.update(&sample(1, Some(12))).pcie_replays, 2.0);
    }
}
