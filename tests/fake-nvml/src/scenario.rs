//! The scenario the fake plays: which simulated fleet, how its clock runs, which faults to
//! inject and which extra processes to report. Read once, at the first `nvmlInit_v2`, from
//! the TOML file named by `FAKE_NVML_SCENARIO` (absent: the default 8-GPU fleet), plus
//! `FAKE_NVML_PROCESSES`.
//!
//! ```toml
//! [simulation]              # same keys as gpu-sentinel's [simulation]
//! gpus = 4
//! seed = 7
//! speed = 60.0              # simulated seconds per wall second (clock mode "wall")
//! faults = ["fell_off_bus"]
//! fault_hours = 1.0
//!
//! [clock]
//! mode = "wall"             # "wall": time runs at `speed` since the first nvmlInit_v2;
//!                           # "manual": time moves only through fake_nvml_advance(seconds)
//!
//! [[fault]]                 # any number
//! gpu = 1                   # omitted: every GPU and the calls that name no GPU
//! function = "nvmlDeviceGetPowerUsage"   # "*": every call
//! error = "NOT_SUPPORTED"   # NVML_ERROR_* name without the prefix; omitted: only slow
//! delay_ms = 0              # answer this much later
//! after_seconds = 0.0       # wall seconds since the first nvmlInit_v2
//! until_seconds = 30.0      # optional end
//!
//! [[vanish]]                # GPU 2 leaves the device list: the count shrinks, later
//! gpu = 2                   # GPUs move up one index (as after a hot removal)
//! after_seconds = 5.0
//!
//! [[process]]               # a host PID the GPU reports holding memory
//! gpu = 0
//! pid = 12345
//! used_memory_bytes = 1073741824
//! sm_utilization = 0.0      # 0–1
//! gpu_instance = 9          # optional: the MIG instance it runs in (GPU in MIG mode)
//! compute_instance = 0
//!
//! [[mig]]                   # GPU 2 is in MIG mode with one 1g instance per MIG device
//! gpu = 2                   # (GPU instances 7, 8, …); the simulator's own MIG GPUs
//! devices = ["MIG-5c1e0b2d-1f3a-5e6b-9c8d-7a6b5c4d3e2f"]   # are [simulation] mig_gpus
//!
//! [[set]]                   # GPU 1 reports these values from 600 s to 1200 s of
//! gpu = 1                   # *simulated* time (until_seconds optional): fields of
//! from_seconds = 600.0      # gpu-sentinel's GpuSample, merged into the simulated one
//! until_seconds = 1200.0    # (tables merge, anything else replaces); a link listed in
//! sample = { remapped_rows = { correctable = 0, uncorrectable = 1, pending = true, failure = false }, nvlink_inactive = [3] }
//! ```                       # nvlink_inactive leaves `nvlink`; `up = false` loses the GPU
//!
//! `FAKE_NVML_PROCESSES="GPU:PID:BYTES[:SM],…"` adds processes the same way, for tests that
//! spawn a child and cannot write its PID into a file first.

use std::path::Path;

use gpu_sentinel::config::{SIMULATED_FAULTS, SimulationConfig};
use gpu_sentinel::model::GpuSample;
use nvml_wrapper_sys::bindings::nvmlReturn_t;
use serde::Deserialize;

use crate::codes;

/// Environment variable naming the scenario file.
pub const SCENARIO_ENV: &str = "FAKE_NVML_SCENARIO";
/// Environment variable listing extra processes.
pub const PROCESSES_ENV: &str = "FAKE_NVML_PROCESSES";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    pub simulation: SimulationConfig,
    pub clock: ClockConfig,
    #[serde(rename = "fault")]
    pub faults: Vec<FaultSpec>,
    #[serde(rename = "process")]
    pub processes: Vec<ProcessSpec>,
    #[serde(rename = "mig")]
    pub migs: Vec<MigSpec>,
    #[serde(rename = "vanish")]
    pub vanishings: Vec<VanishSpec>,
    #[serde(rename = "set")]
    pub sets: Vec<SetSpec>,
}

/// Values a GPU reports over a window of simulated time, merged into its simulated sample:
/// how the tests drive a health component to a state and back.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    pub gpu: u32,
    #[serde(default)]
    pub from_seconds: f64,
    #[serde(default)]
    pub until_seconds: Option<f64>,
    pub sample: toml::Table,
}

impl SetSpec {
    /// Whether the window holds `seconds` of simulated time.
    pub fn active(&self, gpu: usize, seconds: f64) -> bool {
        self.gpu as usize == gpu
            && seconds >= self.from_seconds
            && self.until_seconds.is_none_or(|until| seconds < until)
    }

    /// `sample` with this spec's values merged in. A key the sample does not have is an
    /// error (a misspelt field would otherwise change nothing, silently).
    pub fn apply(&self, sample: &GpuSample) -> Result<GpuSample, String> {
        let mut value = serde_json::to_value(sample).map_err(|e| e.to_string())?;
        let change = serde_json::to_value(&self.sample).map_err(|e| e.to_string())?;
        merge(&mut value, change.clone());
        let mut merged: GpuSample =
            serde_json::from_value(value).map_err(|e| format!("set on GPU {}: {e}", self.gpu))?;
        let read_back = serde_json::to_value(&merged).map_err(|e| e.to_string())?;
        if let Some(key) = unknown_key(&change, &read_back, "") {
            return Err(format!(
                "set on GPU {}: {key} is not a sample field",
                self.gpu
            ));
        }
        let inactive = merged.nvlink_inactive.clone();
        merged.nvlink.retain(|l| !inactive.contains(&l.link));
        Ok(merged)
    }
}

/// The first key of `change` that `sample` (a merged sample, serialised) lacks.
fn unknown_key(
    change: &serde_json::Value,
    sample: &serde_json::Value,
    path: &str,
) -> Option<String> {
    let serde_json::Value::Object(change) = change else {
        return None;
    };
    for (key, value) in change {
        let here = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match sample.get(key) {
            None => return Some(here),
            Some(inner) => {
                if let Some(found) = unknown_key(value, inner, &here) {
                    return Some(found);
                }
            }
        }
    }
    None
}

/// Merges `change` into `into`: objects key by key, anything else replaced.
fn merge(into: &mut serde_json::Value, change: serde_json::Value) {
    match (into, change) {
        (serde_json::Value::Object(into), serde_json::Value::Object(change)) => {
            for (key, value) in change {
                merge(into.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (into, change) => *into = change,
    }
}

/// A GPU that leaves NVML's device list: the count shrinks and the GPUs after it move up
/// one index, as after a hot removal; its old handle answers GPU_IS_LOST.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VanishSpec {
    pub gpu: u32,
    #[serde(default)]
    pub after_seconds: f64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClockConfig {
    pub mode: ClockMode,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// Simulated time = wall time since the first `nvmlInit_v2` × `speed`.
    #[default]
    Wall,
    /// Simulated time moves only through `fake_nvml_advance`, for exact comparisons.
    Manual,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    #[serde(default)]
    pub gpu: Option<u32>,
    pub function: String,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub after_seconds: f64,
    #[serde(default)]
    pub until_seconds: Option<f64>,
}

/// A GPU in MIG mode and the UUIDs of its MIG devices, in slot order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub gpu: u32,
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub gpu: u32,
    pub pid: u32,
    pub used_memory_bytes: u64,
    #[serde(default)]
    pub sm_utilization: f64,
    /// The MIG GPU instance it runs in (its GPU in MIG mode), and its compute instance (0
    /// when left out).
    #[serde(default)]
    pub gpu_instance: Option<u32>,
    #[serde(default)]
    pub compute_instance: Option<u32>,
}

/// A fault ready to match calls.
#[derive(Debug, Clone)]
pub struct Fault {
    pub gpu: Option<u32>,
    pub function: String,
    pub error: Option<nvmlReturn_t>,
    pub delay_ms: u64,
    pub after_seconds: f64,
    pub until_seconds: Option<f64>,
}

impl Fault {
    /// Whether the fault applies to `function` on `gpu` (`None`: a call naming no GPU) at
    /// `wall` seconds since the first init.
    pub fn matches(&self, function: &str, gpu: Option<u32>, wall: f64) -> bool {
        let active =
            wall >= self.after_seconds && self.until_seconds.is_none_or(|until| wall < until);
        let function_matches = self.function == "*" || self.function == function;
        let gpu_matches = match self.gpu {
            None => true,
            Some(g) => gpu == Some(g),
        };
        active && function_matches && gpu_matches
    }
}

impl Scenario {
    /// The scenario named by the environment, checked.
    pub fn from_env() -> Result<Scenario, String> {
        let mut scenario = match std::env::var_os(SCENARIO_ENV) {
            Some(path) if !path.is_empty() => Scenario::load(Path::new(&path))?,
            _ => Scenario::default(),
        };
        if let Ok(list) = std::env::var(PROCESSES_ENV) {
            scenario
                .processes
                .extend(parse_process_list(&list).map_err(|e| format!("{PROCESSES_ENV}: {e}"))?);
        }
        scenario.check()?;
        Ok(scenario)
    }

    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read scenario {}: {e}", path.display()))?;
        Scenario::parse(&text).map_err(|e| format!("scenario {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        scenario.check()?;
        Ok(scenario)
    }

    fn check(&self) -> Result<(), String> {
        let sim = &self.simulation;
        if sim.gpus == 0 || sim.gpus > 4096 {
            return Err(format!("simulation.gpus = {} is outside 1..4096", sim.gpus));
        }
        if !(sim.speed.is_finite() && sim.speed > 0.0) {
            return Err(format!("simulation.speed = {} must be positive", sim.speed));
        }
        if !(sim.fault_hours.is_finite() && sim.fault_hours > 0.0) {
            return Err(format!(
                "simulation.fault_hours = {} must be positive",
                sim.fault_hours
            ));
        }
        for fault in &sim.faults {
            if !SIMULATED_FAULTS.contains(&fault.as_str()) {
                return Err(format!("simulation.faults: unknown family {fault:?}"));
            }
        }
        for (i, f) in self.faults.iter().enumerate() {
            if f.function.is_empty() {
                return Err(format!("fault #{}: function is empty", i + 1));
            }
            if let Some(name) = &f.error
                && codes::by_name(name).is_none()
            {
                return Err(format!(
                    "fault #{}: unknown error {name:?}; known: {}",
                    i + 1,
                    codes::NAMES.map(|(n, _)| n).join(", ")
                ));
            }
            if f.gpu.is_some_and(|g| g >= sim.gpus) {
                return Err(format!(
                    "fault #{}: gpu is past the fleet's {} GPUs",
                    i + 1,
                    sim.gpus
                ));
            }
            if !(f.after_seconds.is_finite() && f.after_seconds >= 0.0) {
                return Err(format!("fault #{}: after_seconds must be >= 0", i + 1));
            }
        }
        for (i, set) in self.sets.iter().enumerate() {
            if set.gpu >= sim.gpus {
                return Err(format!("set #{}: gpu {} is past the fleet", i + 1, set.gpu));
            }
            let healthy = GpuSample {
                up: true,
                ..GpuSample::default()
            };
            set.apply(&healthy)
                .map_err(|e| format!("set #{}: {e}", i + 1))?;
        }
        for v in &self.vanishings {
            if v.gpu >= sim.gpus {
                return Err(format!("vanish: gpu {} is past the fleet", v.gpu));
            }
        }
        for p in &self.processes {
            if p.gpu >= sim.gpus {
                return Err(format!(
                    "process {}: gpu {} is past the fleet",
                    p.pid, p.gpu
                ));
            }
            if !(0.0..=1.0).contains(&p.sm_utilization) {
                return Err(format!("process {}: sm_utilization must be 0..1", p.pid));
            }
        }
        Ok(())
    }

    /// The faults with their error names resolved (checked in [`Scenario::check`]).
    pub fn compiled_faults(&self) -> Vec<Fault> {
        self.faults
            .iter()
            .map(|f| Fault {
                gpu: f.gpu,
                function: f.function.clone(),
                error: f.error.as_deref().and_then(codes::by_name),
                delay_ms: f.delay_ms,
                after_seconds: f.after_seconds,
                until_seconds: f.until_seconds,
            })
            .collect()
    }
}

/// Parses `GPU:PID:BYTES[:SM]` entries separated by commas.
pub fn parse_process_list(list: &str) -> Result<Vec<ProcessSpec>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let parts: Vec<&str> = entry.split(':').collect();
            if !(3..=4).contains(&parts.len()) {
                return Err(format!("{entry:?} is not GPU:PID:BYTES[:SM]"));
            }
            let num = |s: &str, what: &str| {
                s.trim()
                    .parse::<u64>()
                    .map_err(|e| format!("{entry:?}: bad {what}: {e}"))
            };
            let gpu = u32::try_from(num(parts[0], "gpu")?).map_err(|e| e.to_string())?;
            let pid = u32::try_from(num(parts[1], "pid")?).map_err(|e| e.to_string())?;
            let used_memory_bytes = num(parts[2], "bytes")?;
            let sm_utilization = match parts.get(3) {
                Some(s) => s
                    .trim()
                    .parse::<f64>()
                    .map_err(|e| format!("{entry:?}: bad sm utilization: {e}"))?,
                None => 0.0,
            };
            Ok(ProcessSpec {
                gpu,
                pid,
                used_memory_bytes,
                sm_utilization,
                gpu_instance: None,
                compute_instance: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_scenario_is_the_default_fleet() {
        let s = Scenario::parse("").unwrap();
        assert_eq!(s.simulation, SimulationConfig::default());
        assert_eq!(s.clock.mode, ClockMode::Wall);
        assert!(s.faults.is_empty());
    }

    #[test]
    fn the_documented_example_parses() {
        let text = r#"
            [simulation]
            gpus = 4
            seed = 7
            speed = 60.0
            faults = ["fell_off_bus"]
            fault_hours = 1.0
            [clock]
            mode = "manual"
            [[fault]]
            gpu = 1
            function = "nvmlDeviceGetPowerUsage"
            error = "NOT_SUPPORTED"
            [[fault]]
            function = "*"
            error = "UNINITIALIZED"
            after_seconds = 2.0
            until_seconds = 4.0
            [[fault]]
            gpu = 0
            function = "nvmlDeviceGetTemperature"
            delay_ms = 250
            [[process]]
            gpu = 0
            pid = 12345
            used_memory_bytes = 1073741824
            [[vanish]]
            gpu = 2
            after_seconds = 5.0
        "#;
        let s = Scenario::parse(text).unwrap();
        assert_eq!(s.simulation.gpus, 4);
        assert_eq!(s.clock.mode, ClockMode::Manual);
        let faults = s.compiled_faults();
        assert_eq!(faults[0].error, Some(codes::NOT_SUPPORTED));
        assert!(faults[0].matches("nvmlDeviceGetPowerUsage", Some(1), 0.0));
        assert!(!faults[0].matches("nvmlDeviceGetPowerUsage", Some(0), 0.0));
        assert!(!faults[1].matches("nvmlDeviceGetCount_v2", None, 1.0));
        assert!(faults[1].matches("nvmlDeviceGetCount_v2", None, 3.0));
        assert!(faults[1].matches("nvmlDeviceGetUUID", Some(3), 3.0));
        assert!(!faults[1].matches("nvmlDeviceGetCount_v2", None, 4.0));
        assert_eq!(faults[2].error, None);
        assert_eq!(s.processes[0].pid, 12345);
        assert_eq!(s.vanishings[0].gpu, 2);
    }

    #[test]
    fn mistakes_are_explained() {
        for (text, needle) in [
            ("[simulation]\ngpus = 0\n", "simulation.gpus"),
            (
                "[[fault]]\nfunction = \"x\"\nerror = \"OOPS\"\n",
                "unknown error \"OOPS\"",
            ),
            ("[[fault]]\ngpu = 99\nfunction = \"x\"\n", "past the fleet"),
            ("[clock]\nmode = \"sundial\"\n", "sundial"),
            ("[simulation]\nfautls = []\n", "fautls"),
        ] {
            let err = Scenario::parse(text).unwrap_err();
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
        }
    }

    #[test]
    fn sets_merge_into_the_sample_and_misspelt_fields_are_refused() {
        let s = Scenario::parse(
            "[[set]]\ngpu = 1\nfrom_seconds = 60.0\nuntil_seconds = 120.0\n\
             sample = { persistence_mode = false, nvlink_inactive = [3], \
             remapped_rows = { correctable = 0, uncorrectable = 1, pending = true, failure = false } }\n",
        )
        .unwrap();
        let set = &s.sets[0];
        assert!(set.active(1, 60.0) && !set.active(1, 120.0) && !set.active(0, 60.0));
        let before = GpuSample {
            up: true,
            nvlink: (0..4)
                .map(|link| gpu_sentinel::model::NvLinkErrors {
                    link,
                    ..Default::default()
                })
                .collect(),
            ..GpuSample::default()
        };
        let after = set.apply(&before).unwrap();
        assert_eq!(after.persistence_mode, Some(false));
        assert!(after.remapped_rows.unwrap().pending);
        assert_eq!(
            after.nvlink.iter().map(|l| l.link).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        for (text, needle) in [
            (
                "[[set]]\ngpu = 1\nsample = { persistance_mode = false }\n",
                "persistance_mode is not a sample field",
            ),
            (
                "[[set]]\ngpu = 1\nsample = { pcie = { widht = 8 } }\n",
                "pcie.widht is not a sample field",
            ),
            ("[[set]]\ngpu = 1\nsample = { up = 3 }\n", "set #1"),
            ("[[set]]\ngpu = 9\nsample = {}\n", "past the fleet"),
        ] {
            let err = Scenario::parse(text).unwrap_err();
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
        }
    }

    #[test]
    fn process_lists_parse() {
        let p = parse_process_list("0:123:1024, 1:456:2048:0.5").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[1].gpu, p[1].pid, p[1].used_memory_bytes), (1, 456, 2048));
        assert_eq!(p[1].sm_utilization, 0.5);
        assert!(parse_process_list("0:abc:1").is_err());
        assert!(parse_process_list("0:1").is_err());
    }
}
