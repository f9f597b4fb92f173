//! `gpu-sentinel train`: fits the failure-risk model on labelled history.
//!
//! The history is streamed through the same engine the agent runs, so the features are the
//! ones the agent will compute; one row per GPU per interval (an hour by default) is kept.
//! A row is positive when its GPU fails within the horizon after it. GPUs, not rows, are
//! split into training and test sets — rows of one GPU are nearly copies of each other, and
//! a split by row would grade the model on GPUs it has already seen. The fitted model is
//! measured on the test GPUs next to the model in use (the shipped one), and written in the
//! shipped model's TOML format.

pub mod anchors;
pub(crate) mod ensemble;
pub mod evaluate;
pub mod fit;
pub mod history;
pub mod library;
mod parallel;
pub mod probe;
pub mod search;

use anyhow::Context as _;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::BufReader;
use std::path::PathBuf;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use crate::engine::risk::RiskModel;
use fit::{Fitted, Metrics};
use history::History;

/// What to train on and how.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub history: PathBuf,
    pub out: PathBuf,
    /// A row is positive when its GPU fails within this many seconds after it.
    pub horizon: i64,
    /// Score at which a warning is raised, for the metrics.
    pub threshold: f64,
    /// Share of GPUs held out for testing.
    pub test_share: f64,
    /// Seed of the split.
    pub seed: u64,
    /// Seconds between the rows kept per GPU.
    pub row_every: i64,
    /// L2 penalty of the fit.
    pub alpha: f64,
}

/// Everything a training run found.
#[derive(Debug, Clone)]
pub struct TrainReport {
    pub model: RiskModel,
    pub history: HistorySummary,
    pub fitted: Metrics,
    /// The model in use before (the shipped one), on the same test GPUs.
    pub baseline: Metrics,
    pub threshold: f64,
    pub horizon: i64,
}

#[derive(Debug, Clone, Default)]
pub struct HistorySummary {
    pub snapshots: u64,
    pub skipped: u64,
    pub warnings: Vec<String>,
    pub rows: usize,
    pub gpus: usize,
    pub gpu_days: f64,
    /// Failures by family.
    pub failures: BTreeMap<String, usize>,
    pub(crate) train_gpus: usize,
    pub(crate) test_gpus: usize,
    /// Failures by family among the test GPUs.
    pub(crate) test_failures: BTreeMap<String, usize>,
    /// ROC AUC of the fitted model on its own training rows (against the test AUC, it shows
    /// how much the fit learnt GPUs rather than failures).
    pub(crate) train_auc: Option<f64>,
}

/// Reads the history, fits, measures, and writes the model to `options.out`.
pub fn train(options: &TrainOptions) -> anyhow::Result<TrainReport> {
    let file = std::fs::File::open(&options.history)
        .with_context(|| format!("cannot read history {}", options.history.display()))?;
    let history = History::read(BufReader::new(file), options.row_every)
        .with_context(|| format!("reading {}", options.history.display()))?;
    let mut summary = HistorySummary {
        snapshots: history.snapshots,
        skipped: history.skipped,
        warnings: history.warnings.clone(),
        rows: history.rows.len(),
        gpus: history.gpus.len(),
        gpu_days: history.gpus.iter().map(|g| g.observed_days()).sum(),
        ..HistorySummary::default()
    };
    for g in &history.gpus {
        if let Some((_, family)) = g.failures.first() {
            let family = if family.is_empty() { "unnamed" } else { family };
            *summary.failures.entry(family.to_string()).or_default() += 1;
        }
    }
    let failures: usize = summary.failures.values().sum();
    anyhow::ensure!(
        failures >= 2,
        "{} has {failures} failure label(s); training needs at least two failing GPUs \
         (lines like {{\"failure\": {{\"uuid\": \"GPU-…\", \"at\": \"RFC3339\", \"family\": \"…\"}}}})",
        options.history.display()
    );

    let test = split(&history, options.test_share, options.seed);
    summary.test_gpus = test.iter().filter(|&&t| t).count();
    for (g, record) in history.gpus.iter().enumerate() {
        if let (true, Some((_, family))) = (test[g], record.failures.first()) {
            *summary.test_failures.entry(family.clone()).or_default() += 1;
        }
    }
    summary.train_gpus = history.gpus.len() - summary.test_gpus;
    let (mut x, mut y, mut test_rows) = (Vec::new(), Vec::new(), Vec::new());
    for (r, row) in history.rows.iter().enumerate() {
        if test[row.gpu] {
            test_rows.push(r);
        } else if let Some(label) = history.label(row, options.horizon) {
            x.push(row.x);
            y.push(label);
        }
    }
    let fitted = fit::fit(&x, &y, options.alpha)?;
    let mut scored: Vec<(f64, bool)> = x.iter().map(|r| fitted.score(r)).zip(y).collect();
    summary.train_auc = fit::auc(&mut scored);
    let score_all = |model: &Fitted| -> Vec<f64> {
        test_rows
            .iter()
            .map(|&r| model.score(&history.rows[r].x))
            .collect()
    };
    let measure = |scores: &[f64]| {
        fit::evaluate(
            &history,
            &test_rows,
            scores,
            options.horizon,
            options.threshold,
        )
    };
    let fitted_metrics = measure(&score_all(&fitted));
    let baseline_metrics = measure(&score_all(&Fitted::of_model(&RiskModel::shipped())));
    let model = to_model(&fitted, &summary, &fitted_metrics, options);
    std::fs::write(&options.out, model.to_toml())
        .with_context(|| format!("cannot write {}", options.out.display()))?;
    Ok(TrainReport {
        model,
        history: summary,
        fitted: fitted_metrics,
        baseline: baseline_metrics,
        threshold: options.threshold,
        horizon: options.horizon,
    })
}

/// Which GPUs are held out: `share` of the healthy ones and of each failure family's (at
/// least one where a group has two), so training sees every family the test is graded on —
/// a model never shown a PCIe failure learns that replays mean health.
fn split(history: &History, share: f64, seed: u64) -> Vec<bool> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut test = vec![false; history.gpus.len()];
    let mut groups: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
    for (g, record) in history.gpus.iter().enumerate() {
        let family = record.failures.first().map(|(_, f)| f.as_str());
        groups.entry(family).or_default().push(g);
    }
    for mut group in groups.into_values() {
        group.shuffle(&mut rng);
        let mut n = (group.len() as f64 * share).round() as usize;
        if group.len() >= 2 {
            n = n.clamp(1, group.len() - 1);
        } else {
            n = 0;
        }
        for &g in &group[..n] {
            test[g] = true;
        }
    }
    test
}

fn to_model(
    fitted: &Fitted,
    summary: &HistorySummary,
    metrics: &Metrics,
    options: &TrainOptions,
) -> RiskModel {
    let failures: usize = summary.failures.values().sum();
    let families = summary
        .failures
        .iter()
        .map(|(f, n)| format!("{f} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let source = format!(
        "fitted on {} GPU-days, {failures} failures ({families}) of {} by gpu-sentinel train; \
         horizon {}, test AUC {}",
        summary.gpu_days.round(),
        options.history.display(),
        humantime::format_duration(std::time::Duration::from_secs(options.horizon.max(0) as u64)),
        metrics.auc.map_or("n/a".into(), |a| format!("{a:.3}")),
    );
    fitted.to_model(&source)
}

impl std::fmt::Display for TrainReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.history;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "history: {} snapshots, {} GPUs, {:.0} GPU-days, {} rows; failures: {}",
            h.snapshots,
            h.gpus,
            h.gpu_days,
            h.rows,
            h.failures
                .iter()
                .map(|(f, n)| format!("{f} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if h.skipped > 0 {
            let _ = writeln!(out, "skipped {} lines:", h.skipped);
            for w in &h.warnings {
                let _ = writeln!(out, "  {w}");
            }
        }
        let _ = writeln!(
            out,
            "split by GPU: {} training, {} test (failures: {}); horizon {}, threshold {}",
            h.train_gpus,
            h.test_gpus,
            h.test_failures
                .iter()
                .map(|(f, n)| format!("{f} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            humantime::format_duration(std::time::Duration::from_secs(self.horizon.max(0) as u64)),
            self.threshold
        );
        let _ = writeln!(
            out,
            "{:<9} {:>7} {:>9} {:>7} {:>11} {:>16} {:>12} {:>12}",
            "model",
            "ROC AUC",
            "precision",
            "recall",
            "GPUs warned",
            "false alarms/GPU-day",
            "median lead",
            "min lead"
        );
        for (name, m) in [("fitted", &self.fitted), ("shipped", &self.baseline)] {
            let pct = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{:.3}", v));
            let hours = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.1} h"));
            let _ = writeln!(
                out,
                "{:<9} {:>7} {:>9} {:>7} {:>11} {:>20.4} {:>12} {:>12}",
                name,
                pct(m.auc),
                pct(m.precision),
                pct(m.recall),
                format!("{}/{}", m.warned_gpus, m.failing_gpus),
                m.false_alarms_per_gpu_day(),
                hours(fit::median(&m.lead_hours)),
                hours(m.lead_hours.first().copied()),
            );
        }
        let _ = writeln!(
            out,
            "fitted model on its own training rows: ROC AUC {}",
            h.train_auc.map_or("n/a".into(), |a| format!("{a:.3}"))
        );
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(dir: &std::path::Path) -> TrainOptions {
        TrainOptions {
            history: dir.join("history.jsonl"),
            out: dir.join("model.toml"),
            horizon: 7 * 86_400,
            threshold: crate::config::DEFAULT_RISK_THRESHOLD,
            test_share: 0.3,
            seed: 1,
            row_every: 3600,
            alpha: 1.0,
        }
    }

    #[test]
    fn a_history_without_failures_is_refused_with_the_label_shape() {
        let dir =
            std::env::temp_dir().join(format!("gpu-sentinel-train-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let opts = options(&dir);
        std::fs::write(
            &opts.history,
            r#"{"at":"2026-01-01T00:00:00Z","gpus":[{"index":0,"uuid":"GPU-a","name":"x","up":true}]}"#,
        )
        .unwrap();
        let err = train(&opts).unwrap_err().to_string();
        assert!(
            err.contains("0 failure label") && err.contains(r#"{"failure""#),
            "{err}"
        );
        assert!(!opts.out.exists());
        let missing = train(&TrainOptions {
            history: dir.join("nope.jsonl"),
            ..opts
        })
        .unwrap_err();
        assert!(missing.to_string().contains("cannot read history"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
