//! The operators' anchors as hard constraints of the fit.
//!
//! The risk model's unit tests (crates/agent/src/engine/risk/tests.rs) state what operators expect of
//! a few plain histories: a slow climb of corrected errors warns a day ahead and holds, a
//! node-wide heat or a steady noisy link does not warn, an HBM gap far over its own
//! baseline does. A fit on the scenario library alone would trade some of them for a
//! failure or two of the library (its memory-wear failures also carry remaps, so corrected
//! errors alone looked weak to it). So every fit runs the same histories
//! ([`crate::scenario::anchors`]) through the engine under the probe model, as the library
//! is run, and the search ([`super::search`]) refuses any move that breaks one of the
//! [`Check`]s below: the anchors are not scored against the library's failures, they bound
//! the weights the search may choose.
//!
//! A check is what its test asserts, with [`SLACK`] to spare: the search rebuilds scores
//! from held features and the weights, and a bound met by a hair there would be a test
//! failing by a hair in the engine.

use crate::engine::risk::{FEATURES, feature_index};
use crate::engine::{Engine, EngineConfig};
use crate::scenario::anchors::{
    self as history, CLIMB_END, CLIMB_START, DAY_MIN, NodeChange, RAMP_START, on_gpu_0,
};

use super::parallel::in_parallel;

const N: usize = FEATURES.len();

/// Log-odds (scores) and contribution units the search keeps between an anchor's bound
/// and the weights it chooses.
pub const SLACK: f64 = 0.05;

/// What an anchor GPU must show, as its test asserts it. Scores are 0–1, times seconds
/// from the anchor's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    /// Every row's score below this.
    Below(f64),
    /// The last row's score at least this.
    EndsAtLeast(f64),
    /// Warned at `score` at every row from `from` to `to`, held from the first warning on,
    /// and no warning up to `quiet_until`.
    WarnsHeld {
        score: f64,
        quiet_until: f64,
        from: f64,
        to: f64,
    },
    /// The feature's contribution at the last row above this.
    LastContributionAbove(usize, f64),
    /// The feature's contribution at the last row below this.
    LastContributionBelow(usize, f64),
    /// The feature's contribution below this at every row.
    ContributionBelow(usize, f64),
    /// The largest contribution at the last row is one of these features' (positive).
    LastTop(&'static [usize]),
}

/// One anchor history and what its GPUs must show.
pub struct Anchor {
    /// The test that asserts it, and which part.
    pub name: &'static str,
    pub days: i64,
    pub change: Box<NodeChange>,
    /// Per GPU checked, its checks.
    pub checks: Vec<(u32, Vec<Check>)>,
}

/// Feature indices; a name that is not a feature's fails to compile.
const ECC_CORRECTED_DAYS: usize = feature_index("ecc_corrected_days");
const MEMORY_GAP_VS_BASELINE: usize = feature_index("memory_gap_vs_baseline");
const MEMORY_GAP_PERSISTENT: usize = feature_index("memory_gap_persistent");
const MEMORY_TEMPERATURE_GAP: usize = feature_index("memory_temperature_gap");
const TEMPERATURE_VS_PEERS: usize = feature_index("temperature_vs_peers");
const TEMPERATURE_VS_BASELINE: usize = feature_index("temperature_vs_baseline");
const THERMAL_SLOWDOWN_24H: usize = feature_index("thermal_slowdown_24h");
const ECC_CORRECTED_RATE: usize = feature_index("ecc_corrected_rate");
const PCIE_REPLAYS_RATE: usize = feature_index("pcie_replays_rate");

/// The warning threshold the anchor tests assert (the default one).
const WARN: f64 = crate::config::DEFAULT_RISK_THRESHOLD;
const MIN: f64 = 60.0;

/// The anchors every fit is held to: each is a test of crates/agent/src/engine/risk/tests.rs (or one
/// part of it), with the same history and the same bounds.
pub fn anchors() -> Vec<Anchor> {
    let every_gpu = |checks: Vec<Check>| (0..history::GPUS).map(|g| (g, checks.clone())).collect();
    vec![
        Anchor {
            name: "a climb from 0 to 12 corrected errors a day over six days warns a day \
                   ahead and holds",
            days: 9,
            change: Box::new(on_gpu_0(history::ecc_climb)),
            checks: vec![(
                0,
                vec![
                    Check::WarnsHeld {
                        score: WARN,
                        quiet_until: (CLIMB_START + 2 * DAY_MIN) as f64 * MIN,
                        from: (CLIMB_END - DAY_MIN) as f64 * MIN,
                        to: CLIMB_END as f64 * MIN,
                    },
                    Check::LastTop(&[ECC_CORRECTED_DAYS, ECC_CORRECTED_RATE]),
                ],
            )],
        },
        Anchor {
            name: "a noisy climb of corrected errors warns a day ahead and holds",
            days: 9,
            change: Box::new(on_gpu_0(history::ecc_noisy_climb)),
            checks: vec![(
                0,
                vec![Check::WarnsHeld {
                    score: WARN,
                    quiet_until: (CLIMB_START + 2 * DAY_MIN) as f64 * MIN,
                    from: (CLIMB_END - DAY_MIN) as f64 * MIN,
                    to: CLIMB_END as f64 * MIN,
                }],
            )],
        },
        Anchor {
            name: "a link that dies in two days warns a day ahead",
            days: 9,
            change: Box::new(on_gpu_0(history::link_two_day_ramp)),
            checks: vec![(
                0,
                vec![Check::WarnsHeld {
                    score: WARN,
                    quiet_until: RAMP_START as f64 * MIN,
                    from: (8 * DAY_MIN) as f64 * MIN,
                    to: (9 * DAY_MIN) as f64 * MIN,
                }],
            )],
        },
        Anchor {
            name: "power swinging more and more at steady load warns a day ahead",
            days: 9,
            change: Box::new(on_gpu_0(history::power_swings_growing)),
            checks: vec![(
                0,
                vec![Check::WarnsHeld {
                    score: WARN,
                    quiet_until: (4 * DAY_MIN + DAY_MIN / 2) as f64 * MIN,
                    from: (8 * DAY_MIN) as f64 * MIN,
                    to: (9 * DAY_MIN) as f64 * MIN,
                }],
            )],
        },
        Anchor {
            name: "a draw that always swung stays under half",
            days: 9,
            change: Box::new(on_gpu_0(history::power_always_swinging)),
            checks: vec![(0, vec![Check::Below(0.5)])],
        },
        Anchor {
            name: "a handful of corrected errors a day for a few days stays under half",
            days: 9,
            change: Box::new(on_gpu_0(history::ecc_few)),
            checks: vec![(0, vec![Check::Below(0.5)])],
        },
        Anchor {
            name: "an HBM gap 25 degrees over its own baseline warns where HBM runs cooler",
            days: 8,
            change: Box::new(on_gpu_0(history::hbm_gap(25.0))),
            checks: vec![(
                0,
                vec![
                    Check::EndsAtLeast(WARN),
                    Check::LastTop(&[MEMORY_GAP_VS_BASELINE, MEMORY_GAP_PERSISTENT]),
                    Check::LastContributionAbove(MEMORY_GAP_VS_BASELINE, 2.0),
                    Check::LastContributionBelow(MEMORY_TEMPERATURE_GAP, 0.5),
                ],
            )],
        },
        Anchor {
            name: "an HBM gap a few degrees over its baseline is ordinary",
            days: 8,
            change: Box::new(on_gpu_0(history::hbm_gap(6.0))),
            checks: vec![(0, vec![Check::Below(0.1)])],
        },
        Anchor {
            name: "a node-wide temperature rise on all GPUs keeps every GPU under half",
            days: 9,
            change: Box::new(history::node_wide_heat),
            checks: every_gpu(vec![Check::Below(0.5)]),
        },
        Anchor {
            name: "the same heat on one GPU alone stands out",
            days: 9,
            change: Box::new(on_gpu_0(history::heat_alone)),
            checks: vec![(
                0,
                vec![
                    Check::LastContributionAbove(TEMPERATURE_VS_PEERS, 0.5),
                    Check::LastContributionAbove(THERMAL_SLOWDOWN_24H, 2.0),
                ],
            )],
        },
        Anchor {
            name: "a node-wide heat that warms idle GPUs most keeps every GPU under half",
            days: 9,
            change: Box::new(history::idle_warming_heat),
            checks: every_gpu(vec![
                Check::Below(0.5),
                Check::ContributionBelow(TEMPERATURE_VS_BASELINE, 0.5),
            ]),
        },
        Anchor {
            name: "a steady noisy link stays under half",
            days: 14,
            change: Box::new(on_gpu_0(history::steady_noisy_link)),
            checks: vec![(0, vec![Check::Below(0.5)])],
        },
        Anchor {
            name: "an accelerating noisy link warns",
            days: 13,
            change: Box::new(on_gpu_0(history::accelerating_link)),
            checks: vec![(
                0,
                vec![
                    Check::EndsAtLeast(WARN),
                    Check::LastContributionAbove(PCIE_REPLAYS_RATE, 1.0),
                ],
            )],
        },
    ]
}

/// One anchor GPU's rows (every sample: its test looks at every one) and its checks.
#[derive(Debug, Clone)]
pub struct AnchorRows {
    /// The anchor's name and the GPU.
    pub name: String,
    pub times: Vec<f64>,
    pub features: Vec<[f64; N]>,
    pub checks: Vec<Check>,
}

impl AnchorRows {
    /// The rows a search needs: those with any feature (an empty row scores the bias, which
    /// neither warns nor breaks a bound), the last row, and every row from where a warning
    /// check starts looking (an empty row there is a dip).
    pub fn needed(&self) -> impl Iterator<Item = usize> + '_ {
        let from = self
            .checks
            .iter()
            .filter_map(|c| match c {
                Check::WarnsHeld { quiet_until, .. } => Some(*quiet_until),
                _ => None,
            })
            .fold(f64::INFINITY, f64::min);
        let last = self.times.len().saturating_sub(1);
        (0..self.times.len()).filter(move |&r| {
            r == last || self.times[r] >= from || self.features[r].iter().any(|&v| v != 0.0)
        })
    }
}

/// Every anchor GPU's rows, read back through the engine under the probe model as the
/// library's are.
pub fn observe() -> Vec<AnchorRows> {
    let all = anchors();
    let per_anchor = in_parallel(&all, |anchor| {
        let probe = super::probe::probe_model();
        let mut engine = Engine::new(EngineConfig {
            risk_model: probe,
            ..EngineConfig::default()
        });
        let mut out: Vec<AnchorRows> = anchor
            .checks
            .iter()
            .map(|(g, checks)| AnchorRows {
                name: format!("{} (GPU {g})", anchor.name),
                times: Vec::new(),
                features: Vec::new(),
                checks: checks.clone(),
            })
            .collect();
        history::node_history(anchor.days, &*anchor.change, |m, snapshot| {
            let findings = engine.step(snapshot);
            for (k, (g, _)) in anchor.checks.iter().enumerate() {
                if let Some(f) = findings.gpus.iter().find(|f| f.index == *g && f.up) {
                    out[k].times.push(m as f64 * MIN);
                    out[k].features.push(super::probe::features_of(&f.risk));
                }
            }
        });
        out
    });
    per_anchor.into_iter().flatten().collect()
}

/// How far `checks` are from holding over `rows` (indices into `times`, `scores` and
/// `features`, in time order), in log-odds and contribution units; 0 when every check
/// holds with [`SLACK`] to spare. `scores` are log-odds above `bias`, as the search keeps
/// them.
pub(crate) fn shortfall(
    checks: &[Check],
    rows: &[usize],
    times: &[f64],
    scores: &[f64],
    features: &[[f64; N]],
    weights: &[f64; N],
    bias: f64,
) -> f64 {
    let above_bias = |p: f64| (p / (1.0 - p)).ln() - bias;
    let Some(&last) = rows.last() else {
        return 0.0;
    };
    let contribution = |j: usize, r: usize| weights[j] * features[r][j];
    let mut short = 0.0;
    for check in checks {
        short += match *check {
            Check::Below(p) => {
                let peak = rows.iter().map(|&r| scores[r]).fold(f64::MIN, f64::max);
                (peak - (above_bias(p) - SLACK)).max(0.0)
            }
            Check::EndsAtLeast(p) => (above_bias(p) + SLACK - scores[last]).max(0.0),
            Check::WarnsHeld {
                score,
                quiet_until,
                from,
                to,
            } => {
                let warn = above_bias(score);
                let (mut short, mut warned) = (0.0, false);
                for &r in rows.iter().filter(|&&r| times[r] <= to) {
                    let s = scores[r];
                    if times[r] <= quiet_until {
                        short += (s - (warn - SLACK)).max(0.0);
                        continue;
                    }
                    if warned || times[r] >= from {
                        short += (warn + SLACK - s).max(0.0);
                    }
                    // Near the threshold counts as warned: the engine may be over it.
                    warned |= s >= warn - SLACK;
                }
                short
            }
            Check::LastContributionAbove(j, min) => (min + SLACK - contribution(j, last)).max(0.0),
            Check::LastContributionBelow(j, max) => {
                (contribution(j, last) - (max - SLACK)).max(0.0)
            }
            Check::ContributionBelow(j, max) => {
                let peak = rows
                    .iter()
                    .map(|&r| contribution(j, r))
                    .fold(f64::MIN, f64::max);
                (peak - (max - SLACK)).max(0.0)
            }
            Check::LastTop(wanted) => {
                let (mut inside, mut outside) = (0.0f64, 0.0f64);
                for j in 0..N {
                    let c = contribution(j, last);
                    if wanted.contains(&j) {
                        inside = inside.max(c);
                    } else {
                        outside = outside.max(c);
                    }
                }
                (outside + SLACK - inside).max(0.0) + (SLACK - inside).max(0.0)
            }
        };
    }
    short
}

/// An anchor GPU's rows placed among the search's rows, and its checks.
#[derive(Debug, Clone)]
pub struct Constraint {
    pub name: String,
    /// Indices into the search's rows, in time order.
    pub rows: Vec<usize>,
    pub checks: Vec<Check>,
}

/// The family sums of `x` under `weights`, combined as the engine combines them: log-odds
/// above the bias.
pub fn score(weights: &[f64; N], x: &[f64; N]) -> f64 {
    crate::engine::risk::combined(&std::array::from_fn(|j| weights[j] * x[j]))
}

/// The names of the anchor GPUs whose checks `weights` break, from their own rows.
pub fn broken(anchors: &[AnchorRows], weights: &[f64; N], bias: f64) -> Vec<String> {
    anchors
        .iter()
        .filter(|a| {
            let scores: Vec<f64> = a.features.iter().map(|x| score(weights, x)).collect();
            let rows: Vec<usize> = (0..a.times.len()).collect();
            shortfall(
                &a.checks,
                &rows,
                &a.times,
                &scores,
                &a.features,
                weights,
                bias,
            ) > 0.0
        })
        .map(|a| a.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::fit::Fitted;

    /// The shipped model, fitted under the anchors, meets every check here; with the
    /// corrected-error weights cut to 0.15 (what a fit on the library alone chose) the
    /// climb no longer warns a day ahead, and with the node-level heat weights raised the
    /// node-wide heat warns. (The hand-set model the search starts from need not: since
    /// the rate tests read the open hour, its replay-rate weight of 0.5 leaves the
    /// two-day link ramp short of a day's warning, and the fit raises it.)
    #[test]
    fn the_shipped_model_meets_every_anchor_and_a_library_only_fit_breaks_them() {
        let observed = observe();
        let shipped = Fitted::of_model(&crate::engine::risk::RiskModel::shipped());
        assert_eq!(
            broken(&observed, &shipped.weights, shipped.bias),
            Vec::<String>::new()
        );
        let mut weak_memory = shipped.weights;
        for w in &mut weak_memory[..3] {
            *w = 0.15;
        }
        let broken_now = broken(&observed, &weak_memory, shipped.bias);
        assert!(
            broken_now.iter().any(|n| n.starts_with("a climb")),
            "{broken_now:?}"
        );
        let mut hot = shipped.weights;
        hot[TEMPERATURE_VS_BASELINE] = 8.0;
        hot[TEMPERATURE_VS_PEERS] = 8.0;
        let broken_now = broken(&observed, &hot, shipped.bias);
        assert!(
            broken_now.iter().any(|n| n.contains("node-wide")),
            "{broken_now:?}"
        );
    }
}
