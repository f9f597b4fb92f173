//! Fitting and judging the risk model on the scenario library (`gpu-sentinel train
//! --scenarios NODES`), holding out whole variants.
//!
//! A model judged on the shapes it was fitted on says little about failures shaped
//! otherwise. So every figure published comes from a fold that never saw the variant it is
//! judged on: for each variant axis (GPU model, precursor curve, workload, rate class, noise
//! model of the error counts) and
//! each value of it, the model is fitted on the GPUs without that value and judged on the
//! GPUs with it (leave one variant out). The per-family and per-confounder tables judge
//! every GPU exactly once, holding out whole noise models and curve families: a failure by
//! a model fitted without its noise model and without its precursor curve (one fold per
//! pair), a healthy GPU by a model fitted without its noise model.
//!
//! Features are what the engine computes, read back from its findings under a probe model
//! that weighs every feature 1 (each non-zero feature is then a contribution with its
//! value), so training never recomputes them beside the engine. Judging runs the engine
//! again with the fold's model, exactly as the agent would, and follows each GPU's score
//! with a [`Tracker`]: a failure counts as warned `L` ahead only when the warning was held
//! from then to the failure.
//!
//! Every fit, the folds' and the final one, is held to the operators' anchors
//! ([`super::anchors`]): their histories are run once under the probe model beside the
//! library, and the search may not choose weights that break them. The final model is
//! checked against them once more before it is returned.

use std::collections::BTreeMap;
use std::convert::Infallible;

use anyhow::Context;

use crate::engine::risk::{FEATURES, RiskModel};
use crate::engine::{Engine, EngineConfig, Findings};
use crate::scenario::{GpuLabel, Library, NodeScenario, Polling, TruthKind};
use crate::source::simulate::Failure;

#[cfg(test)]
mod feature_table_tests;
mod report;
mod trace;
use report::{Crossing, SHIPPED};
pub use report::{LibraryReport, SHOWS};
use trace::Trace;

use super::anchors::{self, AnchorRows, Constraint};
use super::ensemble;
use super::evaluate::{Outcome, Tracker, Truth};
use super::fit::Fitted;
use super::parallel::in_parallel;
use super::search::{Rows, SearchOptions, Track};

const N: usize = FEATURES.len();

/// The hand-set weights every search starts from (and its bias, which the search keeps).
pub(crate) const HAND_SET: &str = include_str!("../../../../models/hand-set-risk.toml");

/// The hand-set model: fixed, so a fit does not depend on which model was shipped last
/// (never the shipped one in its place: a file that does not parse is an error).
pub(crate) fn hand_set() -> anyhow::Result<RiskModel> {
    RiskModel::parse(HAND_SET).context("models/hand-set-risk.toml, the weights a fit starts from")
}

/// The variant axes held out, one fold per value: a noise-model fold leaves out every GPU,
/// failing or healthy, whose counts arrive by that model.
pub(crate) const AXES: [&str; 5] = ["sku", "curve", "workload", "rate_class", "noise"];

/// What to fit on and how.
#[derive(Debug, Clone)]
pub struct LibraryOptions {
    pub seed: u64,
    pub nodes: usize,
    pub days: f64,
    /// Seconds between collections of a node: each node at its own interval from
    /// `shortest_interval` to `interval` (see [`crate::scenario::Polling`]).
    pub interval: f64,
    pub shortest_interval: f64,
    /// Seconds between the training rows kept per GPU.
    pub row_every: f64,
    /// Score at which a warning is raised.
    pub threshold: f64,
    /// False warnings the search allows per 1,000 healthy training GPU-days.
    pub false_per_1000_days: f64,
    /// GPUs to follow hour by hour (node from 1, GPU index, as the tables list them).
    pub trace: Vec<(usize, u32)>,
}

/// One GPU of the library.
#[derive(Debug, Clone)]
struct GpuRef {
    node: usize,
    index: u32,
    label: GpuLabel,
    /// A failure whose precursor shows something to warn on a day before it
    /// ([`NodeScenario::shows_a_day_ahead`]).
    shows_a_day_ahead: bool,
}

/// A GPU's features at one moment.
#[derive(Debug, Clone)]
struct Row {
    gpu: usize,
    t: f64,
    x: [f64; N],
}

/// What the library gave: every GPU and its rows.
struct Observed {
    gpus: Vec<GpuRef>,
    rows: Vec<Row>,
}

/// Runs the library: observes, fits and judges every fold, fits the final model.
pub fn run(library: &Library, options: &LibraryOptions) -> anyhow::Result<LibraryReport> {
    for &(node, gpu) in &options.trace {
        let gpus = node
            .checked_sub(1)
            .and_then(|n| library.nodes.get(n))
            .map(|n| n.labels.len());
        anyhow::ensure!(
            gpus.is_some_and(|g| (gpu as usize) < g),
            "--trace {node}:{gpu}: the library has nodes 1 to {}{}",
            library.nodes.len(),
            gpus.map_or(String::new(), |g| format!(
                " and node {node} GPUs 0 to {}",
                g.saturating_sub(1)
            ))
        );
    }
    let observed = observe(library, options);
    let anchors = anchors::observe();
    let failing = observed
        .gpus
        .iter()
        .filter(|g| g.label.kind == TruthKind::Failing)
        .count();
    let mut report = LibraryReport::new(
        observed.gpus.len(),
        failing,
        observed.rows.len(),
        anchors.len(),
    );
    let every: Vec<usize> = (0..observed.gpus.len()).collect();
    for (g, outcome, crossing, trace) in
        judge(library, options, &RiskModel::shipped(), &observed, &every)
    {
        report.add_shipped(&observed.gpus[g], &outcome, crossing.as_ref());
        report.add_trace(&observed.gpus[g], SHIPPED, trace);
    }
    // The noise folds' models, for a noise × curve fold whose training GPUs hold no failure
    // (a small library): it is judged without the noise model at least.
    let mut without_noise: BTreeMap<String, RiskModel> = BTreeMap::new();
    for axis in AXES {
        for value in values_of(&observed, axis) {
            let held = |g: &GpuRef| g.label.variants.axis(axis).as_deref() == Some(&value);
            let fitted = fit_on(&observed, &anchors, options, |g| !held(g))?;
            let model = fitted.to_model(&format!("fold without {axis}={value}"));
            if axis == "noise" {
                without_noise.insert(value.clone(), model.clone());
            }
            let test: Vec<usize> = (0..observed.gpus.len())
                .filter(|&g| held(&observed.gpus[g]))
                .collect();
            let fold = format!("{axis}={value}");
            for (g, outcome, crossing, trace) in judge(library, options, &model, &observed, &test) {
                report.by_variant.add(&fold, &outcome);
                // The noise folds judge the headline's healthy GPUs (and failures without a
                // curve, the bus drops): a model that saw no GPU whose counts arrive so.
                if axis == "noise" && !judged_without_its_curve(&observed.gpus[g]) {
                    report.add_headline(&observed.gpus[g], &outcome, &fold, crossing.as_ref());
                    report.add_trace(&observed.gpus[g], &format!("fold {fold}"), trace);
                }
            }
        }
    }
    // The headline's failures: each judged once, by a model fitted without its noise model
    // and without its precursor curve (neither the way its counts arrive nor the shape of
    // its climb was seen in training).
    for noise in values_of(&observed, "noise") {
        for curve in values_of(&observed, "curve") {
            let is = |g: &GpuRef, axis: &str, value: &str| {
                g.label.variants.axis(axis).as_deref() == Some(value)
            };
            let test: Vec<usize> = (0..observed.gpus.len())
                .filter(|&g| {
                    let gpu = &observed.gpus[g];
                    judged_without_its_curve(gpu)
                        && is(gpu, "noise", &noise)
                        && is(gpu, "curve", &curve)
                })
                .collect();
            let train = |g: &GpuRef| !is(g, "noise", &noise) && !is(g, "curve", &curve);
            let fits = observed
                .gpus
                .iter()
                .any(|g| train(g) && g.label.kind == TruthKind::Failing && g.label.predictable);
            let model = match without_noise.get(&noise) {
                _ if test.is_empty() => continue,
                Some(model) if !fits => model.clone(),
                _ => fit_on(&observed, &anchors, options, train)?
                    .to_model(&format!("fold without noise={noise}, curve={curve}")),
            };
            let fold = format!("noise={noise}, curve={curve}");
            for (g, outcome, crossing, trace) in judge(library, options, &model, &observed, &test) {
                report.add_headline(&observed.gpus[g], &outcome, &fold, crossing.as_ref());
                report.add_trace(&observed.gpus[g], &format!("fold {fold}"), trace);
            }
        }
    }
    let fitted = fit_on(&observed, &anchors, options, |_| true)?;
    report.model = fitted.to_model(&format!(
        "fitted by `gpu-sentinel train --scenarios {} --seed {} --days {}` on {} GPUs \
             ({failing} failing)",
        options.nodes,
        options.seed,
        options.days,
        observed.gpus.len()
    ));
    Ok(report)
}

/// Whether the headline judges `gpu` by a noise × curve fold (a failure with a precursor
/// curve) rather than by its noise fold (a healthy GPU, a bus drop): one test for both
/// loops, so that every GPU is judged, and traced, exactly once.
fn judged_without_its_curve(gpu: &GpuRef) -> bool {
    gpu.label.kind == TruthKind::Failing && gpu.label.variants.curve.is_some()
}

/// The values an axis takes in the library, sorted, each once.
fn values_of(observed: &Observed, axis: &str) -> Vec<String> {
    let mut values: Vec<String> = observed
        .gpus
        .iter()
        .filter_map(|g| g.label.variants.axis(axis))
        .collect();
    values.sort();
    values.dedup();
    values
}

/// Steps `node` through the library's days with `model`, handing each step's time
/// (seconds from the start), findings and failures to `each`.
fn step_node(
    library: &Library,
    options: &LibraryOptions,
    node: &NodeScenario,
    model: &RiskModel,
    mut each: impl FnMut(f64, &Findings, &[Failure]),
) {
    let start = library.options.start;
    let mut engine = Engine::new(EngineConfig {
        risk_model: model.clone(),
        risk_threshold: options.threshold,
        ..EngineConfig::default()
    });
    let polling = Polling::between(options.shortest_interval, options.interval);
    let _ = node.run(start, options.days, polling, |step| {
        let t = (step.snapshot.at - start).num_milliseconds() as f64 / 1000.0;
        let findings = engine.step(step.snapshot);
        each(t, &findings, step.failures);
        Ok::<(), Infallible>(())
    });
}

/// Every GPU of the library and its rows of features, one engine pass.
fn observe(library: &Library, options: &LibraryOptions) -> Observed {
    let probe = super::probe::probe_model();
    let per_node = in_parallel(&library.nodes, |node| {
        let mut rows = Vec::new();
        let mut last = vec![f64::NEG_INFINITY; node.labels.len()];
        step_node(library, options, node, &probe, |t, findings, _| {
            for f in findings.gpus.iter().filter(|f| f.up) {
                let i = f.index as usize;
                if i < last.len() && t - last[i] >= options.row_every {
                    last[i] = t;
                    rows.push((i, t, super::probe::features_of(&f.risk)));
                }
            }
        });
        rows
    });
    let mut observed = Observed {
        gpus: Vec::new(),
        rows: Vec::new(),
    };
    let polling = Polling::between(options.shortest_interval, options.interval);
    for (n, (node, rows)) in library.nodes.iter().zip(per_node).enumerate() {
        let base = observed.gpus.len();
        let interval = node.interval(polling);
        for (i, label) in node.labels.iter().enumerate() {
            observed.gpus.push(GpuRef {
                node: n,
                index: i as u32,
                label: label.clone(),
                shows_a_day_ahead: node.shows_a_day_ahead(i, interval),
            });
        }
        observed.rows.extend(rows.into_iter().map(|(i, t, x)| Row {
            gpu: base + i,
            t,
            x,
        }));
    }
    observed
}

/// Fits on the rows of the GPUs `train` keeps by bagged direct search ([`ensemble`]): the weights
/// that warn the most of their failures a day ahead, held, within the false-warning budget
/// on their healthy GPUs, from the hand-set weights and at their bias ([`hand_set`]), within
/// the anchors.
fn fit_on(
    observed: &Observed,
    anchors: &[AnchorRows],
    options: &LibraryOptions,
    train: impl Fn(&GpuRef) -> bool,
) -> anyhow::Result<Fitted> {
    let mut tracks: Vec<Option<Track>> = vec![None; observed.gpus.len()];
    for (g, gpu) in observed.gpus.iter().enumerate() {
        if !train(gpu) {
            continue;
        }
        let failure = match (gpu.label.kind, gpu.label.failure_s) {
            (TruthKind::Failing, Some(at)) if gpu.label.predictable => Some(at),
            // A failure without precursors teaches nothing either way. (One whose precursor
            // shows nothing a day ahead stays: it may still be warned half a day ahead, and
            // leaving those out of the fit warned one failure fewer a day ahead on the
            // seed-1 library, docs/detection.md.)
            (TruthKind::Failing, _) => continue,
            _ => None,
        };
        tracks[g] = Some(Track {
            rows: Vec::new(),
            failure,
        });
    }
    let (mut times, mut features) = (Vec::new(), Vec::new());
    for row in &observed.rows {
        if let Some(track) = &mut tracks[row.gpu] {
            track.rows.push(times.len());
            times.push(row.t);
            features.push(row.x);
        }
    }
    let tracks: Vec<Track> = tracks.into_iter().flatten().collect();
    let mut constraints = Vec::with_capacity(anchors.len());
    for anchor in anchors {
        let mut rows = Vec::new();
        for r in anchor.needed() {
            rows.push(times.len());
            times.push(anchor.times[r]);
            features.push(anchor.features[r]);
        }
        constraints.push(Constraint {
            name: anchor.name.clone(),
            rows,
            checks: anchor.checks.clone(),
        });
    }
    anyhow::ensure!(
        tracks.iter().any(|t| t.failure.is_some()) && tracks.iter().any(|t| t.failure.is_none()),
        "the training GPUs need both failures with precursors and healthy GPUs"
    );
    let shipped = Fitted::of_model(&hand_set()?);
    let fitted = ensemble::bagged(
        &Rows {
            times: &times,
            features: &features,
        },
        &tracks,
        &constraints,
        &shipped.weights,
        &SearchOptions {
            bias: shipped.bias,
            threshold: options.threshold,
            row_every: options.row_every,
            false_per_1000_days: options.false_per_1000_days,
        },
        ensemble::BAGS,
        options.seed,
    );
    // Checked on every row of the anchors, not only the rows the search kept.
    let broken = anchors::broken(anchors, &fitted.weights, fitted.bias);
    anyhow::ensure!(
        broken.is_empty(),
        "no weights the search reached meet every operators' anchor; broken: {}",
        broken.join("; ")
    );
    Ok(fitted)
}

/// Runs the nodes holding a `test` GPU with `model` and says how each test GPU did, with
/// what drove a healthy GPU's score at its first false warning.
fn judge(
    library: &Library,
    options: &LibraryOptions,
    model: &RiskModel,
    observed: &Observed,
    test: &[usize],
) -> Vec<(usize, Outcome, Option<Crossing>, Vec<String>)> {
    let mut by_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &g in test {
        by_node.entry(observed.gpus[g].node).or_default().push(g);
    }
    let nodes: Vec<(usize, Vec<usize>)> = by_node.into_iter().collect();
    let judged = in_parallel(&nodes, |(n, gpus)| {
        let node = &library.nodes[*n];
        let mut trackers: Vec<Tracker> = vec![Tracker::new(options.threshold); node.labels.len()];
        let mut first: Vec<Option<Crossing>> = vec![None; node.labels.len()];
        // Traced GPUs only (`--trace`, nodes numbered from 1): every other GPU's stays None.
        let mut traces: Vec<Option<Trace>> = (0..node.labels.len())
            .map(|i| {
                let traced = options.trace.contains(&(*n + 1, i as u32));
                traced.then(Trace::default)
            })
            .collect();
        let healthy: Vec<bool> = node
            .labels
            .iter()
            .map(|l| truth(l) == Truth::Healthy)
            .collect();
        let uuids: Vec<String> = {
            let fleet = node.fleet(library.options.start);
            (0..node.labels.len())
                .map(|i| fleet.gpu(i).map(|g| g.uuid.clone()).unwrap_or_default())
                .collect()
        };
        step_node(library, options, node, model, |t, findings, failures| {
            // A failure ends its GPU's run before this step's score (a lost GPU's rule
            // score is no warning).
            for failure in failures {
                if let Some(i) = uuids.iter().position(|u| *u == failure.uuid) {
                    trackers[i].fail(t);
                }
            }
            for f in findings.gpus.iter().filter(|f| f.up) {
                let i = f.index as usize;
                if let Some(Some(trace)) = traces.get_mut(i) {
                    trace.step(t, node.labels[i].failure_s, &f.risk);
                }
                if let Some(tracker) = trackers.get_mut(i)
                    && tracker.step(t, f.risk.score)
                    && healthy[i]
                {
                    match &mut first[i] {
                        Some(first) => first.later.push(t),
                        none => *none = Some(Crossing::of(t, &f.risk)),
                    }
                }
            }
        });
        gpus.iter()
            .map(|&g| {
                let gpu = &observed.gpus[g];
                let i = gpu.index as usize;
                let trace = traces[i].take().map(|t| t.lines).unwrap_or_default();
                (
                    g,
                    trackers[i].finish(&truth(&gpu.label)),
                    first[i].take(),
                    trace,
                )
            })
            .collect::<Vec<_>>()
    });
    judged.into_iter().flatten().collect()
}

fn truth(label: &GpuLabel) -> Truth {
    match (label.kind, label.failure_s) {
        (TruthKind::Failing, Some(_)) => Truth::Fails {
            predictable: label.predictable,
        },
        _ => Truth::Healthy,
    }
}
