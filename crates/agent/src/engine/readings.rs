//! A GPU's raw readings at one step, kept on its findings for the rules that compare them
//! with thresholds and for reports.

use serde::Serialize;

use crate::model::GpuSample;

/// A GPU's readings at one step, as rules and reports use them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Readings {
    pub temperature_celsius: Option<f64>,
    pub memory_temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
    pub utilization: Option<f64>,
    /// Used over total memory, 0–1.
    pub(crate) memory_used_ratio: Option<f64>,
}

impl Readings {
    pub(super) fn of(sample: &GpuSample) -> Readings {
        Readings {
            temperature_celsius: sample.temperature_celsius,
            memory_temperature_celsius: sample.memory_temperature_celsius,
            power_watts: sample.power_watts,
            utilization: sample.utilization.gpu,
            memory_used_ratio: match (sample.memory.used_bytes, sample.memory.total_bytes) {
                (Some(used), Some(total)) if total > 0 => Some(used as f64 / total as f64),
                _ => None,
            },
        }
    }
}
