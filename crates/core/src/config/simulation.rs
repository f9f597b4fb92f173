//! `[simulation]`: the built-in fleet `--simulate` runs, and the checks of its values.

use serde::Deserialize;

/// `[simulation]`: the built-in fleet used by `--simulate`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimulationConfig {
    /// Number of simulated GPUs (`--sim-gpus` overrides).
    pub gpus: u32,
    /// Simulated seconds per wall-clock second (`--sim-speed` overrides).
    pub speed: f64,
    /// Seed of every random draw: the same seed gives the same fleet and the same faults.
    pub seed: u64,
    /// Model name reported by every simulated GPU.
    pub model: String,
    /// Fault families placed on GPUs 1, 2, 3, … in this order (GPU 0 stays healthy as a
    /// reference). Known families: `memory_wear`, `pcie_link`, `thermal`, `fell_off_bus`,
    /// `nvlink`, `gsp_firmware`, `power_delivery`, `allocated_idle`, `ghost_process`.
    pub faults: Vec<String>,
    /// Simulated hours from start until a fault family reaches its failure point. Short by
    /// default so that `--sim-speed 600` shows every family within about a minute.
    pub fault_hours: f64,
    /// The first this many GPUs run in MIG mode (`--sim-mig` overrides), cut into GPU and
    /// compute instances of the model's real profiles with a workload each; on the last
    /// of them one instance is created 15 simulated minutes in and another destroyed at
    /// 30. The model must have MIG (an A100, H100 or H200).
    pub mig_gpus: u32,
}

impl Default for SimulationConfig {
    fn default() -> Self {
        Self {
            gpus: 8,
            speed: 1.0,
            seed: 42,
            model: "NVIDIA H100 80GB HBM3".into(),
            faults: [
                "memory_wear",
                "pcie_link",
                "thermal",
                "fell_off_bus",
                "allocated_idle",
                "ghost_process",
            ]
            .map(String::from)
            .to_vec(),
            fault_hours: 8.0,
            mig_gpus: 0,
        }
    }
}

/// Fastest simulated time: a million simulated seconds per second keeps simulated dates
/// representable for decades of wall time.
pub const MAX_SIM_SPEED: f64 = 1e6;

/// Fault families the simulator knows, as written in `[simulation] faults`.
pub const SIMULATED_FAULTS: [&str; 9] = [
    "memory_wear",
    "pcie_link",
    "thermal",
    "fell_off_bus",
    "nvlink",
    "gsp_firmware",
    "power_delivery",
    "allocated_idle",
    "ghost_process",
];

/// What a simulated model's name contains when the simulator knows its MIG profiles.
pub const MIG_MODELS: [&str; 3] = ["A100", "H100", "H200"];

impl SimulationConfig {
    /// Whether the simulated model has MIG profiles the simulator knows.
    pub(crate) fn model_has_mig(&self) -> bool {
        MIG_MODELS.iter().any(|m| self.model.contains(m))
    }

    /// Every out-of-range value, with its key.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.gpus == 0 || self.gpus > 4096 {
            out.push((
                "simulation.gpus",
                format!("{} is outside 1..4096", self.gpus),
            ));
        }
        if !(self.speed > 0.0 && self.speed <= MAX_SIM_SPEED) {
            out.push((
                "simulation.speed",
                format!("{} is outside (0, {MAX_SIM_SPEED}]", self.speed),
            ));
        }
        if !(self.fault_hours.is_finite() && self.fault_hours > 0.0) {
            out.push((
                "simulation.fault_hours",
                format!("{} must be a positive number", self.fault_hours),
            ));
        }
        for fault in &self.faults {
            if !SIMULATED_FAULTS.contains(&fault.as_str()) {
                out.push((
                    "simulation.faults",
                    format!(
                        "unknown fault family {fault:?}; known: {}",
                        SIMULATED_FAULTS.join(", ")
                    ),
                ));
            }
        }
        if self.mig_gpus > self.gpus {
            out.push((
                "simulation.mig_gpus",
                format!(
                    "{} is more than the {} simulated GPUs",
                    self.mig_gpus, self.gpus
                ),
            ));
        }
        if self.mig_gpus > 0 && !self.model_has_mig() {
            out.push((
                "simulation.mig_gpus",
                format!(
                    "the simulated model {:?} has no MIG; models with it: {}",
                    self.model,
                    MIG_MODELS.join(", ")
                ),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_needs_enough_gpus_and_a_mig_model() {
        assert!(SimulationConfig::default().problems().is_empty());
        let too_many = SimulationConfig {
            gpus: 2,
            mig_gpus: 3,
            ..SimulationConfig::default()
        };
        let problems = too_many.problems();
        assert_eq!(problems[0].0, "simulation.mig_gpus");
        assert!(problems[0].1.contains("more than the 2"), "{problems:?}");
        let no_mig = SimulationConfig {
            model: "NVIDIA L40S".into(),
            mig_gpus: 1,
            ..SimulationConfig::default()
        };
        assert!(no_mig.problems()[0].1.contains("has no MIG"));
        let h200 = SimulationConfig {
            model: "NVIDIA H200".into(),
            mig_gpus: 8,
            ..SimulationConfig::default()
        };
        assert!(h200.problems().is_empty());
    }
}
