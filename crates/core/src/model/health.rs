//! How a collection went: per collector family, per failed call, and whether the source was
//! there at all.
//!
//! Sources write it next to each [`super::Snapshot`]; the collection alert rule and the
//! exposition's self-metrics (source up, collector success and duration, failed calls) read
//! it. It is kept apart from the
//! snapshot so that health renders even when data is missing, and it lives in the model so
//! that readers need not import the sources.

use std::collections::BTreeMap;

/// How a collection went, per collector family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectHealth {
    /// False when the source itself is unavailable (NVML failed to initialise or vanished).
    pub source_up: bool,
    /// Each collector family (`memory`, `ecc`, `processes`, …) of this tick, in a fixed order.
    pub families: Vec<FamilyHealth>,
    /// Failed calls since start, by NVML function (or source operation) name. Unsupported
    /// calls are not failures: they are remembered per GPU and not asked again.
    pub errors_by_call: BTreeMap<String, u64>,
    /// Wall time of the whole collection, seconds.
    pub seconds: f64,
}

/// One collector family's outcome this tick.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyHealth {
    pub name: &'static str,
    /// Wall time spent in this family across all GPUs, seconds.
    pub seconds: f64,
    /// False when any call of the family failed on any GPU this tick.
    pub success: bool,
}
