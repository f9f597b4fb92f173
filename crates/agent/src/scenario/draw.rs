//! Drawing a library: which GPU fails how, which is a confounder, what happens to nodes.
//!
//! Failing GPUs take their (family, curve, workload) from a shuffled deck of every
//! combination, and nodes their GPU model from a shuffled deck of models, so a modest draw
//! covers every family with every curve and workload and every model; a family a node's
//! model cannot show (NVLink on an L40S, page retirement after Volta, row remapping before
//! Ampere) waits in the deck for a node that can, and the rarest ones are served first.
//! Noise models come from decks of their own: one per family for failing GPUs, one for the
//! healthy ones, so each family shows each noise model.
//!
//! What was added to the library later (noise models, polling intervals, gaps) draws from
//! streams of its own, so the GPUs, families, shapes and node events a seed drew before
//! stay what they were.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::{
    Confounder, DAY, GpuLabel, Library, LibraryOptions, NodeScenario, TruthKind, Variants,
    workload_name,
};
use crate::source::simulate::quirks::{EccBurst, InletEvent};
use crate::source::simulate::{
    Curve, FaultKind, GpuPlan, GpuSpec, LinkMode, NoiseModel, Quirks, SHAPED_BASE, Shape, Sku,
    WorkloadKind, poisson,
};

/// GPUs per node (an HGX baseboard).
pub(crate) const GPUS_PER_NODE: usize = 8;
/// Share of GPU slots that fail, and that are confounders (the rest healthy).
const FAILING_SHARE: f64 = 0.4;
const CONFOUNDER_SHARE: f64 = 0.35;
/// Chances per node of a cooling event and of driver reloads.
const NODE_COOLING: f64 = 0.2;
const NODE_RELOAD: f64 = 0.3;

const WORKLOADS: [WorkloadKind; 4] = [
    WorkloadKind::Training,
    WorkloadKind::Inference,
    WorkloadKind::Bursty,
    WorkloadKind::Unused,
];

/// A failure still to place: family, curve (none for bus drops), workload.
type Card = (FaultKind, Option<Curve>, WorkloadKind);

/// Decks that deal every combination before repeating one.
struct Decks {
    rng: SmallRng,
    failures: Vec<Card>,
    skus: Vec<Sku>,
    rates: Vec<RateClass>,
    confounders: Vec<Confounder>,
    /// Noise models: a stream of their own, a deck per family (in [`FaultKind::EVERY`]'s
    /// order) and one for healthy GPUs.
    noise_rng: SmallRng,
    noise_failing: Vec<Vec<NoiseModel>>,
    noise_healthy: Vec<NoiseModel>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum RateClass {
    Low,
    Medium,
    High,
}

impl RateClass {
    fn name(self) -> &'static str {
        match self {
            RateClass::Low => "low",
            RateClass::Medium => "medium",
            RateClass::High => "high",
        }
    }

    fn range(self) -> std::ops::Range<f64> {
        match self {
            RateClass::Low => 0.25..0.6,
            RateClass::Medium => 0.6..1.6,
            RateClass::High => 1.6..4.0,
        }
    }
}

impl Decks {
    fn refill<T: Copy>(rng: &mut SmallRng, deck: &mut Vec<T>, all: &[T]) {
        if deck.is_empty() {
            deck.extend_from_slice(all);
            deck.shuffle(rng);
        }
    }

    fn sku(&mut self) -> Sku {
        Decks::refill(&mut self.rng, &mut self.skus, &Sku::ALL);
        self.skus.pop().unwrap_or(Sku::H100)
    }

    fn rate(&mut self) -> RateClass {
        let all = [RateClass::Low, RateClass::Medium, RateClass::High];
        Decks::refill(&mut self.rng, &mut self.rates, &all);
        self.rates.pop().unwrap_or(RateClass::Medium)
    }

    /// The next noise model for a GPU failing of `family`, or for a healthy one.
    fn noise(&mut self, family: Option<FaultKind>) -> NoiseModel {
        let deck = match family.and_then(|k| FaultKind::EVERY.iter().position(|&e| e == k)) {
            Some(i) => &mut self.noise_failing[i],
            None => &mut self.noise_healthy,
        };
        Decks::refill(&mut self.noise_rng, deck, &NoiseModel::ALL);
        deck.pop().unwrap_or_default()
    }

    fn confounder(&mut self) -> Confounder {
        Decks::refill(&mut self.rng, &mut self.confounders, &Confounder::PER_GPU);
        self.confounders.pop().unwrap_or(Confounder::EccBurst)
    }

    /// The next failure a GPU of model `sku` can show: half the time a family only this
    /// kind of model shows (if one waits), else the first the model can show.
    fn failure(&mut self, sku: Sku) -> Card {
        if !self.failures.iter().any(|c| sku.spec().supports(c.0)) {
            let mut all = Vec::new();
            for kind in FaultKind::EVERY {
                // As many cards per family: a family without precursors (no curve) has
                // each workload as often as the others have each curve and workload.
                let curves: Vec<Option<Curve>> = if kind.has_precursors() {
                    Curve::ALL.into_iter().map(Some).collect()
                } else {
                    vec![None; Curve::ALL.len()]
                };
                for curve in curves {
                    for workload in WORKLOADS {
                        all.push((kind, curve, workload));
                    }
                }
            }
            all.shuffle(&mut self.rng);
            self.failures.extend(all);
        }
        let models = |kind: FaultKind| Sku::ALL.iter().filter(|s| s.spec().supports(kind)).count();
        let rare_first = self.rng.random_bool(0.5);
        let pick = self
            .failures
            .iter()
            .enumerate()
            .filter(|(_, c)| sku.spec().supports(c.0))
            .min_by_key(|(i, c)| (rare_first && models(c.0) > 1, *i))
            .map(|(i, _)| i)
            .unwrap_or(0);
        self.failures.remove(pick)
    }
}

/// Draws the library `options` describe. The same options give the same library.
pub fn draw(options: LibraryOptions) -> Library {
    let mut decks = Decks {
        rng: SmallRng::seed_from_u64(options.seed ^ 0x5CE7_A810_0000_0001),
        failures: Vec::new(),
        skus: Vec::new(),
        rates: Vec::new(),
        confounders: Vec::new(),
        noise_rng: SmallRng::seed_from_u64(options.seed ^ 0x6E6F_6973_6500_0001),
        noise_failing: vec![Vec::new(); FaultKind::EVERY.len()],
        noise_healthy: Vec::new(),
    };
    let nodes = (0..options.nodes)
        .map(|n| draw_node(&options, n, &mut decks))
        .collect();
    Library { options, nodes }
}

fn draw_node(options: &LibraryOptions, n: usize, decks: &mut Decks) -> NodeScenario {
    let seed = options
        .seed
        .wrapping_add((n as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6E6F_6465_0000_0001);
    let sku = decks.sku();
    let span = options.days.max(0.01) * DAY;
    let cooling = rng.random_bool(NODE_COOLING).then(|| {
        let start = rng.random_range(0.1..0.8) * span;
        (
            start,
            (start + rng.random_range(2.0..10.0) * 3600.0).min(span),
        )
    });
    let driver_reloads: Vec<f64> = if rng.random_bool(NODE_RELOAD) {
        let mut times: Vec<f64> = (0..rng.random_range(1..3))
            .map(|_| rng.random_range(0.1..0.9) * span)
            .collect();
        times.sort_by(f64::total_cmp);
        times
    } else {
        Vec::new()
    };
    let cooling_target = rng.random_range(84.0..90.0);
    let mut gpus = Vec::new();
    let mut labels = Vec::new();
    for _ in 0..GPUS_PER_NODE {
        let roll: f64 = rng.random();
        let (mut gpu, mut label) = if roll < FAILING_SHARE {
            failing(options, sku, decks, &mut rng)
        } else if roll < FAILING_SHARE + CONFOUNDER_SHARE {
            let confounder = match decks.confounder() {
                // MIG exists on the A100 and Hopper only.
                Confounder::Mig if matches!(sku, Sku::V100 | Sku::L40S) => Confounder::HotStable,
                other => other,
            };
            confounded(options, sku, confounder, &mut rng)
        } else {
            let workload = WORKLOADS[rng.random_range(0..WORKLOADS.len())];
            healthy(sku, workload, &mut rng)
        };
        if let Some((start, end)) = cooling {
            gpu.quirks.inlet_events.push(InletEvent {
                start,
                end,
                degrees: cooling_degrees(sku, gpu.plan.workload, cooling_target),
            });
            label.confounders.push(Confounder::NodeCooling);
        }
        if !driver_reloads.is_empty() {
            gpu.quirks
                .counter_resets
                .extend(driver_reloads.iter().copied());
            label.confounders.push(Confounder::DriverReload);
        }
        let noise = decks.noise(gpu.plan.fault);
        gpu.noise = noise;
        label.variants.noise = noise.name().to_string();
        gpus.push(gpu);
        labels.push(label);
    }
    let mut polling = SmallRng::seed_from_u64(seed ^ 0x706F_6C6C_0000_0001);
    let interval_share = polling.random();
    let failures: Vec<f64> = labels.iter().filter_map(|l| l.failure_s).collect();
    let gaps = draw_gaps(span, &failures, &mut polling);
    NodeScenario {
        hostname: format!("scn-node-{:03}", n + 1),
        sku,
        seed,
        gpus,
        labels,
        driver_reloads,
        cooling,
        interval_share,
        gaps,
    }
}

/// Gaps a node's log has per day, on average, and their shortest and longest length
/// (seconds; log-uniform between).
const GAPS_PER_DAY: f64 = 0.25;
const GAP_SECONDS: (f64, f64) = (120.0, 8.0 * 3600.0);
/// A gap keeps this far from every failure of the node, so that a failure's moment is in
/// the log.
const GAP_CLEARANCE: f64 = 3600.0;

/// Gaps in the log of a node run for `span` seconds: no rows from `.0` to `.1`, in order
/// and apart, none near a failure at `failures`.
fn draw_gaps(span: f64, failures: &[f64], rng: &mut SmallRng) -> Vec<(f64, f64)> {
    let mean = GAPS_PER_DAY * span / DAY;
    let count = poisson(mean, rng).min(1000);
    let mut gaps: Vec<(f64, f64)> = (0..count)
        .map(|_| {
            let start = rng.random_range(0.02..0.98) * span;
            let (lo, hi) = GAP_SECONDS;
            let length = rng.random_range(lo.ln()..hi.ln()).exp();
            (start, (start + length).min(span))
        })
        .collect();
    gaps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut kept: Vec<(f64, f64)> = Vec::new();
    for (start, end) in gaps {
        let near = |&f: &f64| f > start - GAP_CLEARANCE && f < end + GAP_CLEARANCE;
        if failures.iter().any(near) || kept.last().is_some_and(|&(_, e)| start <= e) {
            continue;
        }
        kept.push((start, end));
    }
    kept
}

/// Inlet degrees that bring a GPU of model `sku` under its usual `workload` to `target` °C:
/// the coolant of the whole node runs hot, so idle GPUs read as hot as busy ones.
fn cooling_degrees(sku: Sku, workload: WorkloadKind, target: f64) -> f64 {
    let spec = sku.spec();
    let share = match workload {
        WorkloadKind::Training => 0.85,
        WorkloadKind::Inference | WorkloadKind::Bursty => 0.45,
        _ => 0.0,
    };
    let power = spec.idle_power_w + (spec.power_limit_w - spec.idle_power_w) * share;
    // Mid-aisle inlet (24 °C) plus the 10 °C from inlet to heatsink.
    (target - 34.0 - power * spec.degrees_per_watt).max(0.0)
}

fn healthy(sku: Sku, workload: WorkloadKind, rng: &mut SmallRng) -> (GpuSpec, GpuLabel) {
    let plan = GpuPlan {
        hot_aisle: rng.random_bool(0.2),
        background_noise: true,
        ..GpuPlan::healthy(workload)
    };
    let gpu = GpuSpec {
        plan,
        sku,
        shape: None,
        link_mode: LinkMode::Both,
        quirks: Quirks::default(),
        noise: NoiseModel::Poisson,
    };
    let label = GpuLabel {
        kind: TruthKind::Healthy,
        family: None,
        confounders: Vec::new(),
        variants: Variants {
            sku,
            workload: workload_name(workload).to_string(),
            curve: None,
            rate_class: None,
            link_mode: None,
            noise: NoiseModel::Poisson.name().to_string(),
        },
        precursor_start_s: None,
        failure_s: None,
        predictable: false,
        lost_at_failure: false,
    };
    (gpu, label)
}

/// Days from first sign to failure, every family with precursors: log-uniform between.
const RAMP_DAYS: (f64, f64) = (1.0, 10.0);

/// The counted precursor's rate at the failure point, per hour, log-uniform between the
/// two (a rate class takes its third of the range), and its rate at onset before the
/// shape's rate multiplies it (see [`SHAPED_BASE`]); None for families whose precursors are
/// levels or shares (thermal, GSP, power) or none (bus drops).
fn end_rate(kind: FaultKind) -> Option<((f64, f64), f64)> {
    let b = SHAPED_BASE;
    match kind {
        // Corrected ECC: 3 to 500 a day.
        FaultKind::MemoryWear => Some(((3.0 / 24.0, 500.0 / 24.0), b.memory_corrected)),
        FaultKind::PageRetirement => Some(((3.0 / 24.0, 500.0 / 24.0), b.page_corrected)),
        // Rows remapped: 1 to 24 a day.
        FaultKind::RowRemap => Some(((1.0 / 24.0, 1.0), b.rows_remapped)),
        // Replays: 3 to 1,000 an hour (a link that trains down shows a tenth).
        FaultKind::PcieLink => Some(((3.0, 1000.0), b.pcie_replays)),
        // CRC errors of one link: 3 to 1,000 an hour.
        FaultKind::NvLink => Some(((3.0, 1000.0), b.nvlink_errors)),
        FaultKind::Thermal
        | FaultKind::GspFirmware
        | FaultKind::PowerDelivery
        | FaultKind::FellOffBus => None,
    }
}

/// Where in its range a rate class draws: its third of the (log) range.
fn rate_share(rate: RateClass) -> std::ops::Range<f64> {
    match rate {
        RateClass::Low => 0.0..1.0 / 3.0,
        RateClass::Medium => 1.0 / 3.0..2.0 / 3.0,
        RateClass::High => 2.0 / 3.0..1.0,
    }
}

fn failing(
    options: &LibraryOptions,
    sku: Sku,
    decks: &mut Decks,
    rng: &mut SmallRng,
) -> (GpuSpec, GpuLabel) {
    let (kind, curve, workload) = decks.failure(sku);
    let rate = decks.rate();
    let (mut gpu, mut label) = healthy(sku, workload, rng);
    // A baseline of healthy history before the first sign (two days, less in short
    // libraries), and half a day after the last failure.
    let days = options.days.max(0.01);
    let baseline = (0.25 * days).min(2.0);
    let last = (days - 0.5).max(baseline + 0.02).min(days);
    let wanted = if kind.has_precursors() {
        let (lo, hi) = RAMP_DAYS;
        rng.random_range(lo.ln()..hi.ln()).exp()
    } else {
        0.0
    };
    // In a library too short for the span drawn, a share of the room left, so failures
    // still spread over the run.
    let room = last - baseline - 0.01;
    let precursor = if wanted > room {
        rng.random_range(0.3..1.0) * room
    } else {
        wanted
    }
    .max(0.0);
    let first = baseline + precursor;
    let failure_day = if last > first {
        rng.random_range(first..last)
    } else {
        first
    };
    let shape = curve.map(|curve| {
        let counted = end_rate(kind);
        // A counted precursor draws its rate at the failure point; the others a multiplier
        // of the family's base rate.
        let draw = match counted {
            Some(_) => rng.random_range(rate_share(rate)),
            None => rng.random_range(rate.range()),
        };
        // Intensity at failure over intensity at onset: 3 to 60, log-uniform.
        let growth = rng.random_range(3f64.ln()..60f64.ln()).exp();
        let rate = match counted {
            Some(((lo, hi), base)) => lo * (hi / lo).powf(draw) / (base * growth),
            None => draw,
        };
        Shape {
            curve,
            rate,
            growth,
            precursor_days: precursor.max(0.01),
            cluster_hours: rng.random_range(6.0..36.0),
        }
    });
    let link_mode =
        [LinkMode::Replays, LinkMode::TrainDown, LinkMode::Both][rng.random_range(0..3)];
    gpu.plan.fault = Some(kind);
    gpu.plan.horizon_hours = failure_day * 24.0;
    gpu.shape = shape;
    gpu.link_mode = link_mode;
    label.kind = TruthKind::Failing;
    label.family = Some(kind.name().to_string());
    label.variants.curve = curve.map(|c| c.name().to_string());
    label.variants.rate_class = curve.map(|_| rate.name().to_string());
    label.variants.link_mode = (kind == FaultKind::PcieLink).then(|| {
        match link_mode {
            LinkMode::Replays => "replays",
            LinkMode::TrainDown => "train_down",
            LinkMode::Both => "both",
        }
        .to_string()
    });
    label.failure_s = Some(failure_day * DAY);
    label.precursor_start_s = Some((failure_day - precursor) * DAY);
    label.predictable = kind.has_precursors();
    label.lost_at_failure = matches!(
        kind,
        FaultKind::FellOffBus
            | FaultKind::GspFirmware
            | FaultKind::PowerDelivery
            | FaultKind::PcieLink
    );
    (gpu, label)
}

fn confounded(
    options: &LibraryOptions,
    sku: Sku,
    confounder: Confounder,
    rng: &mut SmallRng,
) -> (GpuSpec, GpuLabel) {
    let workload = match confounder {
        Confounder::IdleDays => WorkloadKind::Training,
        _ => WORKLOADS[rng.random_range(0..WORKLOADS.len())],
    };
    let (mut gpu, mut label) = healthy(sku, workload, rng);
    let span = options.days.max(0.01) * DAY;
    let q = &mut gpu.quirks;
    match confounder {
        Confounder::EccBurst => {
            q.ecc_burst = Some(EccBurst {
                at: rng.random_range(0.1..0.6) * span,
                count: rng.random_range(100.0..400.0),
            });
        }
        Confounder::GpuReset => {
            // Some errors first, so that the reset shows as counters going back to zero.
            q.ecc_burst = Some(EccBurst {
                at: rng.random_range(0.05..0.2) * span,
                count: rng.random_range(5.0..40.0),
            });
            q.steady_replays_per_hour = rng.random_range(1.0..5.0);
            q.counter_resets = vec![rng.random_range(0.3..0.9) * span];
        }
        Confounder::OldAggregateErrors => {
            q.old_corrected = rng.random_range(200..5000);
            q.old_uncorrected = rng.random_range(1..6);
        }
        Confounder::HotStable => q.extra_inlet = rng.random_range(8.0..14.0),
        Confounder::NoisyLink => q.steady_replays_per_hour = rng.random_range(80.0..160.0),
        Confounder::IdleDays => {
            let from = rng.random_range(0.1..0.5) * span;
            q.idle = Some((from, (from + rng.random_range(2.0..7.0) * DAY).min(span)));
        }
        Confounder::Mig => q.mig = true,
        Confounder::EccDisabled => q.ecc_disabled = true,
        Confounder::DriverReload | Confounder::NodeCooling => {}
    }
    label.kind = TruthKind::Confounder;
    label.confounders.push(confounder);
    (gpu, label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_same_seed_draws_the_same_library_and_another_seed_another() {
        let a = draw(LibraryOptions::new(7, 6, 30.0));
        let b = draw(LibraryOptions::new(7, 6, 30.0));
        let c = draw(LibraryOptions::new(8, 6, 30.0));
        let gpus = |l: &Library| l.nodes.iter().map(|n| n.gpus.clone()).collect::<Vec<_>>();
        assert_eq!(gpus(&a), gpus(&b));
        assert_eq!(a.truth(), b.truth());
        assert_ne!(gpus(&a), gpus(&c));
    }

    #[test]
    fn a_modest_draw_covers_every_family_with_every_curve_workload_and_model() {
        for seed in [1, 2] {
            let library = draw(LibraryOptions::new(seed, 150, 30.0));
            let mut seen = BTreeSet::new();
            let mut confounders = BTreeSet::new();
            let mut skus = BTreeSet::new();
            for node in &library.nodes {
                skus.insert(node.sku);
                for label in &node.labels {
                    confounders.extend(label.confounders.iter().copied());
                    let Some(family) = &label.family else {
                        continue;
                    };
                    let v = &label.variants;
                    seen.insert(("curve", family.clone(), v.curve.clone()));
                    seen.insert(("workload", family.clone(), Some(v.workload.clone())));
                    seen.insert(("sku", family.clone(), Some(v.sku.name().to_string())));
                    seen.insert(("rate", family.clone(), v.rate_class.clone()));
                }
            }
            assert_eq!(skus.len(), Sku::ALL.len());
            assert_eq!(confounders.len(), Confounder::PER_GPU.len() + 2);
            for kind in FaultKind::EVERY {
                let family = kind.name().to_string();
                let has = |axis, value: Option<&str>| {
                    seen.contains(&(axis, family.clone(), value.map(str::to_string)))
                };
                if kind.has_precursors() {
                    for curve in Curve::ALL {
                        assert!(
                            has("curve", Some(curve.name())),
                            "seed {seed}: {family} {curve:?}"
                        );
                    }
                    for rate in ["low", "medium", "high"] {
                        assert!(has("rate", Some(rate)), "seed {seed}: {family} {rate}");
                    }
                }
                for workload in WORKLOADS {
                    let w = workload_name(workload);
                    assert!(has("workload", Some(w)), "seed {seed}: {family} {w}");
                }
                for sku in Sku::ALL.into_iter().filter(|s| s.spec().supports(kind)) {
                    assert!(
                        has("sku", Some(sku.name())),
                        "seed {seed}: {family} {sku:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn failures_fall_inside_the_run_after_their_precursors_and_a_baseline() {
        for days in [0.02, 0.1, 3.0, 30.0] {
            let library = draw(LibraryOptions::new(3, 20, days));
            for label in library.nodes.iter().flat_map(|n| &n.labels) {
                let (Some(start), Some(fail)) = (label.precursor_start_s, label.failure_s) else {
                    assert_ne!(label.kind, TruthKind::Failing);
                    continue;
                };
                assert!(start >= (0.25 * days).min(2.0) * DAY - 1.0, "{label:?}");
                assert!(start <= fail && fail <= days * DAY, "{label:?}");
            }
        }
    }
}
