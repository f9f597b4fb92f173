//! Fitting the logistic model with linfa-logistic, and measuring a model on held-out GPUs.
//!
//! Two facts shape the fit. Failures are rare, and linfa-logistic treats the *more
//! frequent* label as its positive class (`labels().pos`), so its probabilities would be
//! P(healthy): the sign of the fitted parameters is set from `labels()`, never assumed.
//! And a calibrated P(fails within the horizon) would almost never reach a warning level
//! when failures are rare, so positive rows are repeated until the classes are balanced:
//! the score is then the odds as if failures were as common as health — a warning and
//! ranking score, which is what the default threshold
//! ([`crate::config::DEFAULT_RISK_THRESHOLD`]) means for the shipped model too.

use anyhow::Context as _;
use std::collections::BTreeSet;

use linfa::Dataset;
use linfa::traits::Fit;
use linfa_logistic::LogisticRegression;
use ndarray::{Array1, Array2};

use super::history::History;
use crate::engine::risk::{FEATURES, RiskModel, Weight, combined};

const N: usize = FEATURES.len();

/// A logistic model in the features' own units.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub bias: f64,
    pub weights: [f64; N],
    /// Features that never varied in the training rows: weight 0, nothing learnt.
    pub constant: [bool; N],
}

impl Fitted {
    /// The score of one row as the engine combines its terms (rules aside: they need more
    /// than features).
    pub fn score(&self, x: &[f64; N]) -> f64 {
        let terms: [f64; N] = std::array::from_fn(|j| self.weights[j] * x[j]);
        let logit = self.bias + combined(&terms);
        1.0 / (1.0 + (-logit).exp())
    }

    /// The model in the shipped model's format, every weight's reason naming `source`.
    pub(crate) fn to_model(&self, source: &str) -> RiskModel {
        RiskModel {
            description: format!("Risk model {source}."),
            bias: self.bias,
            weights: FEATURES
                .iter()
                .zip(self.weights.iter().zip(&self.constant))
                .map(|((name, _), (&weight, &constant))| Weight {
                    feature: (*name).to_string(),
                    weight,
                    reason: if constant {
                        format!("{source}; this feature never varied there, so nothing was learnt")
                    } else {
                        source.to_string()
                    },
                })
                .collect(),
        }
    }

    /// A stored model as a [`Fitted`], for measuring it the same way.
    pub(crate) fn of_model(model: &RiskModel) -> Fitted {
        let mut weights = [0.0; N];
        for w in &model.weights {
            if let Some(i) = FEATURES.iter().position(|(name, _)| *name == w.feature) {
                weights[i] = w.weight;
            }
        }
        Fitted {
            bias: model.bias,
            weights,
            constant: [false; N],
        }
    }
}

/// Fits on rows `x` with labels `y` (true: fails within the horizon), L2 penalty `alpha`.
pub fn fit(x: &[[f64; N]], y: &[bool], alpha: f64) -> anyhow::Result<Fitted> {
    let positives = y.iter().filter(|&&l| l).count();
    let negatives = y.len() - positives;
    anyhow::ensure!(
        positives > 0 && negatives > 0,
        "the training rows need both labels: {positives} before a failure, {negatives} not"
    );
    // Standardise each feature (the solver converges on comparable scales); a feature that
    // never varies carries no information and is left out.
    let mut mean = [0.0; N];
    let mut sd = [0.0; N];
    for j in 0..N {
        let n = x.len() as f64;
        mean[j] = x.iter().map(|r| r[j]).sum::<f64>() / n;
        sd[j] = (x.iter().map(|r| (r[j] - mean[j]).powi(2)).sum::<f64>() / n).sqrt();
    }
    let active: Vec<usize> = (0..N).filter(|&j| sd[j] > 1e-9).collect();
    anyhow::ensure!(!active.is_empty(), "no feature varies in the training rows");
    let repeat = (negatives / positives).max(1);
    let total = negatives + positives * repeat;
    let mut records = Array2::<f64>::zeros((total, active.len()));
    let mut targets = Array1::<bool>::from_elem(total, false);
    let mut r = 0;
    for (row, &label) in x.iter().zip(y) {
        for _ in 0..if label { repeat } else { 1 } {
            for (k, &j) in active.iter().enumerate() {
                records[[r, k]] = (row[j] - mean[j]) / sd[j];
            }
            targets[r] = label;
            r += 1;
        }
    }
    let model = LogisticRegression::default()
        .alpha(alpha)
        .max_iterations(500)
        .fit(&Dataset::new(records, targets))
        .context("logistic regression failed")?;
    // linfa-logistic's positive class is the more frequent label (or, balanced, the first
    // one it met): its parameters give the log-odds of `labels().pos`. Flip them when that
    // is "healthy", so the model always scores failing.
    let sign = if model.labels().pos.class { 1.0 } else { -1.0 };
    let mut weights = [0.0; N];
    let mut constant = [true; N];
    let mut bias = sign * model.intercept();
    for (k, &j) in active.iter().enumerate() {
        let w = sign * model.params()[k];
        constant[j] = false;
        // Every feature is evidence of trouble, which the engine holds as a decaying
        // maximum of weight × value: that stands for the feature's own held value only
        // for a positive weight. A negative one (a feature that came with health in these
        // rows) would be an excuse, not evidence; the feature is dropped, its term with it.
        if w < 0.0 {
            continue;
        }
        weights[j] = w / sd[j];
        bias -= w * mean[j] / sd[j];
    }
    anyhow::ensure!(
        bias.is_finite() && weights.iter().all(|w| w.is_finite()),
        "the fit did not converge to finite weights"
    );
    Ok(Fitted {
        bias,
        weights,
        constant,
    })
}

/// How a model does on a set of rows, at a threshold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metrics {
    pub rows: usize,
    pub(crate) positive_rows: usize,
    /// Area under the ROC curve over rows; None when one label is missing.
    pub auc: Option<f64>,
    /// Of the rows at or above the threshold, the share that preceded a failure.
    pub precision: Option<f64>,
    /// Of the rows that preceded a failure, the share at or above the threshold.
    pub recall: Option<f64>,
    pub gpus: usize,
    pub(crate) failing_gpus: usize,
    /// Failing GPUs with a warning within the horizon before their failure.
    pub(crate) warned_gpus: usize,
    /// GPU-days with a warning that no failure followed within the horizon.
    pub(crate) false_alarm_days: usize,
    pub gpu_days: f64,
    /// Hours from the first warning within the horizon to the failure, per warned GPU.
    pub lead_hours: Vec<f64>,
}

impl Metrics {
    pub(crate) fn false_alarms_per_gpu_day(&self) -> f64 {
        if self.gpu_days > 0.0 {
            self.false_alarm_days as f64 / self.gpu_days
        } else {
            0.0
        }
    }
}

/// Measures `scores` (one per row of `rows`, indices into `history.rows`) at `threshold`.
pub fn evaluate(
    history: &History,
    rows: &[usize],
    scores: &[f64],
    horizon: i64,
    threshold: f64,
) -> Metrics {
    let mut m = Metrics::default();
    let mut labelled: Vec<(f64, bool)> = Vec::with_capacity(rows.len());
    let (mut tp, mut fp) = (0usize, 0usize);
    let mut false_days = BTreeSet::new();
    let mut first_warning: Vec<Option<i64>> = vec![None; history.gpus.len()];
    let mut gpus = BTreeSet::new();
    for (&r, &score) in rows.iter().zip(scores) {
        let row = &history.rows[r];
        let Some(label) = history.label(row, horizon) else {
            continue;
        };
        gpus.insert(row.gpu);
        labelled.push((score, label));
        let warned = score >= threshold;
        match (warned, label) {
            (true, true) => {
                tp += 1;
                let first = &mut first_warning[row.gpu];
                *first = Some(first.map_or(row.at, |f| f.min(row.at)));
            }
            (true, false) => {
                fp += 1;
                false_days.insert((row.gpu, row.at.div_euclid(86_400)));
            }
            _ => {}
        }
    }
    m.rows = labelled.len();
    m.positive_rows = labelled.iter().filter(|(_, l)| *l).count();
    m.auc = auc(&mut labelled);
    m.precision = (tp + fp > 0).then(|| tp as f64 / (tp + fp) as f64);
    m.recall = (m.positive_rows > 0).then(|| tp as f64 / m.positive_rows as f64);
    m.gpus = gpus.len();
    m.false_alarm_days = false_days.len();
    for &g in &gpus {
        let record = &history.gpus[g];
        m.gpu_days += record.observed_days();
        let Some(failed) = record.first_failure() else {
            continue;
        };
        m.failing_gpus += 1;
        if let Some(at) = first_warning[g] {
            m.warned_gpus += 1;
            m.lead_hours.push((failed - at) as f64 / 3600.0);
        }
    }
    m.lead_hours.sort_by(f64::total_cmp);
    m
}

/// ROC AUC by the rank-sum (Mann–Whitney) statistic, ties sharing their mean rank.
pub fn auc(scored: &mut [(f64, bool)]) -> Option<f64> {
    let positives = scored.iter().filter(|(_, l)| *l).count() as f64;
    let negatives = scored.len() as f64 - positives;
    if positives == 0.0 || negatives == 0.0 {
        return None;
    }
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < scored.len() {
        let mut j = i;
        while j + 1 < scored.len() && scored[j + 1].0 == scored[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their mean.
        let mean_rank = (i + j + 2) as f64 / 2.0;
        rank_sum += mean_rank * scored[i..=j].iter().filter(|(_, l)| *l).count() as f64;
        i = j + 1;
    }
    Some((rank_sum - positives * (positives + 1.0) / 2.0) / (positives * negatives))
}

/// The median of sorted values.
pub fn median(sorted: &[f64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_of_perfect_random_and_tied_rankings() {
        let mut perfect = vec![(0.1, false), (0.2, false), (0.8, true), (0.9, true)];
        assert_eq!(auc(&mut perfect), Some(1.0));
        let mut reversed = vec![(0.9, false), (0.1, true)];
        assert_eq!(auc(&mut reversed), Some(0.0));
        let mut tied = vec![(0.5, false), (0.5, true)];
        assert_eq!(auc(&mut tied), Some(0.5));
        assert_eq!(auc(&mut [(0.5, true)]), None);
    }

    /// With failures rare, linfa-logistic's positive class is "healthy"; the fitted model
    /// must still score the failing rows high.
    #[test]
    fn rare_failures_still_score_high() {
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in 0..400 {
            let mut row = [0.0; N];
            let failing = i % 40 == 0;
            row[0] = if failing {
                3.0 + (i % 3) as f64
            } else {
                (i % 5) as f64 * 0.2
            };
            row[11] = (i % 7) as f64 * 0.1;
            x.push(row);
            y.push(failing);
        }
        let fitted = fit(&x, &y, 1.0).unwrap();
        assert!(fitted.weights[0] > 0.0, "{fitted:?}");
        let healthy = fitted.score(&x[1]);
        let failing = fitted.score(&x[0]);
        assert!(failing > 0.7 && healthy < 0.3, "{failing} {healthy}");
        assert!(fitted.constant[5] && fitted.weights[5] == 0.0);
        // The same holds when failures are the majority.
        let flipped: Vec<bool> = y.iter().map(|l| !l).collect();
        let inverse = fit(&x, &flipped, 1.0).unwrap();
        assert!(inverse.score(&x[0]) < inverse.score(&x[1]));
    }
}
