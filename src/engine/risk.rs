//! Failure risk: features from a GPU's windows, a logistic model over them, and rules for
//! states that are known to be bad.
//!
//! The score is `sigmoid(bias + Σ weight × feature)`; each term is a contribution an
//! operator can read ("corrected ECC 48/day: +4.1"). Known-bad states — a failed row remap,
//! an uncorrectable memory error with its XID, a GPU off the bus — are not predictions:
//! they set the score to at least [`RULE_SCORE`] at once, named by the rule.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::GpuState;
use super::window::WEEK;
use crate::model::GpuSample;

/// Score a known-bad rule sets at least.
pub const RULE_SCORE: f64 = 0.95;

/// Every feature the model can weigh, with what it measures. The order is the order of
/// [`features`]' output and of training columns.
pub const FEATURES: [(&str, &str); 13] = [
    (
        "ecc_corrected_per_day",
        "ln(1 + corrected ECC errors per day, last 24 h)",
    ),
    (
        "ecc_corrected_trend",
        "ln(1 + last-day rate) − ln(1 + the week's baseline rate), when rising",
    ),
    (
        "ecc_uncorrected_7d",
        "ln(1 + uncorrected ECC errors, last 7 days)",
    ),
    (
        "remapped_rows",
        "ln(1 + rows remapped, correctable and uncorrectable)",
    ),
    ("remap_pending", "1 when a row remap waits for a GPU reset"),
    (
        "xid_hardware_7d",
        "ln(1 + hardware-fault XIDs, last 7 days)",
    ),
    (
        "pcie_replays_vs_baseline",
        "ln(1 + PCIe replays per hour, last 24 h) − ln(1 + the week's baseline), when rising",
    ),
    (
        "pcie_replays_vs_peers",
        "ln(1 + PCIe replays per hour, last 24 h) − ln(1 + the node's median GPU), when above",
    ),
    (
        "memory_temperature_gap",
        "(memory − GPU temperature, last hour's mean, − 15 °C) / 5, when above",
    ),
    (
        "temperature_level",
        "(GPU temperature, last hour's mean, − 80 °C) / 5, when above",
    ),
    (
        "thermal_slowdown_24h",
        "share of the last 24 h in thermal slowdown",
    ),
    (
        "failed_calls_per_hour",
        "ln(1 + NVML calls failing per hour, last hour)",
    ),
    (
        "collect_slowdown",
        "ln(collection time, last hour ÷ the week's baseline), when slower",
    ),
];

/// One weighted feature of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weight {
    pub feature: String,
    pub weight: f64,
    /// Why this weight: the guidance or data it comes from.
    pub reason: String,
}

/// A logistic risk model, as stored in `models/default-risk.toml` or written by `train`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RiskModel {
    /// What the model is and where its weights come from.
    #[serde(default)]
    pub description: String,
    pub bias: f64,
    #[serde(rename = "weight")]
    pub weights: Vec<Weight>,
}

/// The model shipped in the binary.
const SHIPPED: &str = include_str!("../../models/default-risk.toml");

impl RiskModel {
    /// The shipped default model.
    pub fn shipped() -> RiskModel {
        // The shipped file is checked by a unit test; parsing it cannot fail at run time.
        RiskModel::parse(SHIPPED).unwrap_or(RiskModel {
            description: String::new(),
            bias: -6.0,
            weights: Vec::new(),
        })
    }

    pub fn load(path: &Path) -> anyhow::Result<RiskModel> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read risk model {}: {e}", path.display()))?;
        RiskModel::parse(&text).map_err(|e| anyhow::anyhow!("risk model {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<RiskModel> {
        let model: RiskModel = toml::from_str(text)?;
        for w in &model.weights {
            anyhow::ensure!(
                FEATURES.iter().any(|(name, _)| *name == w.feature),
                "unknown feature {:?}; known: {}",
                w.feature,
                FEATURES.map(|(n, _)| n).join(", ")
            );
            anyhow::ensure!(
                w.weight.is_finite(),
                "weight of {} is not a number",
                w.feature
            );
        }
        anyhow::ensure!(model.bias.is_finite(), "bias is not a number");
        Ok(model)
    }

    /// The model as TOML, with each weight's reason.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

/// One term of a score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contribution {
    pub feature: String,
    pub value: f64,
    /// `weight × value`, in log-odds.
    pub contribution: f64,
}

/// A GPU's failure risk and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    /// 0–1.
    pub score: f64,
    /// The known-bad rule that set the score, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Every non-zero term, largest first.
    pub contributions: Vec<Contribution>,
}

impl Assessment {
    /// The `n` largest positive contributions: the reasons to show.
    pub fn top(&self, n: usize) -> impl Iterator<Item = &Contribution> {
        self.contributions
            .iter()
            .filter(|c| c.contribution > 0.0)
            .take(n)
    }
}

/// What the node's GPUs look like together, for features relative to peers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Peers {
    /// Median PCIe replays per hour over the last day across GPUs with data.
    pub median_replays_per_hour: Option<f64>,
}

impl Peers {
    pub fn of<'a>(gpus: impl Iterator<Item = &'a GpuState>, now: i64) -> Peers {
        let mut rates: Vec<f64> = gpus
            .map(|g| g.windows.last_day(now))
            .filter(|d| d.seconds > 0.0)
            .map(|d| d.deltas.pcie_replays * 3600.0 / d.seconds)
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = match rates.len() {
            0 => None,
            n if n % 2 == 1 => Some(rates[n / 2]),
            n => Some((rates[n / 2 - 1] + rates[n / 2]) / 2.0),
        };
        Peers {
            median_replays_per_hour: median,
        }
    }
}

/// Everything a risk assessment reads.
pub struct RiskInput<'a> {
    pub now: i64,
    pub state: &'a GpuState,
    /// This step's sample; None when the GPU is missing from the snapshot.
    pub sample: Option<&'a GpuSample>,
    pub peers: &'a Peers,
}

/// Feature values in [`FEATURES`] order.
pub fn features(input: &RiskInput<'_>) -> [f64; FEATURES.len()] {
    let now = input.now;
    let w = &input.state.windows;
    let hour = w.last_hour(now);
    let day = w.last_day(now);
    let week = w.last_week(now);
    let base = w.baseline(now);
    let per_hour = |count: f64, seconds: f64| {
        if seconds > 0.0 {
            count * 3600.0 / seconds
        } else {
            0.0
        }
    };
    let rising = |recent: f64, baseline: f64| (recent.ln_1p() - baseline.ln_1p()).max(0.0);

    let corrected_day = day.per_day(day.deltas.ecc_corrected);
    let corrected_base = base.per_day(base.deltas.ecc_corrected);
    let replays_hour = per_hour(day.deltas.pcie_replays, day.seconds);
    let replays_base = per_hour(base.deltas.pcie_replays, base.seconds);
    let rows = input
        .sample
        .and_then(|s| s.remapped_rows)
        .map_or(0.0, |r| (r.correctable + r.uncorrectable) as f64);
    let pending = input
        .sample
        .and_then(|s| s.remapped_rows)
        .is_some_and(|r| r.pending);
    let gap = hour.memory_gap.mean().unwrap_or(0.0);
    let temp = hour.temperature.mean().unwrap_or(0.0);
    let slowdown = if day.seconds > 0.0 {
        day.thermal_slowdown_seconds / day.seconds
    } else {
        0.0
    };
    let collect_now = hour.collect_seconds.mean();
    let collect_base = base.collect_seconds.mean();
    let collect_slowdown = match (collect_now, collect_base) {
        (Some(now), Some(base)) if base > 0.0 && now > base => (now / base).ln(),
        _ => 0.0,
    };
    [
        corrected_day.ln_1p(),
        rising(corrected_day, corrected_base),
        week.deltas.ecc_uncorrected.ln_1p(),
        rows.ln_1p(),
        if pending { 1.0 } else { 0.0 },
        week.deltas.xid_hardware.ln_1p(),
        rising(replays_hour, replays_base),
        input
            .peers
            .median_replays_per_hour
            .map_or(0.0, |median| rising(replays_hour, median)),
        ((gap - 15.0) / 5.0).max(0.0),
        ((temp - 80.0) / 5.0).max(0.0),
        slowdown,
        per_hour(hour.deltas.failed_calls, hour.seconds).ln_1p(),
        collect_slowdown,
    ]
}

/// The known-bad rule that holds, if any.
pub fn rule(input: &RiskInput<'_>) -> Option<&'static str> {
    let state = input.state;
    let since = input.now - WEEK;
    let xid_seen = |wanted: &[u32]| {
        state
            .recent_xids
            .iter()
            .any(|(at, xid)| *at >= since && wanted.contains(xid))
    };
    if state.lost || xid_seen(&[79]) {
        return Some("fell_off_bus");
    }
    if input
        .sample
        .and_then(|s| s.remapped_rows)
        .is_some_and(|r| r.failure)
    {
        return Some("row_remap_failure");
    }
    let uncorrected = state.windows.last_week(input.now).deltas.ecc_uncorrected;
    if uncorrected > 0.0 && xid_seen(&[48, 63, 64]) {
        return Some("uncorrectable_memory_error");
    }
    None
}

/// Scores one GPU.
pub fn assess(model: &RiskModel, input: &RiskInput<'_>) -> Assessment {
    let values = features(input);
    let mut contributions: Vec<Contribution> = model
        .weights
        .iter()
        .filter_map(|w| {
            let i = FEATURES.iter().position(|(name, _)| *name == w.feature)?;
            let value = values[i];
            (value != 0.0).then(|| Contribution {
                feature: w.feature.clone(),
                value,
                contribution: w.weight * value,
            })
        })
        .collect();
    contributions.sort_by(|a, b| b.contribution.total_cmp(&a.contribution));
    let logit = model.bias + contributions.iter().map(|c| c.contribution).sum::<f64>();
    let mut score = 1.0 / (1.0 + (-logit).exp());
    let rule = rule(input);
    if rule.is_some() {
        score = score.max(RULE_SCORE);
    }
    Assessment {
        score,
        rule: rule.map(str::to_string),
        contributions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_model_parses_and_names_known_features_with_reasons() {
        let model = RiskModel::parse(SHIPPED).unwrap();
        assert!(!model.weights.is_empty());
        for w in &model.weights {
            assert!(!w.reason.trim().is_empty(), "{} has no reason", w.feature);
        }
    }

    #[test]
    fn unknown_features_are_refused() {
        let err = RiskModel::parse(
            "bias = 0.0\n[[weight]]\nfeature = \"vibes\"\nweight = 1.0\nreason = \"x\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("vibes"));
    }
}
