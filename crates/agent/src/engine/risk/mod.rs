//! Failure risk: features from a GPU's windows, a logistic model over them, and rules for
//! states that are known to be bad.
//!
//! The score is `sigmoid(bias + strongest family + ½ × the other families)`: each term
//! `weight × feature` is an operator-readable contribution ("ecc_corrected_days 4.3:
//! +2.6"), held as a decaying maximum on its failure family's time scale ([`hold`]) so a
//! warning does not flicker, and summed within its family; the strongest family counts in
//! full, the others corroborate at half ([`hold::combined`]).
//! Features compare each GPU with its own past and with its node's other GPUs
//! ([`features`], [`peers`]), from running state kept per GPU ([`state`]). Known-bad
//! states — a failed row remap, an uncorrectable memory error with its XID, a GPU off the
//! bus — are not predictions: they set the score to at least [`RULE_SCORE`] at once, named
//! by the rule.

use anyhow::Context as _;
use std::borrow::Cow;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::GpuState;
use super::window::{Summaries, WEEK};
use crate::model::GpuSample;

mod cadence;
mod features;
mod hold;
mod peers;
mod power;
mod rate;
mod state;
pub use features::{FEATURES, Signals, feature_index, features, is_likelihood_ratio};
pub use hold::{
    CORROBORATION, Evidence, FAMILIES, Family, Hold, combine_families, combined, family_of,
};
pub use peers::{PeerScratch, Peers, Shared};
pub(crate) use state::RiskState;

/// Score a known-bad rule sets at least.
pub(crate) const RULE_SCORE: f64 = 0.95;

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
const SHIPPED: &str = include_str!("../../../../../models/default-risk.toml");

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
            .with_context(|| format!("cannot read risk model {}", path.display()))?;
        RiskModel::parse(&text).with_context(|| format!("risk model {}", path.display()))
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
    /// A name of [`FEATURES`]: borrowed when assessed, so that scoring a GPU allocates no
    /// name; owned when read back from JSON.
    pub feature: Cow<'static, str>,
    pub value: f64,
    /// `weight × value`, in log-odds.
    pub contribution: f64,
}

/// A GPU's failure risk and why.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    /// 0–1.
    pub score: f64,
    /// The known-bad rule that set the score, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Every non-zero term, largest first; held terms at their held value.
    pub contributions: Vec<Contribution>,
    /// The failure families whose evidence holds, strongest first, with when it started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
}

impl Clone for Assessment {
    fn clone(&self) -> Self {
        Assessment {
            score: self.score,
            rule: self.rule.clone(),
            contributions: self.contributions.clone(),
            evidence: self.evidence.clone(),
        }
    }

    /// Into `self`'s buffers: a GPU not due to be scored repeats its last assessment into
    /// the findings of every step ([`Cadence`]), which the derived copy did by allocating
    /// the lists anew.
    fn clone_from(&mut self, source: &Self) {
        self.score = source.score;
        self.rule.clone_from(&source.rule);
        self.contributions.clone_from(&source.contributions);
        self.evidence.clone_from(&source.evidence);
    }
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

/// Everything a risk assessment reads.
pub struct RiskInput<'a> {
    pub now: i64,
    pub state: &'a GpuState,
    /// The state's windows summarised at `now` (once per step, shared with the findings).
    pub windows: &'a Summaries,
    /// This step's sample; None when the GPU is missing from the snapshot.
    pub sample: Option<&'a GpuSample>,
    /// This GPU's signals ([`Signals::of`]), computed once per step.
    pub signals: &'a Signals,
    /// The node's median GPU, computed once per round from every GPU's signals.
    pub(crate) peers: &'a Peers,
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
    let uncorrected = input.windows.week.deltas.ecc_uncorrected;
    if uncorrected > 0.0 && xid_seen(&[48, 63, 64]) {
        return Some("uncorrectable_memory_error");
    }
    None
}

/// A model's weights by feature, in [`FEATURES`] order: looked up once per round, not
/// per GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeatureWeights {
    pub bias: f64,
    pub weights: [f64; FEATURES.len()],
}

impl RiskModel {
    pub(crate) fn by_feature(&self) -> FeatureWeights {
        let mut weights = [0.0; FEATURES.len()];
        for w in &self.weights {
            if let Some(i) = FEATURES.iter().position(|(name, _)| *name == w.feature) {
                weights[i] += w.weight;
            }
        }
        FeatureWeights {
            bias: self.bias,
            weights,
        }
    }
}

/// Scores one GPU, folding this step's evidence into `hold` (the GPU's
/// [`RiskState::hold`]).
pub fn assess(model: &FeatureWeights, input: &RiskInput<'_>, hold: &mut Hold) -> Assessment {
    let mut assessment = Assessment::default();
    assess_with(model, input, hold, &mut assessment);
    assessment
}

/// [`assess`] into `into`, whose lists are refilled: a replay scores every GPU at every
/// round, and reusing the lists of the round before spares an allocation per GPU-sample.
pub(crate) fn assess_with(
    model: &FeatureWeights,
    input: &RiskInput<'_>,
    hold: &mut Hold,
    into: &mut Assessment,
) {
    let values = features(input);
    let weights = &model.weights;
    let mut raw = [0.0; FEATURES.len()];
    for ((r, w), v) in raw.iter_mut().zip(weights).zip(&values) {
        *r = w * v;
    }
    let held = hold.apply(input.now, &raw, &mut into.evidence);
    into.contributions.clear();
    into.contributions.extend(
        held.iter()
            .zip(weights)
            .zip(&FEATURES)
            .filter(|((held, _), _)| **held != 0.0)
            .map(|((&held, &weight), (name, _))| Contribution {
                feature: Cow::Borrowed(*name),
                // The value the held contribution stands for.
                value: if weight != 0.0 { held / weight } else { 0.0 },
                contribution: held,
            }),
    );
    into.contributions
        .sort_by(|a, b| b.contribution.total_cmp(&a.contribution));
    let logit = model.bias + combined(&held);
    let mut score = 1.0 / (1.0 + (-logit).exp());
    let rule = rule(input);
    if rule.is_some() {
        score = score.max(RULE_SCORE);
    }
    into.score = score;
    match (rule, &mut into.rule) {
        (Some(rule), Some(was)) if was == rule => {}
        (rule, was) => *was = rule.map(str::to_string),
    }
}

#[cfg(test)]
mod tests;
