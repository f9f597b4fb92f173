//! The features the engine computed, read back from its findings: training never computes
//! them a second time beside the engine.

use crate::engine::risk::{Assessment, FEATURES, RiskModel, Weight};

const N: usize = FEATURES.len();

/// A model that weighs every feature 1: under it each non-zero feature is a contribution
/// with its value, so training reads the features the engine computed (held, against the
/// node's median, from the GPU's running state) instead of computing them a second time.
pub(crate) fn probe_model() -> RiskModel {
    RiskModel {
        description: "probe".into(),
        bias: 0.0,
        weights: FEATURES
            .iter()
            .map(|(name, _)| Weight {
                feature: (*name).to_string(),
                weight: 1.0,
                reason: String::new(),
            })
            .collect(),
    }
}

/// The feature vector an assessment under [`probe_model`] carries.
pub(crate) fn features_of(assessment: &Assessment) -> [f64; N] {
    let mut x = [0.0; N];
    for c in &assessment.contributions {
        if let Some(i) = FEATURES.iter().position(|(name, _)| *name == c.feature) {
            x[i] = c.value;
        }
    }
    x
}
