//! Fitting and judging the risk model on the scenario library (`gpu-sentinel train
//! --scenarios NODES`), holding out whole variants.
//!
//! A model judged on the shapes it was fitted on says little about failures shaped
//! otherwise. So every figure published comes from a fold that never saw the variant it is
//! judged on: for each variant axis (GPU model, precursor curve, workload, rate class) and
//! each value of it, the model is fitted on the GPUs without that value and judged on the
//! GPUs with it (leave one variant out). The per-family and per-confounder tables come from
//! the GPU-model folds, where every GPU is judged exactly once, by a model fitted without
//! its GPU model.
//!
//! Features are what the engine computes, read back from its findings under a probe model
//! that weighs every feature 1 (each non-zero feature is then a contribution with its
//! value), so training never recomputes them beside the engine. Judging runs the engine
//! again with the fold's model, exactly as the agent would, and follows each GPU's score
//! with a [`Tracker`]: a failure counts as warned `L` ahead only when the warning was held
//! from then to the failure.

use std::collections::BTreeMap;
use std::convert::Infallible;

use crate::engine::risk::{FEATURES, RiskModel};
use crate::engine::{Engine, EngineConfig, Findings};
use crate::scenario::{GpuLabel, Library, NodeScenario, TruthKind};
use crate::source::simulate::Failure;

use super::evaluate::{Columns, Figures, Outcome, Table, Tracker, Truth};
use super::fit::{self, Fitted};

const N: usize = FEATURES.len();
const DAY: f64 = 86_400.0;

/// The variant axes held out, one fold per value.
pub const AXES: [&str; 4] = ["sku", "curve", "workload", "rate_class"];

/// What to fit on and how.
#[derive(Debug, Clone)]
pub struct LibraryOptions {
    pub seed: u64,
    pub nodes: usize,
    pub days: f64,
    /// Seconds between collections of a node.
    pub interval: f64,
    /// Seconds between the training rows kept per GPU.
    pub row_every: f64,
    /// A row is positive when its GPU fails within this many seconds.
    pub horizon: f64,
    /// Score at which a warning is raised.
    pub threshold: f64,
    /// L2 penalty of the fit.
    pub alpha: f64,
    /// Largest share of healthy training GPU-days allowed a row at or above the
    /// threshold, which sets the fitted model's bias (see [`calibrate`]).
    pub false_day_share: f64,
}

/// One GPU of the library.
#[derive(Debug, Clone)]
struct GpuRef {
    node: usize,
    index: u32,
    label: GpuLabel,
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

/// Everything a library run found.
#[derive(Debug, Clone)]
pub struct LibraryReport {
    /// Fitted on every GPU: the model to ship.
    pub model: RiskModel,
    pub gpus: usize,
    pub failing: usize,
    pub rows: usize,
    /// From the GPU-model folds: by failure family, and healthy GPUs by each confounder
    /// they show (a GPU with two counts in both rows) ...
    pub by_family: Table,
    pub by_confounder: Table,
    /// ... and every healthy GPU once.
    pub healthy: Figures,
    /// One row per held-out variant value (`curve=exponential`, …).
    pub by_variant: Table,
    /// The model in use before (the shipped one, set by hand, never fitted on the
    /// library), judged on every GPU: by family, and every healthy GPU once.
    pub shipped_by_family: Table,
    pub shipped_healthy: Figures,
}

/// Runs the library: observes, fits and judges every fold, fits the final model.
pub fn run(library: &Library, options: &LibraryOptions) -> anyhow::Result<LibraryReport> {
    let observed = observe(library, options);
    let failing = observed
        .gpus
        .iter()
        .filter(|g| g.label.kind == TruthKind::Failing)
        .count();
    let mut report = LibraryReport {
        model: RiskModel::shipped(),
        gpus: observed.gpus.len(),
        failing,
        rows: observed.rows.len(),
        by_family: Table::default(),
        by_confounder: Table::default(),
        healthy: Figures::default(),
        by_variant: Table::default(),
        shipped_by_family: Table::default(),
        shipped_healthy: Figures::default(),
    };
    let every: Vec<usize> = (0..observed.gpus.len()).collect();
    for (g, outcome) in judge(library, options, &RiskModel::shipped(), &observed, &every) {
        match &outcome {
            Outcome::Failed { .. } => {
                let family = observed.gpus[g].label.family.as_deref();
                report
                    .shipped_by_family
                    .add(family.unwrap_or("unnamed"), &outcome);
            }
            Outcome::Healthy { .. } => report.shipped_healthy.add(&outcome),
        }
    }
    for axis in AXES {
        let mut values: Vec<String> = observed
            .gpus
            .iter()
            .filter_map(|g| g.label.variants.axis(axis))
            .collect();
        values.sort();
        values.dedup();
        for value in values {
            let held = |g: &GpuRef| g.label.variants.axis(axis).as_deref() == Some(&value);
            let fitted = fit_on(&observed, options, |g| !held(g))?;
            let model = fitted.to_model(&format!("fold without {axis}={value}"));
            let test: Vec<usize> = (0..observed.gpus.len())
                .filter(|&g| held(&observed.gpus[g]))
                .collect();
            for (g, outcome) in judge(library, options, &model, &observed, &test) {
                let label = &observed.gpus[g].label;
                report.by_variant.add(&format!("{axis}={value}"), &outcome);
                if axis == "sku" {
                    match &outcome {
                        Outcome::Failed { .. } => {
                            let family = label.family.as_deref().unwrap_or("unnamed");
                            report.by_family.add(family, &outcome);
                        }
                        Outcome::Healthy { .. } => {
                            for confounder in confounders(label) {
                                report.by_confounder.add(&confounder, &outcome);
                            }
                            report.healthy.add(&outcome);
                        }
                    }
                }
            }
        }
    }
    let fitted = fit_on(&observed, options, |_| true)?;
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

impl LibraryReport {
    /// The three evaluation tables, as Markdown with their headings.
    pub fn tables(&self) -> String {
        format!(
            "{} GPUs ({} failing), {} training rows; every figure from folds that never saw \
             the GPU's variant.\n\n\
             By failure family (GPU-model folds: each GPU judged by a model fitted without \
             its GPU model):\n\n{}\n\
             Healthy GPUs by what they show, a GPU under each thing it shows (GPU-model \
             folds):\n\n{}\n\
             By held-out variant (one fold per value):\n\n{}\n\
             The shipped model (set by hand, not fitted on the library) on every GPU, by \
             failure family:\n\n{}\n\
             and on every healthy GPU:\n\n{}",
            self.gpus,
            self.failing,
            self.rows,
            self.by_family
                .markdown("family", Columns::Failures, Some(&self.by_family.total())),
            self.by_confounder
                .markdown("shows", Columns::Healthy, Some(&self.healthy)),
            // A GPU is in one fold of each axis: a total over all folds would count it four
            // times.
            self.by_variant.markdown("held out", Columns::Both, None),
            self.shipped_by_family.markdown(
                "family",
                Columns::Failures,
                Some(&self.shipped_by_family.total())
            ),
            Table::default().markdown("healthy", Columns::Healthy, Some(&self.shipped_healthy)),
        )
    }
}

/// The confounders a healthy GPU shows (`none` for a plain healthy GPU).
fn confounders(label: &GpuLabel) -> Vec<String> {
    let names: Vec<String> = label
        .confounders
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok()?.as_str().map(str::to_string))
        .collect();
    if names.is_empty() {
        vec!["none".into()]
    } else {
        names
    }
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
    let _ = node.run(start, options.days, options.interval, |step| {
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
    for (n, (node, rows)) in library.nodes.iter().zip(per_node).enumerate() {
        let base = observed.gpus.len();
        for (i, label) in node.labels.iter().enumerate() {
            observed.gpus.push(GpuRef {
                node: n,
                index: i as u32,
                label: label.clone(),
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

/// The label of a row: true when its GPU fails within the horizon after it, its precursors
/// begun. None where the row teaches nothing: at or after the failure, inside the horizon of
/// a failure without precursors, or inside the horizon before the precursors begin.
fn label(gpu: &GpuRef, row: &Row, horizon: f64) -> Option<bool> {
    let Some(failure) = gpu.label.failure_s else {
        return Some(false);
    };
    if row.t >= failure {
        return None;
    }
    if failure - row.t > horizon {
        return Some(false);
    }
    let begun = gpu.label.precursor_start_s.is_some_and(|s| row.t >= s);
    (gpu.label.predictable && begun).then_some(true)
}

/// Fits on the rows of the GPUs `train` keeps, then sets the bias (see [`calibrate`]).
fn fit_on(
    observed: &Observed,
    options: &LibraryOptions,
    train: impl Fn(&GpuRef) -> bool,
) -> anyhow::Result<Fitted> {
    let (mut x, mut y, mut healthy) = (Vec::new(), Vec::new(), Vec::new());
    for row in &observed.rows {
        let gpu = &observed.gpus[row.gpu];
        if !train(gpu) {
            continue;
        }
        if let Some(l) = label(gpu, row, options.horizon) {
            x.push(row.x);
            y.push(l);
        }
        if gpu.label.kind != TruthKind::Failing {
            healthy.push(row);
        }
    }
    let mut fitted = fit::fit(&x, &y, options.alpha)?;
    fitted.bias = calibrate(&fitted, &healthy, options);
    Ok(fitted)
}

/// The bias that warns as early as the healthy training GPUs allow: the largest one (the
/// most sensitive model) under which at most `false_day_share` of their GPU-days hold a
/// row at or above the threshold. A logistic fit is calibrated to how rare failures are in
/// the rows, which says nothing about where an operator wants the warning; the healthy
/// GPUs' days say how often a bias would page someone for nothing.
fn calibrate(fitted: &Fitted, healthy: &[&Row], options: &LibraryOptions) -> f64 {
    // The highest logit (without bias) of each healthy GPU-day.
    let mut days: BTreeMap<(usize, i64), f64> = BTreeMap::new();
    for row in healthy {
        let logit: f64 = fitted.weights.iter().zip(&row.x).map(|(w, v)| w * v).sum();
        let day = days
            .entry((row.gpu, (row.t / DAY) as i64))
            .or_insert(f64::NEG_INFINITY);
        *day = day.max(logit);
    }
    let mut peaks: Vec<f64> = days.into_values().collect();
    if peaks.is_empty() {
        return fitted.bias;
    }
    peaks.sort_by(|a, b| b.total_cmp(a));
    let allowed = (peaks.len() as f64 * options.false_day_share).floor() as usize;
    // Warned when bias + logit ≥ ln(t / (1 − t)); keep the (allowed+1)-th highest day just
    // under it.
    let threshold_logit = (options.threshold / (1.0 - options.threshold)).ln();
    let peak = peaks[allowed.min(peaks.len() - 1)];
    threshold_logit - peak - 1e-6
}

/// Runs the nodes holding a `test` GPU with `model` and says how each test GPU did.
fn judge(
    library: &Library,
    options: &LibraryOptions,
    model: &RiskModel,
    observed: &Observed,
    test: &[usize],
) -> Vec<(usize, Outcome)> {
    let mut by_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &g in test {
        by_node.entry(observed.gpus[g].node).or_default().push(g);
    }
    let nodes: Vec<(usize, Vec<usize>)> = by_node.into_iter().collect();
    let judged = in_parallel(&nodes, |(n, gpus)| {
        let node = &library.nodes[*n];
        let mut trackers: Vec<Tracker> = vec![Tracker::new(options.threshold); node.labels.len()];
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
                if let Some(tracker) = trackers.get_mut(f.index as usize) {
                    tracker.step(t, f.risk.score);
                }
            }
        });
        gpus.iter()
            .map(|&g| {
                let gpu = &observed.gpus[g];
                let tracker = &trackers[gpu.index as usize];
                (g, tracker.finish(&truth(&gpu.label)))
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

/// `work` over `items` on the machine's cores, results in item order.
fn in_parallel<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, items.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let done = std::sync::Mutex::new(&mut results);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(item) = items.get(i) else {
                        break;
                    };
                    let r = work(item);
                    if let Ok(mut results) = done.lock() {
                        results[i] = Some(r);
                    }
                }
            });
        }
    });
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Variants;
    use crate::source::simulate::Sku;

    fn gpu(
        kind: TruthKind,
        precursor: Option<f64>,
        failure: Option<f64>,
        predictable: bool,
    ) -> GpuRef {
        GpuRef {
            node: 0,
            index: 0,
            label: GpuLabel {
                kind,
                family: None,
                confounders: Vec::new(),
                variants: Variants {
                    sku: Sku::H100,
                    workload: "training".into(),
                    curve: None,
                    rate_class: None,
                    link_mode: None,
                },
                precursor_start_s: precursor,
                failure_s: failure,
                predictable,
                lost_at_failure: false,
            },
        }
    }

    fn row(t_days: f64) -> Row {
        Row {
            gpu: 0,
            t: t_days * DAY,
            x: [0.0; N],
        }
    }

    #[test]
    fn rows_are_positive_only_inside_the_horizon_once_precursors_began() {
        let horizon = 3.0 * DAY;
        let failing = gpu(TruthKind::Failing, Some(8.0 * DAY), Some(10.0 * DAY), true);
        assert_eq!(label(&failing, &row(5.0), horizon), Some(false));
        // Inside the horizon, before the precursors: nothing to learn either way.
        assert_eq!(label(&failing, &row(7.5), horizon), None);
        assert_eq!(label(&failing, &row(9.0), horizon), Some(true));
        assert_eq!(label(&failing, &row(10.0), horizon), None);
        let drop = gpu(TruthKind::Failing, None, Some(10.0 * DAY), false);
        assert_eq!(label(&drop, &row(9.0), horizon), None);
        assert_eq!(label(&drop, &row(2.0), horizon), Some(false));
        let healthy = gpu(TruthKind::Healthy, None, None, false);
        assert_eq!(label(&healthy, &row(9.0), horizon), Some(false));
    }

    #[test]
    fn the_bias_keeps_all_but_the_allowed_healthy_days_under_the_threshold() {
        let mut weights = [0.0; N];
        weights[0] = 1.0;
        let fitted = Fitted {
            bias: -10.0,
            weights,
            constant: [false; N],
        };
        // 1,000 healthy GPU-days, one row each, the day's feature value rising 0.001 a day.
        let rows: Vec<Row> = (0..1000)
            .map(|d| {
                let mut x = [0.0; N];
                x[0] = f64::from(d) / 1000.0;
                Row {
                    gpu: 0,
                    t: f64::from(d) * DAY,
                    x,
                }
            })
            .collect();
        let healthy: Vec<&Row> = rows.iter().collect();
        let options = LibraryOptions {
            seed: 1,
            nodes: 1,
            days: 1.0,
            interval: 600.0,
            row_every: 3600.0,
            horizon: 3.0 * DAY,
            threshold: 0.7,
            alpha: 1.0,
            false_day_share: 0.005,
        };
        let bias = calibrate(&fitted, &healthy, &options);
        let warned = |r: &Row| {
            let score = 1.0 / (1.0 + (-(bias + r.x[0])).exp());
            score >= 0.7
        };
        // Five days of 1,000 may warn; the sixth highest may not.
        assert_eq!(rows.iter().filter(|r| warned(r)).count(), 5);
    }
}
